"""Evaluate trained MusicPerformers: `python evaluate.py --help` (the code is apps/evaluate.py)."""
from apps.evaluate import main

if __name__ == "__main__":
    raise SystemExit(main())
