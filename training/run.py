"""How a training run starts (fresh, resumed or fine-tuned) and the run itself, from a request.

    request = RunRequest(config="demo", out="runs/demo", resume=True)   # what spe-train was asked
    plan = plan_run(request)                   # config, run folder and start, before anything is written
    status = execute_run(plan, DistEnv.from_environment())   # 0, or 128 + signal after a stop checkpoint
    status = run_training(request, dist_env)   # both

The start:

* resume: `resume` and the run folder holds a complete checkpoint: the newest one, with the run's
  saved config (then the overrides); `config` and `init_from` are ignored, with a warning;
* fine-tune: `init_from` names a model (`training.finetune`): its weights, a fresh optimizer and
  schedule, step 0;
* fresh: otherwise, from `config` (DEFAULT_CONFIG when None). `resume` without a checkpoint starts
  fresh, with a warning.

A run folder holds one run: without `resume`, a folder that already holds checkpoints is refused
(ValueError), when planning and again once its RunLock is held (a run that ended meanwhile).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch.distributed as dist

from data.build import prepare_corpus
from model import resolve_device
from training.checkpoint import list_checkpoints, read_meta
from training.checkpoint_store import RunLock, clean_stale, newest_complete
from training.config import RunConfig, apply_overrides, load_config
from training.distributed import DistEnv
from training.finetune import InitSource, check_vocabulary, finetune_config, init_weights, resolve_source
from training.trainer import Trainer

logger = logging.getLogger(__name__)

DEFAULT_CONFIG = "demo"  # shipped config of a run that names none


@dataclass(frozen=True)
class RunRequest:
    """What a training command asks for (spe-train's arguments)."""

    config: str | None = None  # YAML file or shipped config name (None: DEFAULT_CONFIG, or the source's)
    out: str | Path | None = None  # run folder (None: runs/<config name>, or runs/finetune_<source name>)
    init_from: str | None = None  # fine-tune from: 'pretrained', a shipped model's name, a run or checkpoint
    resume: bool = False  # continue from the run folder's newest complete checkpoint (fresh if none)
    overrides: tuple[str, ...] = ()  # "section.key=value" config overrides, applied in order
    max_steps: int | None = None  # overrides train.max_steps (after `overrides`)


@dataclass(frozen=True)
class RunPlan:
    """How a run starts, decided before anything is written into its folder."""

    cfg: RunConfig  # the resolved config
    out: Path  # the run folder
    resume_from: Path | None  # the checkpoint a resumed run continues (None: the run starts at step 0)
    source: InitSource | None  # the model a fine-tuning run starts from (None: fresh or resumed)

    @property
    def start(self) -> Literal["fresh", "resume", "finetune"]:
        """How the run starts."""
        if self.resume_from is not None:
            return "resume"
        return "finetune" if self.source is not None else "fresh"


def refuse_existing_run(out: Path) -> None:
    """ValueError when `out` already holds checkpoints (a new run needs its own folder)."""
    if list_checkpoints(out):
        raise ValueError(f"{out} already holds a run; pass --resume or choose another --out")


def plan_run(request: RunRequest, is_main: bool = True) -> RunPlan:
    """Resolve the config, the run folder and the start (see the module docstring). The main process
    first removes what a killed run left in the folder's checkpoints (`clean_stale`)."""
    source = resolve_source(request.init_from) if request.init_from else None
    config_name = Path(request.config or DEFAULT_CONFIG).stem
    if source is not None and not request.config:
        config_name = f"finetune_{source.name}"
    out = Path(request.out or Path("runs") / config_name)
    overrides = list(request.overrides)
    if request.max_steps is not None:
        overrides.append(f"train.max_steps={request.max_steps}")
    if is_main:
        clean_stale(out)  # what a killed run left: temporary, swapped-out and half-pruned folders
    resume_from = newest_complete(out) if request.resume else None
    if resume_from is not None:
        if request.config or request.init_from:
            logger.warning("--resume: using the run's saved config and weights, not %s",
                           request.config or request.init_from)
        cfg = apply_overrides(RunConfig.from_dict(read_meta(resume_from)["config"], str(resume_from)),
                              overrides)
        return RunPlan(cfg, out, resume_from=resume_from, source=None)
    if request.resume:
        logger.warning("--resume: no checkpoint in %s, starting from scratch", out)
    else:
        refuse_existing_run(out)
    cfg = finetune_config(source, request.config, overrides) if source is not None \
        else load_config(request.config or DEFAULT_CONFIG, overrides)
    return RunPlan(cfg, out, resume_from=None, source=source)


def execute_run(plan: RunPlan, dist_env: DistEnv) -> int:
    """Build the corpus and the trainer, then train as planned into plan.out; returns the exit status
    (0, or 128 + signal after a stop checkpoint). The main process holds the folder's RunLock; a
    process group joined here is left before returning."""
    try:
        # one training per run folder: taken once the config is known good, before anything is written
        with RunLock(plan.out) if dist_env.rank == 0 else contextlib.nullcontext():
            return _train(plan, dist_env)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _train(plan: RunPlan, dist_env: DistEnv) -> int:
    if plan.resume_from is None:
        refuse_existing_run(plan.out)  # a run that ended while this one started
    cfg = plan.cfg
    device = resolve_device(cfg.train.device, dist_env.local_rank)
    if dist_env.world > 1:
        dist_env.init(device)
    corpus = prepare_corpus(cfg.data, is_main=dist_env.rank == 0, barrier=dist_env.barrier)
    trainer = Trainer(cfg, corpus, plan.out, dist_env, device)
    if plan.resume_from is not None:
        trainer.resume(plan.resume_from)
    elif plan.source is not None:
        check_vocabulary(plan.source, trainer.tokenizer)
        init_weights(trainer.model, plan.source, plan.out, write_record=dist_env.rank == 0)
    return trainer.fit()


def run_training(request: RunRequest, dist_env: DistEnv) -> int:
    """`plan_run` then `execute_run`: a whole training command; returns its exit status."""
    return execute_run(plan_run(request, is_main=dist_env.rank == 0), dist_env)
