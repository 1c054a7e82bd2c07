"""Generate a piece with a trained MusicPerformer: `python generate.py --help` (the code is apps/generate.py)."""
from apps.generate import main

if __name__ == "__main__":
    raise SystemExit(main())
