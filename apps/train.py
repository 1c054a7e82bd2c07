"""Train a MusicPerformer on a token corpus: `python train.py [--config demo] [--out runs/demo]`.

    python train.py                                   # demo config on the default (music21) corpus
    python train.py --config pop_sine_gated --set train.batch_size=2 --max-steps 5000
    python train.py --out runs/demo --resume          # continue exactly where the run stopped
    python train.py --init-from pretrained --set data.kind=midi_folder --set data.source=my_midi/
                                                      # fine-tune (apps/finetune.py)
    torchrun --nproc_per_node=4 train.py --config pop_ape   # data-parallel (gloo on CPU, nccl on GPU)

The run directory holds config.yaml, metrics.csv, train.log, tb/ (TensorBoard) and checkpoints/.
Only rank 0 writes. AdamW, linear warm-up then cosine decay to min_lr, gradient clipping, FAVOR+
feature redraws (with probability p per step, or every K steps), validation every eval_every steps,
checkpoints every ckpt_every steps, at the end, and on Ctrl-C / SIGTERM. Resuming restores model,
optimizer, schedule, step, data position and every RNG, so the loss sequence is that of an
uninterrupted run. A NaN/inf loss stops training with a message and exit status 1; bad input
(config, corpus) exits with one line on stderr and status 2, before anything is written.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import logging
import math
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler
from tqdm.auto import tqdm

from apps import finetune
from apps.checkpoint import capture_rng, list_checkpoints, read_meta, resolve_checkpoint, restore_rng, \
    restore_training, save_checkpoint
from apps.config import RunConfig, apply_overrides, load_config, save_config
from model import MusicPerformer
from tokenization import TokenizationError

logger = logging.getLogger(__name__)

DEFAULT_CONFIG = "demo"  # shipped config trained by `python train.py`
IGNORE_INDEX = -100  # target id of padding, left out of the loss
CSV_FIELDS = ("step", "epoch", "loss", "lr", "grad_norm", "tokens_per_s", "val_loss", "elapsed_s")
TOKENIZER_OF_FORMAT = {"remi": "REMITokenizer", "groove": "GrooveTokenizer"}


class TrainingDiverged(RuntimeError):
    """The training loss became NaN or infinite."""


# ------------------------------------------------------------------------------------ CLI
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="spe-train", description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=None,
                        help=f"YAML file or name of a shipped config (default: {DEFAULT_CONFIG})")
    parser.add_argument("--out", default=None, help="run directory (default: runs/<config name>)")
    parser.add_argument("--max-steps", type=int, default=None, help="override train.max_steps")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. --set train.lr=1e-4 (repeatable)")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the run directory's latest checkpoint (fresh if none)")
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
        return run(args, dist_env)
    except (ValueError, OSError, TokenizationError) as error:
        print(f"spe-train: error: {error}", file=sys.stderr)
        return 2
    except TrainingDiverged as error:
        print(f"spe-train: {error}", file=sys.stderr)
        return 1
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
    resume_from = resolve_checkpoint(out) if args.resume and list_checkpoints(out) else None
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
    device = resolve_device(cfg.train.device, dist_env.local_rank)
    if dist_env.world > 1:
        dist_env.init(device)
    corpus = prepare_corpus(cfg, dist_env)
    if source is not None and resume_from is None:
        finetune.check_vocabulary(source, corpus.tokenizer)
    trainer = Trainer(cfg, corpus, out, dist_env)
    if resume_from is not None:
        trainer.resume(resume_from)
    elif source is not None:
        finetune.init_weights(trainer.model, source, out, write_record=dist_env.rank == 0)
    return trainer.fit()


# ---------------------------------------------------------------------------- distributed
@dataclass
class DistEnv:
    rank: int  # global rank of this process
    local_rank: int  # rank on this machine (selects the GPU)
    world: int  # number of processes

    @classmethod
    def from_environment(cls) -> DistEnv:
        """The torchrun variables (RANK, LOCAL_RANK, WORLD_SIZE), single process without them."""
        return cls(rank=int(os.environ.get("RANK", 0)), local_rank=int(os.environ.get("LOCAL_RANK", 0)),
                   world=int(os.environ.get("WORLD_SIZE", 1)))

    def init(self, device: torch.device) -> None:
        """Join the process group: nccl for CUDA devices, gloo on CPU."""
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def mean(self, values: list[float], device: torch.device) -> list[float]:
        """Average of each value across processes."""
        if self.world == 1:
            return values
        tensor = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(tensor)
        return (tensor / self.world).tolist()

    def total(self, values: list[float], device: torch.device) -> list[float]:
        """Sum of each value across processes."""
        return [v * self.world for v in self.mean(values, device)]

    def gather(self, value: Any) -> list[Any]:
        """`value` of every process, in rank order (in memory only)."""
        if self.world == 1:
            return [value]
        values: list[Any] = [None] * self.world
        dist.all_gather_object(values, value)
        return values


# -------------------------------------------------------------------------------- corpus
BUILDER_OF_KIND = {"default": "music21", "midi_folder": "midi_folder", "pop1k7": "pop1k7", "pop909": "pop909",
                   "groove": "groove", "trio": "groove"}  # data.kind -> the "builder" of its summary.json
def prepare_corpus(cfg: RunConfig, dist_env: DistEnv):
    """Load the configured corpus, building it first (on rank 0) when it is not there yet."""
    import data

    root = Path(cfg.data.root)
    if dist_env.rank == 0 and not (root / "summary.json").is_file():
        logger.info("building the %s corpus in %s", cfg.data.kind, root)
        build_corpus(cfg, root, data)
    dist_env.barrier()
    corpus = data.load_corpus(root)
    built_by = corpus.summary.get("builder")
    if built_by != BUILDER_OF_KIND[cfg.data.kind]:
        raise ValueError(f"corpus {root} was built by the {built_by} builder, but data.kind is {cfg.data.kind} "
                         f"(set data.root to another folder)")
    name = type(corpus.tokenizer).__name__
    if name != TOKENIZER_OF_FORMAT[cfg.data.format]:
        raise ValueError(f"corpus {root} uses {name}, but data.format is {cfg.data.format}")
    saved = corpus.tokenizer.config().get("time_signatures")
    if cfg.data.format == "remi" and saved != cfg.data.time_signatures:
        raise ValueError(f"corpus {root} was built with time_signatures={saved}, but "
                         f"data.time_signatures is {cfg.data.time_signatures} (use another data.root)")
    return corpus


def build_corpus(cfg: RunConfig, root: Path, data) -> None:
    """Tokenise the raw input named by the data section into `root`."""
    kind, source, limit = cfg.data.kind, cfg.data.source, cfg.data.max_pieces
    if kind in ("midi_folder", "pop1k7", "pop909", "groove") and not source:
        raise ValueError(f"corpus {root} is not built yet: set data.source to the raw {kind} folder "
                         f"(--set data.source=PATH)")
    if kind == "trio":
        data.build_groove_corpus(None, root, **({"trio_pieces": limit} if limit else {}))
    elif kind == "groove":
        data.build_groove_corpus(source, root)
    else:
        from remi import REMITokenizer

        tokenizer = REMITokenizer(time_signatures=cfg.data.time_signatures)
        if kind == "default":
            data.build_default_corpus(root, tokenizer, max_chorales=limit)
        elif kind == "midi_folder":
            data.build_midi_folder_corpus(source, root, tokenizer)
        elif kind == "pop909":
            data.build_pop909_corpus(source, root, tokenizer)
        else:
            data.build_pop1k7_corpus(source, root, tokenizer)


# ------------------------------------------------------------------------------- schedule
def learning_rate(step: int, cfg: RunConfig) -> float:
    """Linear warm-up to lr over warmup_steps, then cosine decay to min_lr at max_steps."""
    t = cfg.train
    if step < t.warmup_steps:
        return t.lr * (step + 1) / t.warmup_steps
    progress = min(1.0, (step - t.warmup_steps) / max(1, t.max_steps - t.warmup_steps))
    return t.min_lr + 0.5 * (t.lr - t.min_lr) * (1.0 + math.cos(math.pi * progress))


def make_optimizer(model: torch.nn.Module, cfg: RunConfig) -> torch.optim.AdamW:
    """AdamW; weight decay on weight matrices only (not on biases, norms or the SPE parameters)."""
    decay, no_decay = [], []
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
            (decay if parameter.dim() >= 2 and not name.startswith("pe.") else no_decay).append(parameter)
    groups = [{"params": decay, "weight_decay": cfg.train.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.train.lr, betas=cfg.train.betas)


# ----------------------------------------------------------------------------------- data
class BatchStream:
    """Endless batches over epochs, resumable at (epoch, position): each epoch re-draws the crops
    (dataset.set_epoch) and shuffles with DistributedSampler (seed + epoch); each process reads its
    own shard. Randomness never comes from the global RNGs."""

    def __init__(self, dataset, batch_size: int, seed: int, dist_env: DistEnv, num_workers: int,
                 pin_memory: bool) -> None:
        self.dataset, self.batch_size, self.seed = dataset, batch_size, seed
        self.dist_env, self.num_workers, self.pin_memory = dist_env, num_workers, pin_memory
        self.epoch = 0  # epoch in progress
        self.position = 0  # batches of this epoch already consumed
        self._iterator = None

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets), each (B, N) int64."""
        while True:
            if self._iterator is None:
                self._iterator = self._start_epoch()
            batch = next(self._iterator, None)
            if batch is not None:
                self.position += 1
                inputs, targets = batch
                return inputs.long(), targets.long()
            self.epoch, self.position, self._iterator = self.epoch + 1, 0, None

    def _start_epoch(self):
        self.dataset.set_epoch(self.epoch)
        sampler = DistributedSampler(self.dataset, num_replicas=self.dist_env.world,
                                     rank=self.dist_env.rank, shuffle=True, seed=self.seed, drop_last=True)
        sampler.set_epoch(self.epoch)
        indices = list(sampler)
        if len(indices) < self.batch_size:
            raise ValueError(f"the training set has {len(self.dataset)} crops: too few for batch size "
                             f"{self.batch_size} x {self.dist_env.world} processes")
        indices = indices[self.position * self.batch_size:]
        loader = DataLoader(self.dataset, batch_size=self.batch_size, sampler=indices, drop_last=True,
                            num_workers=self.num_workers, pin_memory=self.pin_memory,
                            generator=torch.Generator().manual_seed(self.seed + self.epoch))
        return iter(loader)


# -------------------------------------------------------------------------------- trainer
class Trainer:
    """One training run (one process of it under torchrun)."""

    def __init__(self, cfg: RunConfig, corpus, out: Path, dist_env: DistEnv) -> None:
        from data import CropDataset, ValidationSet

        self.cfg, self.corpus, self.out, self.dist = cfg, corpus, out, dist_env
        self.is_main = dist_env.rank == 0
        self.device = resolve_device(cfg.train.device, dist_env.local_rank)
        self.bf16 = cfg.train.precision == "bf16" or (cfg.train.precision == "auto"
                                                      and self.device.type == "cuda")
        self.tokenizer = corpus.tokenizer
        train_pieces, valid_pieces = corpus.pieces("train"), corpus.pieces("valid")
        if not train_pieces:
            raise ValueError(f"corpus {cfg.data.root} has no training pieces")
        d = cfg.data
        train_set = CropDataset(train_pieces, self.tokenizer, crop_len=d.crop_len, transpose=d.transpose,
                                seed=cfg.train.seed, samples_per_piece=d.samples_per_piece,
                                max_bars=d.max_bars)
        self.valid_set = ValidationSet(valid_pieces, self.tokenizer, crop_len=d.crop_len, max_len=d.crop_len,
                                       seed=cfg.train.seed).crops  # fixed, untransposed crops
        self.stream = BatchStream(train_set, cfg.train.batch_size, cfg.train.seed, dist_env,
                                  cfg.train.num_workers, pin_memory=self.device.type == "cuda")
        if cfg.train.max_epochs is not None:
            steps = cfg.train.max_epochs * (len(train_set) // (cfg.train.batch_size * dist_env.world))
            if steps < 1:
                raise ValueError(f"the training set has {len(train_set)} crops: too few for batch size "
                                 f"{cfg.train.batch_size} x {dist_env.world} processes")
            self.cfg = cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, max_steps=steps))
            logger.info("%d epochs = %d steps", cfg.train.max_epochs, steps)

        torch.manual_seed(cfg.train.seed)  # identical initialisation on every process
        self.model = MusicPerformer(cfg.model_config(self.tokenizer.vocab_size)).to(self.device)
        self.optimizer = make_optimizer(self.model, cfg)
        self.ddp = (DistributedDataParallel(self.model, device_ids=[self.device.index]
                                            if self.device.type == "cuda" else None)
                    if dist_env.world > 1 else self.model)
        self.redraw_rng = torch.Generator().manual_seed(cfg.train.seed + 1)  # same on every process
        torch.manual_seed(cfg.train.seed + 7919 * dist_env.rank)  # dropout / SPE noise per process
        self.step = 0
        self.resumed = False
        self.stop_signal: int | None = None

    # ------------------------------------------------------------------ resume
    def resume(self, checkpoint: Path) -> None:
        """Restore everything saved by `save` (the run continues as if never interrupted)."""
        saved = read_meta(checkpoint)["tokenizer"]
        if saved != self.tokenizer.to_dict():
            raise ValueError(f"checkpoint {checkpoint} was trained with another tokenizer than "
                             f"corpus {self.cfg.data.root}")
        state = restore_training(checkpoint, self.model, self.optimizer)
        self.step = state.step
        self.stream.epoch, self.stream.position = state.epoch, int(state.extra["position"])
        if len(state.rng) != self.dist.world:
            logger.warning("checkpoint has RNG states of %d processes, this run has %d",
                           len(state.rng), self.dist.world)
        rng = state.rng[self.dist.rank % len(state.rng)]
        restore_rng(rng)
        self.redraw_rng.set_state(rng["redraw"])
        self.resumed = True
        logger.info("resumed from %s at step %d (epoch %d)", checkpoint, self.step, state.epoch)

    def save(self) -> None:
        """Checkpoint of the current step (collective: every process calls it, rank 0 writes)."""
        rng = self.dist.gather({**capture_rng(), "redraw": self.redraw_rng.get_state()})
        if self.is_main:
            save_checkpoint(self.out, model=self.model, tokenizer=self.tokenizer, config=self.cfg,
                            step=self.step, epoch=self.stream.epoch, optimizer=self.optimizer,
                            scheduler={"kind": "warmup_cosine", "step": self.step,
                                       "lr": learning_rate(self.step, self.cfg)},
                            extra={"position": self.stream.position}, rng=rng,
                            keep=self.cfg.train.keep_checkpoints)
        self.dist.barrier()

    # -------------------------------------------------------------------- loop
    def fit(self) -> int:
        """Train to max_steps (or a stop signal); returns the exit status."""
        t = self.cfg.train
        log = RunLog(self.out, self.cfg, resume_step=self.step if self.resumed else None) \
            if self.is_main else None
        logger.info("model: %s parameters, pe=%s, attention kernel %s, device %s%s, %d process(es)",
                    f"{self.model.num_parameters():,}", self.cfg.model.pe, self.model.attention_kernel,
                    self.device, " (bf16 autocast)" if self.bf16 else "", self.dist.world)
        previous = install_stop_handlers(self)
        progress = tqdm(total=t.max_steps, initial=self.step, desc="train", unit="step",
                        disable=not self.is_main, dynamic_ncols=True)
        window = Window()
        val_loss = math.nan
        start = time.perf_counter()
        try:
            while self.step < t.max_steps:
                loss, grad_norm, tokens = self.train_step()
                window.add(loss, grad_norm, tokens)
                progress.update(1)
                row = None
                if self.step % t.log_every == 0 or self.step == t.max_steps:
                    row = window.flush(self.step, self.stream.epoch, learning_rate(self.step - 1, self.cfg))
                    progress.set_postfix(loss=f"{row['loss']:.4f}", lr=f"{row['lr']:.2e}",
                                         tok_s=f"{row['tokens_per_s']:.0f}")
                if (t.eval_every and self.step % t.eval_every == 0) or self.step == t.max_steps:
                    val_loss = self.evaluate()
                    row = row or window.empty(self.step, self.stream.epoch)
                    row["val_loss"] = val_loss
                    logger.info("step %d: validation loss %.4f", self.step, val_loss)
                if row is not None and log is not None:
                    log.write(row, elapsed=time.perf_counter() - start)
                if self.should_stop():
                    logger.warning("stopping on signal %d at step %d", self.stop_signal, self.step)
                    self.save()
                    return 128 + self.stop_signal
                if (t.ckpt_every and self.step % t.ckpt_every == 0) or self.step == t.max_steps:
                    self.save()
        finally:
            progress.close()
            restore_stop_handlers(previous)
            if log is not None:
                log.close()
        logger.info("done: %d steps in %.1f s, validation loss %.4f, run directory %s",
                    self.step, time.perf_counter() - start, val_loss, self.out)
        return 0

    def train_step(self) -> tuple[float, float, int]:
        """One optimisation step; returns (mean loss, gradient norm, target tokens) over processes."""
        t = self.cfg.train
        inputs, targets = self.stream.next()
        inputs = inputs.to(self.device, non_blocking=True)  # (B, N)
        targets = targets.to(self.device, non_blocking=True)  # (B, N)
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate(self.step, self.cfg)
        if self.redraw_due():
            self.model.redraw_features(self.redraw_rng)
        self.model.train()
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            logits = self.ddp(inputs)  # (B, N, V)
        loss = token_loss(logits, targets)
        loss.backward()
        clip = t.grad_clip if t.grad_clip > 0 else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        mean_loss, mean_norm, tokens = self.dist.mean(
            [loss.item(), grad_norm.item(), float((targets != IGNORE_INDEX).sum())], self.device)
        if not math.isfinite(mean_loss):
            raise TrainingDiverged(f"training loss is {mean_loss} at step {self.step + 1}: stopping "
                                   f"(lower train.lr or raise train.warmup_steps); the last "
                                   f"checkpoint is untouched")
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        return mean_loss, mean_norm, int(tokens * self.dist.world)

    def redraw_due(self) -> bool:
        """FAVOR+ redraw schedule: every redraw_every steps, else with probability redraw_prob."""
        t = self.cfg.train
        if t.redraw_every > 0:
            return self.step > 0 and self.step % t.redraw_every == 0
        if t.redraw_prob > 0:
            return torch.rand((), generator=self.redraw_rng).item() < t.redraw_prob
        return False

    @torch.no_grad()
    def evaluate(self) -> float:
        """Mean validation loss per token over eval_batches batches (fixed crops and SPE noise)."""
        if not len(self.valid_set):
            return math.nan
        t = self.cfg.train
        self.model.eval()
        total, count = 0.0, 0.0
        indices = list(range(self.dist.rank, len(self.valid_set), self.dist.world))
        indices = indices[:t.eval_batches * t.batch_size]
        loader = DataLoader(self.valid_set, batch_size=t.batch_size, sampler=indices,
                            num_workers=t.num_workers)
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):  # evaluation leaves the training RNGs alone
            torch.manual_seed(t.seed)
            for inputs, targets in loader:
                inputs, targets = inputs.long().to(self.device), targets.long().to(self.device)
                with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
                    logits = self.model(inputs)  # (B, N, V)
                total += token_loss(logits, targets, reduction="sum").item()
                count += float((targets != IGNORE_INDEX).sum())
        self.model.train()
        total, count = self.dist.total([total, count], self.device)
        return total / count if count else math.nan

    def should_stop(self) -> bool:
        """Whether any process received SIGINT / SIGTERM (agreed by all processes)."""
        flag = self.dist.mean([float(self.stop_signal or 0)], self.device)[0] if self.dist.world > 1 \
            else float(self.stop_signal or 0)
        if flag and self.stop_signal is None:
            self.stop_signal = signal.SIGTERM
        return bool(flag)


def token_loss(logits: torch.Tensor, targets: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy of (B, N, V) logits against (B, N) targets, padding (-100) left out."""
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX,
                           reduction=reduction)


def resolve_device(name: str, local_rank: int) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("train.device is cuda but no CUDA device is available")
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def install_stop_handlers(trainer: Trainer) -> dict[int, Any]:
    """SIGINT / SIGTERM set trainer.stop_signal (the loop checkpoints and exits); a second one
    falls back to the default behaviour. Returns the previous handlers."""
    def handler(signum: int, frame: Any) -> None:
        trainer.stop_signal = signum
        signal.signal(signum, signal.SIG_DFL if signum == signal.SIGTERM else signal.default_int_handler)

    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, handler)
    return previous


def restore_stop_handlers(previous: dict[int, Any]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


# ---------------------------------------------------------------------------------- logging
class Window:
    """Running sums between two log lines."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.losses: list[float] = []  # training losses of the steps since the last log line
        self.norms: list[float] = []  # their gradient norms
        self.tokens = 0  # target tokens processed since the last log line (all processes)
        self.start = time.perf_counter()  # when the window started

    def add(self, loss: float, grad_norm: float, tokens: int) -> None:
        self.losses.append(loss)
        self.norms.append(grad_norm)
        self.tokens += tokens

    def flush(self, step: int, epoch: int, lr: float) -> dict[str, Any]:
        seconds = time.perf_counter() - self.start
        row = {"step": step, "epoch": epoch, "loss": sum(self.losses) / len(self.losses), "lr": lr,
               "grad_norm": sum(self.norms) / len(self.norms), "tokens_per_s": self.tokens / seconds,
               "val_loss": ""}
        self.reset()
        return row

    @staticmethod
    def empty(step: int, epoch: int) -> dict[str, Any]:
        return {"step": step, "epoch": epoch, "loss": "", "lr": "", "grad_norm": "",
                "tokens_per_s": "", "val_loss": ""}


class RunLog:
    """Rank 0's outputs: config.yaml, metrics.csv, train.log and TensorBoard events (tb/)."""

    def __init__(self, out: Path, cfg: RunConfig, resume_step: int | None) -> None:
        out.mkdir(parents=True, exist_ok=True)
        save_config(cfg, out / "config.yaml")
        self.csv_path = out / "metrics.csv"
        rows = []
        if resume_step is not None and self.csv_path.is_file():  # drop rows past the checkpoint
            with self.csv_path.open(newline="") as f:
                rows = [r for r in csv.DictReader(f) if int(r["step"]) <= resume_step]
        self.csv_file = self.csv_path.open("w", newline="")
        self.csv = csv.DictWriter(self.csv_file, fieldnames=[*CSV_FIELDS])
        self.csv.writeheader()
        self.csv.writerows(rows)
        self.file_handler = logging.FileHandler(out / "train.log")
        self.file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger().addHandler(self.file_handler)
        self.tb = None
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(out / "tb"), purge_step=resume_step)
        except ImportError:
            logger.warning("tensorboard is not installed: no TensorBoard logs")

    def write(self, row: dict[str, Any], elapsed: float) -> None:
        self.csv.writerow({**row, "elapsed_s": round(elapsed, 3)})
        self.csv_file.flush()
        if self.tb is not None:
            for key in ("loss", "lr", "grad_norm", "tokens_per_s", "val_loss"):
                if row[key] != "":
                    self.tb.add_scalar(f"train/{key}" if key != "val_loss" else "valid/loss",
                                       row[key], row["step"])

    def close(self) -> None:
        self.csv_file.close()
        logging.getLogger().removeHandler(self.file_handler)
        self.file_handler.close()
        if self.tb is not None:
            self.tb.close()


if __name__ == "__main__":
    raise SystemExit(main())
