"""spe-train: train a MusicPerformer on a token corpus: `python train.py [--config demo] [--out runs/demo]`.

    python train.py                                   # demo config on the default (music21) corpus
    python train.py --config pop_sine_gated --set train.batch_size=2 --max-steps 5000
    python train.py --out runs/demo --resume          # continue exactly where the run stopped
    python train.py --init-from pretrained --set data.kind=midi_folder --set data.source=my_midi/
                                                      # fine-tune (training/finetune.py)
    torchrun --nproc_per_node=4 train.py --config pop_ape   # data-parallel (gloo on CPU, nccl on GPU)

The run directory holds config.yaml, metrics.csv, train.log, tb/ (TensorBoard) and checkpoints/.
Only rank 0 writes. AdamW, linear warm-up then cosine decay to min_lr, gradient clipping, FAVOR+
feature redraws (with probability p per step, or every K steps), validation every eval_every steps,
checkpoints every ckpt_every steps, at the end, and on Ctrl-C / SIGTERM. Resuming restores model,
optimizer, schedule, step, data position and every RNG, so the loss sequence is that of an
uninterrupted run. A NaN/inf loss stops training with a message and exit status 1; bad input
(config, corpus) exits with one line on stderr and status 2, before anything is written; a stop
signal exits with 128 + its number after the checkpoint (exit statuses: apps/cli.py).
"""

from __future__ import annotations

import argparse
import logging

from apps.cli import OneLineParser, run_app
from training.distributed import DistEnv
from training.run import DEFAULT_CONFIG, RunRequest, run_training
from training.trainer import TrainingDiverged


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = OneLineParser(prog="spe-train", description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=None,
                        help=f"YAML file or name of a shipped config (default: {DEFAULT_CONFIG})")
    parser.add_argument("--out", default=None, help="run directory (default: runs/<config name>)")
    parser.add_argument("--max-steps", type=int, default=None, help="override train.max_steps")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. --set train.lr=1e-4 (repeatable)")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the run directory's newest complete checkpoint (fresh if none)")
    parser.add_argument("--init-from", default=None, metavar="MODEL",
                        help="fine-tune: start from the weights of 'pretrained', a run or a checkpoint "
                             "directory (its model config; fresh optimizer and schedule, step 0)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point of `spe-train` / `python train.py`; returns the exit status."""
    args = parse_args(argv)
    dist_env = DistEnv.from_environment()
    logging.basicConfig(level=logging.INFO if dist_env.rank == 0 else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    request = RunRequest(config=args.config, out=args.out, init_from=args.init_from, resume=args.resume,
                         overrides=tuple(args.overrides), max_steps=args.max_steps)
    return run_app("spe-train", lambda: run_training(request, dist_env), failures=(TrainingDiverged,))


if __name__ == "__main__":
    raise SystemExit(main())
