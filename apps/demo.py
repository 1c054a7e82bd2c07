"""`make demo`: the project's main jobs, briefly, each through the command a user runs.

    python -m apps.demo [--out runs/demo] [--seed 0] [--max-steps 60]

1. a whole pop song with a form from the shipped default model (no training): `generate.py --form auto`;
2. its first 4 bars continued for 8 more: `generate.py --prompt ... --prompt-bars 4 --bars 8`;
3. a short training run on the bundled corpus (music21's scores): `train.py --config demo`, then a
   piece from it.

Every file written is listed at the end. Training resumes in --out/train when a run is there, so the
demo can be repeated with other seeds.
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
    parser.add_argument("--out", default="runs/demo", help="output folder (default: %(default)s)")
    parser.add_argument("--seed", type=seed_value, default=0, help="sampling seed (default: %(default)s)")
    parser.add_argument("--max-steps", type=int, default=60,
                        help="steps of the short training run (default: %(default)s; 0 skips it)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    start = time.perf_counter()
    song, continued, run = out / f"song_seed{args.seed}.mid", out / f"continued_seed{args.seed}.mid", out / "train"
    steps = [
        ("a whole song with a form, from the shipped model",
         lambda: generate.main(["--out", str(song), "--form", "auto", "--seed", str(args.seed)])),
        ("its first 4 bars, continued for 8 bars",
         lambda: generate.main(["--out", str(continued), "--prompt", str(song), "--prompt-bars", "4",
                                "--bars", "8", "--seed", str(args.seed)])),
    ]
    if args.max_steps:
        trained = out / f"trained_seed{args.seed}.mid"
        steps += [(f"a {args.max_steps}-step training run on the bundled corpus",
                   lambda: train.main(["--config", "demo", "--out", str(run), "--resume",
                                       "--max-steps", str(args.max_steps)])),
                  ("a piece from that run",
                   lambda: generate.main(["--checkpoint", str(run), "--out", str(trained), "--tokens", "512",
                                          "--seed", str(args.seed), "--no-audio"]))]
    for number, (what, step) in enumerate(steps, 1):
        print(f"\n== demo {number}/{len(steps)}: {what}", flush=True)
        status = step()
        if status:
            return status
    minutes = (time.perf_counter() - start) / 60
    print(f"\ndemo done in {minutes:.1f} min.\n"
          f"  a song with a form: {song} (audio {song.with_suffix('.ogg')}, piano roll {song.with_suffix('.png')},"
          f" tokens {song.with_suffix('.txt')})\n"
          f"  its continuation:   {continued} (and its .ogg, .png, .txt)")
    if args.max_steps:
        print(f"  training run:       {run} (metrics.csv; tensorboard --logdir {run / 'tb'})\n"
              f"  a piece from it:    {out / f'trained_seed{args.seed}.mid'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
