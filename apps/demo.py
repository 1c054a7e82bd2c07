"""`make demo`: build the default corpus, train the demo model, generate a piece, say where it is.

    python -m apps.demo [--out runs/demo] [--max-steps N] [--tokens 768] [--seed 0]

Training resumes in --out when a run is already there (a finished run is not trained again), so the
command can be repeated to sample new pieces with other seeds.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Sequence

from apps import generate, train
from apps.cli import OneLineParser, seed_value


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog="spe-demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/demo", help="run directory (default: %(default)s)")
    parser.add_argument("--max-steps", type=int, default=None, help="training steps (default: the config's)")
    parser.add_argument("--tokens", type=int, default=768, help="tokens to generate (default: %(default)s)")
    parser.add_argument("--seed", type=seed_value, default=0, help="sampling seed (default: %(default)s)")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    train_args = ["--config", "demo", "--out", args.out, "--resume"]
    if args.max_steps:
        train_args += ["--max-steps", str(args.max_steps)]
    status = train.main(train_args)
    if status:
        return status
    song = Path(args.out) / f"song_seed{args.seed}.mid"
    status = generate.main(["--checkpoint", args.out, "--out", str(song), "--tokens", str(args.tokens),
                            "--seed", str(args.seed)])
    if status:
        return status
    minutes = (time.perf_counter() - start) / 60
    print(f"\ndemo done in {minutes:.1f} min. Run directory: {args.out}\n"
          f"  piece:      {song}\n  tokens:     {song.with_suffix('.txt')}\n"
          f"  piano roll: {song.with_suffix('.png')}\n  audio:      {song.with_suffix('.wav')} (.ogg beside it)\n"
          f"  training:   {Path(args.out) / 'metrics.csv'} (tensorboard --logdir {Path(args.out) / 'tb'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
