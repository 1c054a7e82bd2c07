"""Hand-edited or damaged checkpoints: one ValueError naming the file and field, nothing allocated."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from training.checkpoint import load_checkpoint, load_model, restore_training, save_checkpoint
from training.config import apply_overrides, RunConfig
from model import MusicPerformer
from remi import REMITokenizer

TINY = ["model.n_layer=2", "model.n_head=2", "model.d_model=32", "model.d_ff=64", "model.dropout=0.0",
        "model.num_realizations=8", "model.feature_dims=16", "model.attention=torch", "model.max_len=64"]


@pytest.fixture
def saved(tmp_path):
    tokenizer = REMITokenizer()
    cfg = apply_overrides(RunConfig(), TINY)
    torch.manual_seed(0)
    model = MusicPerformer(cfg.model_config(tokenizer.vocab_size))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    _, loss = model(torch.randint(0, 50, (1, 9)), torch.randint(0, 50, (1, 9)))
    loss.backward()
    optimizer.step()
    path = save_checkpoint(tmp_path, model=model, tokenizer=tokenizer, config=cfg, step=3, epoch=1,
                           optimizer=optimizer, scheduler={"step": 3}, extra={"position": 1})
    return path, model, optimizer


def edit_meta(path, change):
    meta = json.loads((path / "meta.json").read_text())
    meta = change(meta)
    (path / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("change, message", [
    (lambda m: {**m, "step": None}, "field 'step' must be an int >= 0"),
    (lambda m: [m], "unsupported checkpoint format"),
    (lambda m: {**m, "epoch": "x"}, "field 'epoch' must be an int >= 0"),
    (lambda m: {**m, "tokenizer": "REMI"}, "field 'tokenizer' must be an object"),
    (lambda m: {**m, "tokenizer": [1, 2]}, "field 'tokenizer' must be an object"),
    (lambda m: {**m, "tokenizer": {**m["tokenizer"], "config": {**m["tokenizer"]["config"], "colour": 1}}},
     "field 'tokenizer' is not a saved tokenizer"),
    (lambda m: {**m, "config": {**m["config"], "model": {**m["config"]["model"], "d_ff": 2**31}}},
     "does not match the model config of its meta.json"),
    (lambda m: {**m, "config": {**m["config"], "model": {**m["config"]["model"], "n_layer": 100000}}},
     "the weights have 2 layers, the config 100000"),
])
def test_a_hand_edited_meta_is_one_clear_error(saved, change, message):
    path, _, _ = saved
    edit_meta(path, change)
    with pytest.raises(ValueError, match=message):
        load_model(path)


def test_resume_checks_the_optimizer_scheduler_and_rng(saved):
    path, model, optimizer = saved
    edit_meta(path, lambda m: {k: v for k, v in m.items() if k != "scheduler"})
    with pytest.raises(ValueError, match="field 'scheduler' is missing"):
        restore_training(path, model, optimizer)
    edit_meta(path, lambda m: {**m, "scheduler": {}})
    tensors = load_file(str(path / "optimizer.safetensors"))
    name = next(k for k in tensors if k.endswith("exp_avg"))
    tensors[name] = torch.zeros(3, 3)
    save_file(tensors, str(path / "optimizer.safetensors"))
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"]["optimizer.safetensors"] = (path / "optimizer.safetensors").stat().st_size
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="exp_avg of parameter .* has shape \\(3, 3\\)"):
        restore_training(path, model, optimizer)
    assert load_checkpoint(path).step == 3  # the weights themselves are fine
