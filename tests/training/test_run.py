"""training.run: the start of a run (fresh, resume, fine-tune) decided from a request, the refusal of
a run folder that already holds a run, and what execute_run does for each start (without training)."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

import training.run as run
from model import MusicPerformer
from remi import REMITokenizer
from training.checkpoint import save_checkpoint
from training.checkpoint_store import RunFolderBusy, RunLock
from training.config import load_config
from training.distributed import DistEnv
from training.finetune import resolve_source
from training.run import RunRequest, execute_run, plan_run

SINGLE = DistEnv(rank=0, local_rank=0, world=1)
TINY = {"model": {"n_layer": 1, "n_head": 2, "d_model": 16, "d_ff": 32, "pe": "sine_spe",
                  "num_realizations": 4, "feature_dims": 8, "attention": "torch", "max_len": 32},
        "data": {"kind": "midi_folder", "root": "corpus/unused"},
        "train": {"lr": 1e-3, "max_steps": 5, "device": "cpu"}}


def config_file(folder: Path, name: str = "tiny", **train) -> Path:
    values = {section: dict(entries) for section, entries in TINY.items()}
    values["train"].update(train)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def save_step(out: Path, config: Path, step: int) -> Path:
    """A complete checkpoint of a tiny model in `out` (what a run leaves)."""
    cfg = load_config(config)
    tokenizer = REMITokenizer()
    model = MusicPerformer(cfg.model_config(tokenizer.vocab_size))
    return save_checkpoint(out, model=model, tokenizer=tokenizer, config=cfg, step=step)


def test_a_fresh_run_loads_its_config_and_is_named_after_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = config_file(tmp_path)
    plan = plan_run(RunRequest(config=str(config), overrides=("train.lr=0.5",), max_steps=7))
    assert plan.start == "fresh" and plan.resume_from is None and plan.source is None
    assert plan.out == Path("runs") / "tiny"
    assert (plan.cfg.train.lr, plan.cfg.train.max_steps) == (0.5, 7)
    assert not Path("runs").exists()  # planning writes nothing


def test_a_folder_holding_a_run_is_refused_without_resume(tmp_path):
    config = config_file(tmp_path)
    out = tmp_path / "run"
    save_step(out, config, 2)
    with pytest.raises(ValueError, match="already holds a run; pass --resume"):
        plan_run(RunRequest(config=str(config), out=out))
    with pytest.raises(ValueError, match="already holds a run"):
        plan_run(RunRequest(init_from="pretrained", out=out))


def test_resume_continues_the_newest_checkpoint_with_the_saved_config(tmp_path, caplog):
    saved = config_file(tmp_path, lr=0.01)
    out = tmp_path / "run"
    save_step(out, saved, 2)
    newest = save_step(out, saved, 3)
    other = config_file(tmp_path, name="other", lr=0.5)
    with caplog.at_level(logging.WARNING, logger="training.run"):
        plan = plan_run(RunRequest(config=str(other), out=out, resume=True, max_steps=9))
    assert plan.start == "resume" and plan.resume_from == newest and plan.source is None
    assert (plan.cfg.train.lr, plan.cfg.train.max_steps) == (0.01, 9)  # saved config, then overrides
    assert f"using the run's saved config and weights, not {other}" in caplog.text


def test_resume_without_a_checkpoint_starts_fresh(tmp_path, caplog):
    config = config_file(tmp_path)
    with caplog.at_level(logging.WARNING, logger="training.run"):
        plan = plan_run(RunRequest(config=str(config), out=tmp_path / "run", resume=True))
    assert plan.start == "fresh" and plan.cfg.train.lr == 1e-3
    assert "no checkpoint in" in caplog.text and "starting from scratch" in caplog.text


def test_fine_tuning_starts_from_the_source_model(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    source = resolve_source("pretrained")
    plan = plan_run(RunRequest(init_from="pretrained", overrides=("data.source=/x/songs",)))
    assert plan.start == "finetune" and plan.source.path == source.path and plan.resume_from is None
    assert plan.out == Path("runs") / f"finetune_{source.name}"
    assert plan.cfg.model == source.config.model and plan.cfg.data.source == "/x/songs"
    # --resume wins over --init-from once the run folder holds a checkpoint
    out = tmp_path / "run"
    newest = save_step(out, config_file(tmp_path), 4)
    with caplog.at_level(logging.WARNING, logger="training.run"):
        plan = plan_run(RunRequest(init_from="pretrained", out=out, resume=True))
    assert plan.start == "resume" and plan.resume_from == newest and plan.source is None
    assert "not pretrained" in caplog.text


def test_an_unknown_source_is_refused(tmp_path):
    with pytest.raises(ValueError, match="--init-from"):
        plan_run(RunRequest(init_from=str(tmp_path / "nowhere"), out=tmp_path / "run"))


class FakeTrainer:
    """Records what execute_run asks of a Trainer."""

    def __init__(self, cfg, corpus, out, dist_env, device) -> None:
        self.cfg, self.corpus, self.out, self.device = cfg, corpus, out, device
        self.model, self.tokenizer = "model", "tokenizer"
        self.calls: list[tuple] = []
        FakeTrainer.made.append(self)

    def resume(self, checkpoint: Path) -> None:
        self.calls.append(("resume", checkpoint))

    def fit(self) -> int:
        self.calls.append(("fit",))
        return 0


@pytest.mark.parametrize("start", ["fresh", "resume", "finetune"])
def test_execute_run_resolves_the_device_once_and_starts_as_planned(tmp_path, monkeypatch, start):
    resolved, calls = [], []

    def resolve(name, local_rank=0):
        resolved.append((name, local_rank))
        return torch.device("cpu")

    FakeTrainer.made = []
    monkeypatch.setattr(run, "Trainer", FakeTrainer)
    monkeypatch.setattr(run, "resolve_device", resolve)
    monkeypatch.setattr(run, "prepare_corpus", lambda data, is_main, barrier: SimpleNamespace(data=data))
    monkeypatch.setattr(run, "check_vocabulary", lambda source, tokenizer: calls.append(("check", tokenizer)))
    monkeypatch.setattr(run, "init_weights",
                        lambda model, source, out, write_record: calls.append(("init", model, write_record)))
    config = config_file(tmp_path)
    out = tmp_path / "run"
    if start == "resume":
        newest = save_step(out, config, 3)
    request = RunRequest(config=str(config), out=out, resume=start == "resume",
                         init_from="pretrained" if start == "finetune" else None)
    plan = plan_run(request)
    assert plan.start == start
    assert execute_run(plan, SINGLE) == 0
    assert resolved == [("cpu", 0)]
    (trainer,) = FakeTrainer.made
    assert trainer.device == torch.device("cpu") and trainer.out == out and trainer.cfg is plan.cfg
    assert trainer.calls == ([("resume", newest)] if start == "resume" else []) + [("fit",)]
    assert calls == ([("check", "tokenizer"), ("init", "model", True)] if start == "finetune" else [])
    with RunLock(out):  # execute_run released it
        pass


def test_a_run_that_ended_meanwhile_is_refused_once_the_lock_is_held(tmp_path, monkeypatch):
    monkeypatch.setattr(run, "prepare_corpus", lambda *a, **k: pytest.fail("no corpus for a refused run"))
    config = config_file(tmp_path)
    out = tmp_path / "run"
    plan = plan_run(RunRequest(config=str(config), out=out))
    save_step(out, config, 2)  # another training finished in the folder after the plan
    with pytest.raises(ValueError, match="already holds a run"):
        execute_run(plan, SINGLE)


def test_a_busy_run_folder_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(run, "prepare_corpus", lambda *a, **k: pytest.fail("no corpus for a refused run"))
    out = tmp_path / "run"
    plan = plan_run(RunRequest(config=str(config_file(tmp_path)), out=out))
    with RunLock(out):
        with pytest.raises(RunFolderBusy, match="in use by another training"):
            execute_run(plan, SINGLE)
