"""Train a MusicPerformer: `python train.py --help` (the code is apps/train.py)."""
from apps.train import main

if __name__ == "__main__":
    raise SystemExit(main())
