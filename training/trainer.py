"""The training loop of one process: schedule, batches, optimisation, validation, checkpoints.

    trainer = Trainer(cfg, corpus, Path("runs/demo"), DistEnv.from_environment(), torch.device("cpu"))
    trainer.resume(checkpoint)        # optional: continue exactly where a run stopped
    status = trainer.fit()            # 0, or 128 + signal when stopped by SIGINT / SIGTERM

AdamW, linear warm-up then cosine decay to min_lr, gradient clipping, FAVOR+ feature redraws (with
probability p per step, or every K steps), validation every eval_every steps, checkpoints every
ckpt_every steps, at the end, and on Ctrl-C / SIGTERM. Resuming restores model, optimizer, schedule,
step, data position and every RNG, so the loss sequence is that of an uninterrupted run.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import signal
import threading
import time
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler
from tqdm.auto import tqdm

from data import CropDataset, SongStreams, TokenCorpus, ValidationSet
from model import IGNORE_INDEX, GenerationState, MusicPerformer, detach_state
from tokenization import format_of
from training.checkpoint import capture_rng, read_meta, restore_rng, restore_training, save_checkpoint
from training.config import RunConfig
from training.distributed import DistEnv
from training.memory import reuse_freed_memory
from training.runlog import RunLog, Window

logger = logging.getLogger(__name__)


PLAN_AFTER = 10  # steps timed (the first one left out) before a wall-time budget sets max_steps
PLAN_MARGIN = 0.9  # share of the remaining wall time that the planned steps may fill


class TrainingDiverged(RuntimeError):
    """The training loss became NaN or infinite."""


def learning_rate(step: int, cfg: RunConfig) -> float:
    """Linear warm-up to lr over warmup_steps, then cosine decay to min_lr at max_steps."""
    t = cfg.train
    if step < t.warmup_steps:
        return t.lr * (step + 1) / t.warmup_steps
    progress = min(1.0, (step - t.warmup_steps) / max(1, t.max_steps - t.warmup_steps))
    return t.min_lr + 0.5 * (t.lr - t.min_lr) * (1.0 + math.cos(math.pi * progress))


def make_optimizer(model: MusicPerformer, cfg: RunConfig) -> torch.optim.AdamW:
    """AdamW over the model's own parameter groups (weight decay on its weight matrices only)."""
    groups = model.param_groups(cfg.train.weight_decay)
    return torch.optim.AdamW(groups, lr=cfg.train.lr, betas=cfg.train.betas)


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


def device_label(device: torch.device) -> str:
    """What the model cards say a run trained on: "CPU" or the GPU's name."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"


class Trainer:
    """One training run (one process of it under torchrun)."""

    def __init__(self, cfg: RunConfig, corpus: TokenCorpus, out: Path, dist_env: DistEnv,
                 device: torch.device) -> None:
        self.cfg, self.corpus, self.out, self.dist = cfg, corpus, out, dist_env
        self.is_main = dist_env.rank == 0
        self.device = device  # resolved once by the caller from cfg.train.device (training.run)
        if self.device.type == "cpu" and cfg.train.cpu_allocator == "reuse" and reuse_freed_memory():
            logger.info("CPU allocator: freed memory kept for reuse (train.cpu_allocator=reuse)")
        self.bf16 = cfg.train.precision == "bf16" or (cfg.train.precision == "auto"
                                                      and self.device.type == "cuda")
        if cfg.data.fim_rate > 0 and not hasattr(corpus.tokenizer, "with_infill"):  # REMI's markers
            raise ValueError(f"data.fim_rate > 0 needs the remi token format (fill-in-the-middle markers); "
                             f"corpus {cfg.data.root} is in format {format_of(corpus.tokenizer)}")
        self.tokenizer = corpus.tokenizer.with_infill() if cfg.data.fim_rate > 0 else corpus.tokenizer
        train_pieces, valid_pieces = corpus.pieces("train"), corpus.pieces("valid")
        if not train_pieces:
            raise ValueError(f"corpus {cfg.data.root} has no training pieces")
        d = cfg.data
        train_set = CropDataset(train_pieces, self.tokenizer, crop_len=d.crop_len, transpose=d.transpose,
                                seed=cfg.train.seed, samples_per_piece=d.samples_per_piece,
                                max_bars=d.max_bars, fim_rate=d.fim_rate, end_crops=d.end_crops,
                                fim_suffix_tokens=d.fim_suffix_tokens, start_crops=d.start_crops,
                                fim_end_crops=d.fim_end_crops)
        self.valid_set = ValidationSet(valid_pieces, self.tokenizer, crop_len=d.crop_len, max_len=d.crop_len,
                                       seed=cfg.train.seed).crops  # fixed, untransposed crops
        self.stream = BatchStream(train_set, cfg.train.batch_size, cfg.train.seed, dist_env,
                                  cfg.train.num_workers, pin_memory=self.device.type == "cuda")
        self.songs: SongStreams | None = None  # data.state_passing: the song streams, else None
        if d.state_passing:
            if dist_env.world > 1:
                raise ValueError("data.state_passing trains in one process (each stream carries its own "
                                 "state); run train.py without torchrun")
            if cfg.train.max_epochs is not None:
                raise ValueError("data.state_passing reads whole songs: set train.max_steps or "
                                 "train.max_minutes, not train.max_epochs")
            self.songs = SongStreams(train_pieces, self.tokenizer, d.crop_len, cfg.train.batch_size,
                                     d.transpose, cfg.train.seed)
        # per stream (state passing): the recurrent state after its last segment, None at a song's start
        self.song_states: list[GenerationState | None] = [None] * cfg.train.batch_size
        if cfg.train.max_epochs is not None:
            steps = cfg.train.max_epochs * (len(train_set) // (cfg.train.batch_size * dist_env.world))
            if steps < 1:
                raise ValueError(f"the training set has {len(train_set)} crops: too few for batch size "
                                 f"{cfg.train.batch_size} x {dist_env.world} processes")
            self.cfg = cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, max_steps=steps))
            logger.info("%d epochs = %d steps", cfg.train.max_epochs, steps)

        torch.manual_seed(cfg.train.seed)  # identical initialisation on every process
        self.model = MusicPerformer(cfg.model_config(self.tokenizer.vocab_size)).to(self.device)
        if cfg.train.spe_code == "factorised" and cfg.model.pe != "sine_spe":
            raise ValueError(f"train.spe_code=factorised needs model.pe=sine_spe, got {cfg.model.pe}")
        if self.model.cfg.is_spe and cfg.train.spe_code != "auto":
            self.model.pe.contraction = cfg.train.spe_code             # "stored" or "factorised"
        self.optimizer = make_optimizer(self.model, cfg)
        self.ddp = (DistributedDataParallel(self.model, device_ids=[self.device.index]
                                            if self.device.type == "cuda" else None)
                    if dist_env.world > 1 else self.model)
        self.redraw_rng = torch.Generator().manual_seed(cfg.train.seed + 1)  # same on every process
        torch.manual_seed(cfg.train.seed + 7919 * dist_env.rank)  # dropout / SPE noise per process
        self.step = 0
        self.resumed = False
        self.stop_signal: int | None = None
        self.clock = time.perf_counter  # wall clock of the budget (train.max_minutes) and of the logs

    # ------------------------------------------------------------------ resume
    def resume(self, checkpoint: Path) -> None:
        """Restore everything saved by `save` (the run continues as if never interrupted)."""
        saved = read_meta(checkpoint)["tokenizer"]
        if saved != self.tokenizer.to_dict():
            raise ValueError(f"checkpoint {checkpoint} was trained with another tokenizer than "
                             f"corpus {self.cfg.data.root}")
        state = restore_training(checkpoint, self.model, self.optimizer)
        self.step = state.step
        position = state.extra.get("position")
        if isinstance(position, bool) or not isinstance(position, int) or position < 0:
            raise ValueError(f"checkpoint {checkpoint}/meta.json: extra.position must be an int >= 0, got {position!r}")
        self.stream.epoch, self.stream.position = state.epoch, position
        if self.songs is not None:
            if "streams" not in state.extra:
                raise ValueError(f"checkpoint {checkpoint} was not trained with data.state_passing: "
                                 f"resume it without, or start a run with --init-from")
            self.songs.load_state_dict(state.extra["streams"])
        if len(state.rng) != self.dist.world:
            logger.warning("checkpoint has RNG states of %d processes, this run has %d",
                           len(state.rng), self.dist.world)
        try:
            rng = state.rng[self.dist.rank % len(state.rng)]
            restore_rng(rng)
            self.redraw_rng.set_state(rng["redraw"])
        except (KeyError, TypeError, ValueError, RuntimeError, IndexError, ZeroDivisionError) as error:
            raise ValueError(f"checkpoint {checkpoint}: the saved random states are damaged ({error!r})") from None
        self.replay_songs()
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
                            extra={"position": self.stream.position, "device": device_label(self.device),
                                   **({"streams": self.songs.state_dict()} if self.songs else {})}, rng=rng,
                            keep=self.cfg.train.keep_checkpoints)
        self.dist.barrier()

    # -------------------------------------------------------------------- loop
    def fit(self) -> int:
        """Train to max_steps, the wall-time budget's deadline or a stop signal; returns the exit status."""
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
        start = self.clock()
        deadline = start + 60.0 * t.max_minutes if t.max_minutes is not None else math.inf
        first_step, timed_from = self.step, math.nan
        try:
            while self.step < t.max_steps:
                loss, grad_norm, tokens = self.train_step()
                window.add(loss, grad_norm, tokens)
                progress.update(1)
                now = self.clock()
                if self.step == first_step + 1:
                    timed_from = now
                elif self.cfg.train.max_minutes is not None and self.step == first_step + PLAN_AFTER:
                    self.plan_steps((now - timed_from) / (PLAN_AFTER - 1), deadline - now)
                    t = self.cfg.train
                    progress.total = t.max_steps
                    progress.refresh()
                out_of_time = self.past(deadline, now) and self.step < t.max_steps
                last = self.step == t.max_steps or out_of_time
                row = None
                if self.step % t.log_every == 0 or last:
                    row = window.flush(self.step, self.stream.epoch, learning_rate(self.step - 1, self.cfg))
                    progress.set_postfix(loss=f"{row['loss']:.4f}", lr=f"{row['lr']:.2e}",
                                         tok_s=f"{row['tokens_per_s']:.0f}")
                if (t.eval_every and self.step % t.eval_every == 0) or last:
                    val_loss = self.evaluate()
                    row = row or window.empty(self.step, self.stream.epoch)
                    row["val_loss"] = val_loss
                    logger.info("step %d: validation loss %.4f", self.step, val_loss)
                if row is not None and log is not None:
                    log.write(row, elapsed=self.clock() - start)
                if self.should_stop():
                    logger.warning("stopping on signal %d at step %d", self.stop_signal, self.step)
                    self.save()
                    return 128 + self.stop_signal
                if (t.ckpt_every and self.step % t.ckpt_every == 0) or last:
                    self.save()
                if out_of_time:
                    logger.warning("the wall-time budget ran out at step %d of %d", self.step, t.max_steps)
                    break
        finally:
            progress.close()
            restore_stop_handlers(previous)
            if log is not None:
                log.close()
        logger.info("done: %d steps in %.1f s, validation loss %.4f, run directory %s",
                    self.step, self.clock() - start, val_loss, self.out)
        return 0

    def past(self, deadline: float, now: float) -> bool:
        """Whether the deadline has passed (agreed by all processes, so that they stop together)."""
        if deadline == math.inf:
            return False
        if self.dist.world > 1:
            return self.dist.mean([float(now >= deadline)], self.device)[0] > 0
        return now >= deadline

    def plan_steps(self, seconds_per_step: float, seconds_left: float) -> None:
        """Set max_steps so that the remaining steps and their validations fill PLAN_MARGIN of the
        wall time left (a validation batch is costed as a third of a training step: forward only);
        the budget field is cleared, so checkpoints carry the planned schedule."""
        t = self.cfg.train
        per_step = seconds_per_step * (1.0 + (t.eval_batches / 3.0 / t.eval_every if t.eval_every else 0.0))
        steps = self.step + max(1, int(PLAN_MARGIN * seconds_left / per_step))
        if self.dist.world > 1:  # every process must stop at the same step
            steps = int(self.dist.mean([float(steps)], self.device)[0])
        logger.info("wall-time budget: %.2f s per step, %d steps planned (max_steps was %d)",
                    seconds_per_step, steps, t.max_steps)
        self.cfg = dataclasses.replace(self.cfg, train=dataclasses.replace(t, max_steps=steps,
                                                                            max_minutes=None))

    def train_step(self) -> tuple[float, float, int]:
        """One optimisation step; returns (mean loss, gradient norm, target tokens) over processes."""
        t = self.cfg.train
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate(self.step, self.cfg)
        if self.redraw_due():
            self.model.redraw_features(self.redraw_rng)
            self.replay_songs()  # the carried states were summed in the old features
        self.model.train()
        loss, targets = self.songs_backward() if self.songs is not None else self.crops_backward()
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

    def crops_backward(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Forward and backward of the next batch of crops: (mean loss, targets (B, N))."""
        inputs, targets = self.stream.next()
        inputs = inputs.to(self.device, non_blocking=True)  # (B, N)
        targets = targets.to(self.device, non_blocking=True)  # (B, N)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            _, loss = self.ddp(inputs, targets)  # mean cross-entropy over the (B, N) targets
        loss.backward()
        return loss, targets

    def songs_backward(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Forward and backward of every stream's next segment, each from the state its previous
        segment left (one stream at a time: each is at its own position in its own song); the loss is
        the mean over all the streams' targets, as one batch of crops would give."""
        segments = self.songs.next()
        targets = torch.stack([s.targets for s in segments]).to(self.device)  # (S, N)
        count = max(1, int((targets != IGNORE_INDEX).sum()))
        total = torch.zeros((), device=self.device)
        for index, segment in enumerate(segments):
            state = self.song_states[index] if segment.start > 0 else None
            if state is None:
                state = self.song_state(segment.song_length)
            inputs = segment.inputs.to(self.device)[None]  # (1, N)
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
                _, loss, state = self.model.forward_state(inputs, targets[index:index + 1], state,
                                                          reduction="sum")
            (loss / count).backward()
            total += loss.detach()
            self.song_states[index] = detach_state(state)
        return total / count, targets

    def song_state(self, song_length: int) -> GenerationState:
        """An empty state for a song, with its own positional noise covering the whole song."""
        noise = self.model.draw_positional_noise(song_length + 1)
        return self.model.init_state(1, noise)

    @torch.no_grad()
    def replay_songs(self) -> None:
        """Rebuild every stream's state by reading its song's earlier segments again (state passing:
        after a resume, whose checkpoint holds the streams' places but not their states, and after a
        FAVOR+ redraw, which changes the features the states were summed in)."""
        if self.songs is None:
            return
        training = self.model.training
        self.model.eval()
        for index in range(self.songs.streams):
            prefix = self.songs.prefix(index)
            if prefix is None:
                self.song_states[index] = None
                continue
            state = self.song_states[index]
            noise = state.positional_noise if state is not None else None
            song_length = len(self.songs.song(index))
            state = self.model.init_state(1, noise) if noise is not None else self.song_state(song_length)
            _, state = self.model.feed(prefix.to(self.device)[None], state)
            self.song_states[index] = state
        self.model.train(training)

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
                    _, loss = self.model(inputs, targets, reduction="sum")
                total += loss.item()
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


