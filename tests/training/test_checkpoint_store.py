"""training.checkpoint_store: what a crash at any instant leaves is resumable from the newest
complete checkpoint; partial folders never pass for complete; dead processes' leftovers go."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from training.checkpoint import list_checkpoints, resolve_checkpoint, save_checkpoint
from training.checkpoint_store import MANIFEST, clean_stale, is_complete, write_checkpoint
from training.config import RunConfig, apply_overrides
from model import MusicPerformer
from remi import REMITokenizer

TINY = ["model.n_layer=1", "model.n_head=2", "model.d_model=16", "model.d_ff=32", "model.dropout=0.0",
        "model.num_realizations=4", "model.feature_dims=8", "model.attention=torch", "model.max_len=32"]


@pytest.fixture(scope="module")
def saver():
    """save(run_dir, step, keep=0): a tiny model saved as that step's checkpoint."""
    tokenizer = REMITokenizer()
    cfg = apply_overrides(RunConfig(), TINY)
    model = MusicPerformer(cfg.model_config(tokenizer.vocab_size))

    def save(run_dir, step, keep=0):
        return save_checkpoint(run_dir, model=model, tokenizer=tokenizer, config=cfg, step=step, keep=keep)
    return save


def dead_pid() -> int:
    """The PID of a process that has exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def names(run_dir):
    return sorted(p.name for p in (run_dir / "checkpoints").iterdir())


def test_a_saved_checkpoint_has_a_manifest_of_its_files(tmp_path, saver):
    path = saver(tmp_path, 4)
    files = json.loads((path / MANIFEST).read_text())["files"]
    assert sorted(files) == ["meta.json", "model.safetensors"]
    assert all((path / name).stat().st_size == size for name, size in files.items())
    assert is_complete(path) and names(tmp_path) == ["latest", "step_000004"]


def test_resume_needs_no_latest_pointer(tmp_path, saver):
    for step in (2, 4):
        saver(tmp_path, step)
    (tmp_path / "checkpoints" / "latest").unlink()
    assert resolve_checkpoint(tmp_path).name == "step_000004"
    assert resolve_checkpoint(tmp_path / "checkpoints").name == "step_000004"


@pytest.mark.parametrize("pointer", ["step_000006\n", "step_000004\n", "../../etc\n", ""])
def test_a_pointer_to_a_missing_or_incomplete_folder_is_ignored(tmp_path, saver, pointer):
    for step in (2, 4):
        saver(tmp_path, step)
    (tmp_path / "checkpoints" / "step_000004" / "model.safetensors").unlink()  # incomplete
    (tmp_path / "checkpoints" / "latest").write_text(pointer)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_000002"]
    assert resolve_checkpoint(tmp_path).name == "step_000002"


@pytest.mark.parametrize("damage", ["no_manifest_no_weights", "truncated", "manifest_cut", "no_meta"])
def test_partial_folders_do_not_pass_for_complete(tmp_path, saver, damage):
    saver(tmp_path, 2)
    path = saver(tmp_path, 4)
    if damage == "no_manifest_no_weights":  # what a kill in the middle of an old-style prune left
        (path / MANIFEST).unlink()
        (path / "model.safetensors").unlink()
    elif damage == "truncated":
        with (path / "model.safetensors").open("r+b") as handle:
            handle.truncate(100)
    elif damage == "manifest_cut":  # (a manifest is renamed into place whole; this is damage from outside)
        (path / MANIFEST).write_text('{"files": {"meta.js')
    else:
        (path / "meta.json").unlink()
    assert not is_complete(path)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_000002"]
    assert resolve_checkpoint(tmp_path).name == "step_000002"
    with pytest.raises(ValueError, match="complete checkpoint"):
        resolve_checkpoint(path)


def test_a_run_saved_before_manifests_still_resumes(tmp_path, saver):
    path = saver(tmp_path, 3)
    (path / MANIFEST).unlink()
    assert resolve_checkpoint(tmp_path) == path


def test_pruning_renames_away_before_deleting(tmp_path, saver, monkeypatch):
    saver(tmp_path, 2)
    saver(tmp_path, 4)
    real = shutil.rmtree

    def killed_while_deleting(path, *args, **kwargs):  # a kill after the first file went
        if ".prune_" in str(path):
            next(p for p in sorted(path.iterdir()) if p.suffix == ".safetensors").unlink()
            raise KeyboardInterrupt
        return real(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", killed_while_deleting)
    with pytest.raises(KeyboardInterrupt):
        saver(tmp_path, 6, keep=2)
    monkeypatch.setattr(shutil, "rmtree", real)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_000004", "step_000006"]
    leftover = [n for n in names(tmp_path) if n.startswith(".prune_")]
    assert leftover == [f".prune_step_000002_{os.getpid()}"]


def test_dead_processes_leftovers_are_removed(tmp_path, saver):
    saver(tmp_path, 2)
    folder = tmp_path / "checkpoints"
    dead, alive = dead_pid(), os.getppid()
    for name in (f".tmp_step_000004_{dead}", f".prune_step_000000_{dead}", f".tmp_step_000008_{alive}"):
        (folder / name).mkdir()
        (folder / name / "model.safetensors").write_bytes(b"x" * 1000)
    (folder / f".latest_{dead}").write_text("step_000004\n")
    removed = clean_stale(tmp_path)
    assert sorted(removed) == sorted([f".tmp_step_000004_{dead}", f".prune_step_000000_{dead}", f".latest_{dead}"])
    assert names(tmp_path) == [f".tmp_step_000008_{alive}", "latest", "step_000002"]  # a live writer's stays


def test_a_kill_between_the_renames_of_a_resave_loses_nothing(tmp_path, saver, monkeypatch):
    saver(tmp_path, 2)
    saver(tmp_path, 4)
    original = Path.rename

    def rename(self, target):
        result = original(self, target)
        if self.name == "step_000004":  # swapped out; the kill comes before the new copy's rename
            raise KeyboardInterrupt
        return result

    monkeypatch.setattr(Path, "rename", rename)
    with pytest.raises(KeyboardInterrupt):
        saver(tmp_path, 4)
    monkeypatch.setattr(Path, "rename", original)
    assert resolve_checkpoint(tmp_path).name == "step_000002"  # at most one interval lost as it stands
    clean_stale(tmp_path)  # this process "died": its swapped-out step goes back into place
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_000002", "step_000004"]
    assert not [n for n in names(tmp_path) if n.startswith(".")]


def test_a_pointer_outside_its_folder_echoes_nothing(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("hidden:x:0:0:words/of/a/secret\n")
    (models / "latest").symlink_to(secret)
    with pytest.raises(ValueError) as caught:
        resolve_checkpoint(models)
    assert "hidden" not in str(caught.value) and "secret" not in str(caught.value)


def test_write_checkpoint_keeps_the_newest(tmp_path):
    def write(folder):
        (folder / "meta.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(b"w")

    for step in range(1, 6):
        write_checkpoint(tmp_path, step, write, keep=2)
    assert names(tmp_path) == ["latest", "step_000004", "step_000005"]
