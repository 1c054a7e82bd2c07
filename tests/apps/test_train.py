"""apps.train end to end on a tiny model and a tiny corpus: learning, exact resume, signals, NaN
stop, bad input, and data-parallel training with 2 processes (gloo)."""

from __future__ import annotations

import csv
import math
import os
import shutil
import signal
import types

import pytest
import torch
import torch.multiprocessing as mp
import yaml
from safetensors.torch import load_file, save_file

import apps.train as train
import model.performer as performer
import training.trainer as trainer
from cli_helpers import free_port
from model import MusicPerformer
from training.checkpoint import list_checkpoints, load_checkpoint

TINY = {
    "model": {"n_layer": 2, "n_head": 2, "d_model": 32, "d_ff": 64, "dropout": 0.1, "pe": "sine_spe",
              "num_realizations": 8, "feature_dims": 16, "attention": "torch", "max_len": 64},
    "data": {"kind": "midi_folder", "crop_len": 48, "transpose": 3},
    "train": {"batch_size": 2, "lr": 3.0e-3, "min_lr": 1.0e-4, "warmup_steps": 2, "max_steps": 6,
              "eval_every": 3, "eval_batches": 2, "ckpt_every": 3, "log_every": 1, "redraw_prob": 0.5,
              "keep_checkpoints": 0},
}


def config_file(tmp_path, corpus_root, **sections):
    values = {name: dict(TINY.get(name, {})) for name in ("model", "data", "train")}
    for name, entries in sections.items():
        values[name].update(entries)
    values["data"]["root"] = str(corpus_root)
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def metrics(run_dir):
    with (run_dir / "metrics.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def losses(run_dir):
    return [float(r["loss"]) for r in metrics(run_dir) if r["loss"]]


def test_training_lowers_the_loss(tmp_path, corpus_root):
    config = config_file(tmp_path, corpus_root,
                         model={"dropout": 0.0},
                         data={"transpose": 0, "crop_len": 32},
                         train={"max_steps": 40, "lr": 1e-2, "min_lr": 1e-3, "eval_every": 0,
                                "ckpt_every": 0, "redraw_prob": 0.0, "batch_size": 4})
    out = tmp_path / "run"
    assert train.main(["--config", str(config), "--out", str(out)]) == 0
    values = losses(out)
    assert len(values) == 40 and all(math.isfinite(v) for v in values)
    assert sum(values[-5:]) / 5 < sum(values[:5]) / 5 - 1.0
    rows = metrics(out)
    assert rows[-1]["val_loss"] and float(rows[-1]["val_loss"]) < values[0]  # evaluated at the end
    ckpt = load_checkpoint(out)
    assert ckpt.step == 40 and ckpt.config.train.max_steps == 40
    assert (out / "config.yaml").is_file() and (out / "train.log").is_file()


def test_resume_continues_exactly(tmp_path, corpus_root, monkeypatch):
    config = config_file(tmp_path, corpus_root)
    straight = tmp_path / "straight"
    assert train.main(["--config", str(config), "--out", str(straight)]) == 0

    # Same run, stopped by SIGTERM right after step 4 (mid-epoch, between two checkpoints).
    interrupted = tmp_path / "interrupted"
    original_step = trainer.Trainer.train_step

    def step_then_signal(self):
        result = original_step(self)
        if self.step == 4:
            signal.raise_signal(signal.SIGTERM)
        return result

    monkeypatch.setattr(trainer.Trainer, "train_step", step_then_signal)
    assert train.main(["--config", str(config), "--out", str(interrupted)]) == 128 + signal.SIGTERM
    assert [p.name for p in list_checkpoints(interrupted)] == ["step_000003", "step_000004"]
    monkeypatch.setattr(trainer.Trainer, "train_step", original_step)
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # handlers restored

    torch.manual_seed(1234)  # the resumed run must not depend on the state of this process
    assert train.main(["--out", str(interrupted), "--resume"]) == 0
    assert len(losses(straight)) == 6
    assert losses(interrupted) == losses(straight)  # bit-exact, dropout / SPE / redraws included
    val = [r["val_loss"] for r in metrics(straight) if r["val_loss"]]
    assert [r["val_loss"] for r in metrics(interrupted) if r["val_loss"]] == val
    a, b = load_checkpoint(straight).model.state_dict(), load_checkpoint(interrupted).model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_existing_run_needs_resume(tmp_path, corpus_root, capsys):
    config = config_file(tmp_path, corpus_root, train={"max_steps": 1})
    out = tmp_path / "run"
    assert train.main(["--config", str(config), "--out", str(out)]) == 0
    assert train.main(["--config", str(config), "--out", str(out)]) == 2
    assert "--resume" in capsys.readouterr().err
    # --max-steps extends a finished run
    assert train.main(["--out", str(out), "--resume", "--max-steps", "2"]) == 0
    assert load_checkpoint(out).step == 2


def test_nan_loss_stops_with_a_message(tmp_path, corpus_root, monkeypatch, capsys):
    config = config_file(tmp_path, corpus_root, train={"ckpt_every": 1})
    original_loss = performer.token_loss  # what MusicPerformer.forward computes its loss with
    calls = []

    def poisoned(logits, targets, reduction="mean"):
        calls.append(1)
        loss = original_loss(logits, targets, reduction)
        return loss * math.nan if len(calls) == 3 else loss

    monkeypatch.setattr(performer, "token_loss", poisoned)
    out = tmp_path / "run"
    assert train.main(["--config", str(config), "--out", str(out)]) == 1
    assert "nan" in capsys.readouterr().err.lower()
    assert [p.name for p in list_checkpoints(out)] == ["step_000001", "step_000002"]  # none at the NaN


@pytest.mark.parametrize("argv, message", [
    (["--config", "no_such.yaml"], "not found"),
    (["--set", "train.no_such_key=1"], "no_such_key"),
    (["--set", "train.lr=fast"], "train.lr"),
])
def test_bad_input_is_one_line_without_output(tmp_path, argv, message, capsys):
    out = tmp_path / "run"
    assert train.main(argv + ["--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_unreadable_corpus_is_refused(tmp_path, corpus_root, capsys):
    broken = tmp_path / "broken"
    shutil.copytree(corpus_root, broken)
    (broken / "train_index.json").write_text("{not json")
    config = config_file(tmp_path, broken)
    out = tmp_path / "run"
    assert train.main(["--config", str(config), "--out", str(out)]) == 2
    assert "error" in capsys.readouterr().err and not out.exists()


def test_learning_rate_schedule():
    from training.config import apply_overrides, RunConfig

    cfg = apply_overrides(RunConfig(), ["train.lr=1e-3", "train.min_lr=1e-5", "train.warmup_steps=10",
                                        "train.max_steps=110"])
    rates = [trainer.learning_rate(step, cfg) for step in range(111)]
    assert rates[0] == pytest.approx(1e-4) and rates[9] == pytest.approx(1e-3)
    assert rates[10] == pytest.approx(1e-3) and rates[60] == pytest.approx((1e-3 + 1e-5) / 2)
    assert rates[110] == pytest.approx(1e-5)
    assert all(a >= b for a, b in zip(rates[10:], rates[11:]))



class TickingClock:
    """A wall clock that advances by `tick` seconds at every reading."""

    def __init__(self, tick: float) -> None:
        self.now, self.tick = 0.0, tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


def run_for_a_minute(tmp_path, corpus_root, monkeypatch, tick: float):
    """A run of at most 1000 steps with a 1-minute budget whose clock advances `tick` s per reading;
    returns (run directory, final checkpoint)."""
    monkeypatch.setattr(trainer, "time", types.SimpleNamespace(perf_counter=TickingClock(tick)))
    config = config_file(tmp_path, corpus_root, train={"max_steps": 1000, "max_minutes": 1.0})
    out = tmp_path / "run"
    assert train.main(["--config", str(config), "--out", str(out)]) == 0
    return out, load_checkpoint(out)


def test_wall_time_budget_plans_the_schedule(tmp_path, corpus_root, monkeypatch):
    # each step reads the clock twice (log_every 1): 2 s per step, so 1 minute holds some 25 steps
    out, ckpt = run_for_a_minute(tmp_path, corpus_root, monkeypatch, 1.0)
    assert trainer.PLAN_AFTER < ckpt.step < 30
    assert ckpt.config.train.max_steps == ckpt.step  # the planned schedule ran to its end ...
    assert ckpt.config.train.max_minutes is None  # ... and --resume continues that schedule
    rates = [float(r["lr"]) for r in metrics(out) if r["lr"]]
    assert rates[-1] == pytest.approx(trainer.learning_rate(ckpt.step - 1, ckpt.config))
    assert rates[-1] < 0.1 * max(rates)  # the cosine decay ended with the budget


def test_wall_time_budget_stops_at_the_deadline(tmp_path, corpus_root, monkeypatch):
    # 10 s per step: the minute runs out before the plan is made
    out, ckpt = run_for_a_minute(tmp_path, corpus_root, monkeypatch, 5.0)
    assert ckpt.step < trainer.PLAN_AFTER and ckpt.config.train.max_steps == 1000
    assert metrics(out)[-1]["val_loss"]  # validated and saved where it stopped


# ----------------------------------------------------------------------------- distributed
def _ddp_worker(rank: int, world: int, port: int, config: str, out: str) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    original_fit = trainer.Trainer.fit

    def fit_then_dump(self):
        code = original_fit(self)
        save_file({k: v.contiguous() for k, v in self.model.state_dict().items()},
                  os.path.join(out, f"rank{rank}.safetensors"))
        return code

    trainer.Trainer.fit = fit_then_dump
    if train.main(["--config", config, "--out", out]) != 0:
        raise RuntimeError(f"rank {rank} failed")


def test_data_parallel_two_processes(tmp_path, corpus_root):
    config = config_file(tmp_path, corpus_root, train={"max_steps": 3, "eval_every": 0})
    out = tmp_path / "ddp"
    out.mkdir()
    port = free_port()
    mp.spawn(_ddp_worker, args=(2, port, str(config), str(out)), nprocs=2, join=True)
    rank0, rank1 = load_file(out / "rank0.safetensors"), load_file(out / "rank1.safetensors")
    assert rank0.keys() == rank1.keys()
    assert all(torch.equal(rank0[k], rank1[k]) for k in rank0)  # DDP kept the replicas identical
    ckpt = load_checkpoint(out)  # written by rank 0 only, with both ranks' RNG states
    assert ckpt.step == 3 and len(ckpt.meta["rng"]) == 2
    torch.manual_seed(ckpt.config.train.seed)  # the initial weights, as the trainer builds them
    initial = MusicPerformer(ckpt.config.model_config(ckpt.tokenizer.vocab_size)).state_dict()
    assert not torch.equal(initial["embedding.weight"], rank0["embedding.weight"])  # it trained
    assert len(losses(out)) == 3 and all(math.isfinite(v) for v in losses(out))


@pytest.mark.parametrize("spe_code, factorised", [("factorised", True), ("stored", False)])
def test_spe_code_sets_how_the_code_is_applied(tmp_path, corpus_root, monkeypatch, spe_code, factorised):
    from model.positional import StochasticPE

    choices = []
    original = StochasticPE._factorise

    def recording(self, length, batch):
        choices.append(original(self, length, batch))
        return choices[-1]

    monkeypatch.setattr(StochasticPE, "_factorise", recording)
    config = config_file(tmp_path, corpus_root, train={"max_steps": 2, "eval_every": 0, "ckpt_every": 0,
                                                       "batch_size": 1, "spe_code": spe_code})
    assert train.main(["--config", str(config), "--out", str(tmp_path / "run")]) == 0
    assert choices and set(choices) == {factorised}
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["train"]["spe_code"] == spe_code


def test_factorised_spe_code_needs_sine_spe(tmp_path, corpus_root, capsys):
    config = config_file(tmp_path, corpus_root, model={"pe": "conv_spe", "kernel_size": 5},
                         train={"spe_code": "factorised"})
    assert train.main(["--config", str(config), "--out", str(tmp_path / "run")]) == 2
    assert "spe_code" in capsys.readouterr().err


def test_state_passing_trains_and_resumes_on_the_same_segments(tmp_path, corpus_root, monkeypatch):
    """data.state_passing: whole songs in consecutive segments with the carried state; a resumed run
    reads the same segments and rebuilds the streams' states from their songs' earlier segments."""
    config = config_file(tmp_path, corpus_root, model={"dropout": 0.0, "decay_horizon": 32, "memory_heads": 1},
                         data={"state_passing": True, "crop_len": 24},
                         train={"redraw_prob": 0.0, "max_steps": 8, "ckpt_every": 4, "eval_every": 4})
    straight = tmp_path / "straight"
    assert train.main(["--config", str(config), "--out", str(straight)]) == 0
    saved = load_checkpoint(straight)
    assert saved.config.data.state_passing and saved.model.cfg.memory_heads == 1
    interrupted = tmp_path / "interrupted"
    original_step = trainer.Trainer.train_step

    def step_then_signal(self):
        result = original_step(self)
        if self.step == 5:
            signal.raise_signal(signal.SIGTERM)
        return result

    monkeypatch.setattr(trainer.Trainer, "train_step", step_then_signal)
    assert train.main(["--config", str(config), "--out", str(interrupted)]) == 128 + signal.SIGTERM
    monkeypatch.setattr(trainer.Trainer, "train_step", original_step)
    replayed = []
    original_replay = trainer.Trainer.replay_songs
    monkeypatch.setattr(trainer.Trainer, "replay_songs",
                        lambda self: (replayed.append([self.songs.prefix(i) is not None
                                                       for i in range(self.songs.streams)]),
                                      original_replay(self))[1])
    assert train.main(["--out", str(interrupted), "--resume"]) == 0
    assert replayed and any(replayed[0])  # a stream was mid-song: its state was rebuilt
    a, b = losses(straight), losses(interrupted)
    assert len(a) == len(b) == 8 and a[:5] == b[:5]
    assert all(abs(x - y) < 0.05 * x for x, y in zip(a[5:], b[5:]))  # the same segments, rebuilt states


def test_state_passing_refuses_crop_options(tmp_path, corpus_root, capsys):
    config = config_file(tmp_path, corpus_root, data={"state_passing": True, "end_crops": True})
    assert train.main(["--config", str(config), "--out", str(tmp_path / "run")]) == 2
    assert "data.state_passing" in capsys.readouterr().err


def test_a_second_training_on_a_busy_run_folder_is_refused(tmp_path, corpus_root, capsys):
    """One training per run folder: a live holder of the lock (its PID named) refuses another;
    a lock left by a process that died never blocks."""
    from training.checkpoint_store import RunLock

    config = config_file(tmp_path, corpus_root, train={"max_steps": 2})
    out = tmp_path / "run"
    with RunLock(out):
        assert train.main(["--config", str(config), "--out", str(out), "--resume"]) == 2
        err = capsys.readouterr().err
        assert f"in use by another training (PID {os.getpid()})" in err and len(err.strip().splitlines()) == 1
        assert not (out / "checkpoints").exists()
    (out / ".lock").write_text("999999\n")  # what a killed run leaves: the file, no lock
    assert train.main(["--config", str(config), "--out", str(out), "--resume"]) == 0
    assert [p.name for p in list_checkpoints(out)] == ["step_000002"]
