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
import contextlib
import logging
from pathlib import Path

import torch.distributed as dist

from apps.cli import OneLineParser, run_app
from data.build import prepare_corpus
from model import resolve_device
from training import finetune
from training.checkpoint import list_checkpoints, read_meta
from training.checkpoint_store import RunLock, clean_stale, newest_complete
from training.config import RunConfig, apply_overrides, load_config
from training.distributed import DistEnv
from training.trainer import Trainer, TrainingDiverged

logger = logging.getLogger(__name__)

DEFAULT_CONFIG = "demo"  # shipped config trained by `python train.py`


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
    try:
        return run_app("spe-train", lambda: run(args, dist_env), failures=(TrainingDiverged,))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run(args: argparse.Namespace, dist_env: DistEnv) -> int:
    """Resolve config, corpus and run directory, then train; returns the exit status."""
    source = finetune.resolve_source(args.init_from) if args.init_from else None
    config_name = Path(args.config or DEFAULT_CONFIG).stem
    if source is not None and not args.config:
        config_name = f"finetune_{source.name}"
    out = Path(args.out or Path("runs") / config_name)
    overrides = list(args.overrides)
    if args.max_steps is not None:
        overrides.append(f"train.max_steps={args.max_steps}")
    if dist_env.rank == 0:
        clean_stale(out)  # what a killed run left: temporary, swapped-out and half-pruned folders
    resume_from = newest_complete(out) if args.resume else None
    if resume_from is not None:
        if args.config or args.init_from:
            logger.warning("--resume: using the run's saved config and weights, not %s",
                           args.config or args.init_from)
        cfg = apply_overrides(RunConfig.from_dict(read_meta(resume_from)["config"], str(resume_from)),
                              overrides)
    else:
        if args.resume:
            logger.warning("--resume: no checkpoint in %s, starting from scratch", out)
        elif list_checkpoints(out):
            raise ValueError(f"{out} already holds a run; pass --resume or choose another --out")
        cfg = finetune.finetune_config(source, args.config, overrides) if source is not None \
            else load_config(args.config or DEFAULT_CONFIG, overrides)
    # one training per run folder: taken once the config is known good, before anything is written
    with RunLock(out) if dist_env.rank == 0 else contextlib.nullcontext():
        return train(args, cfg, dist_env, source, out, resume_from)


def train(args: argparse.Namespace, cfg: RunConfig, dist_env: DistEnv, source, out: Path,
          resume_from: Path | None) -> int:
    """Build the corpus and the trainer, then fresh, resumed or fine-tuned training into `out`."""
    if resume_from is None and list_checkpoints(out):  # a run that ended while this one started
        raise ValueError(f"{out} already holds a run; pass --resume or choose another --out")
    device = resolve_device(cfg.train.device, dist_env.local_rank)
    if dist_env.world > 1:
        dist_env.init(device)
    corpus = prepare_corpus(cfg.data, is_main=dist_env.rank == 0, barrier=dist_env.barrier)
    trainer = Trainer(cfg, corpus, out, dist_env)
    if source is not None and resume_from is None:
        finetune.check_vocabulary(source, trainer.tokenizer)
    if resume_from is not None:
        trainer.resume(resume_from)
    elif source is not None:
        finetune.init_weights(trainer.model, source, out, write_record=dist_env.rank == 0)
    return trainer.fit()


if __name__ == "__main__":
    raise SystemExit(main())
