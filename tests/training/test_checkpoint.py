"""training.checkpoint: safetensors/JSON round trip of weights, optimizer and RNG; refusal of mismatches."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from training.checkpoint import capture_rng, list_checkpoints, load_checkpoint, resolve_checkpoint, \
    restore_rng, restore_training, save_checkpoint, set_generate_defaults
from training.config import apply_overrides, RunConfig
from model import MusicPerformer
from remi import REMITokenizer

TINY = ["model.n_layer=2", "model.n_head=2", "model.d_model=32", "model.d_ff=64", "model.dropout=0.0",
        "model.num_realizations=8", "model.feature_dims=16", "model.attention=torch", "model.max_len=64"]


@pytest.fixture(scope="module")
def tokenizer():
    return REMITokenizer()


def trained(cfg, tokenizer, seed=0, steps=2):
    """A tiny model and AdamW optimizer after a few steps on random tokens."""
    torch.manual_seed(seed)
    model = MusicPerformer(cfg.model_config(tokenizer.vocab_size))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.8, 0.9))
    for _ in range(steps):
        tokens = torch.randint(0, tokenizer.vocab_size, (2, 17))
        _, loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model, optimizer


def test_round_trip_weights_optimizer_rng(tmp_path, tokenizer):
    cfg = apply_overrides(RunConfig(), TINY)
    model, optimizer = trained(cfg, tokenizer)
    rng = capture_rng()
    expected = (torch.rand(3), np.random.rand(3), random.random())
    path = save_checkpoint(tmp_path, model=model, tokenizer=tokenizer, config=cfg, step=7, epoch=2,
                           optimizer=optimizer, scheduler={"step": 7}, extra={"position": 3},
                           rng=[rng])
    assert sorted(p.name for p in path.iterdir()) == ["manifest.json", "meta.json", "model.safetensors",
                                                      "optimizer.safetensors", "rng.safetensors"]

    fresh, fresh_optimizer = trained(cfg, tokenizer, seed=1, steps=1)
    state = restore_training(tmp_path, fresh, fresh_optimizer)
    assert (state.step, state.epoch, state.scheduler, state.extra) == (7, 2, {"step": 7}, {"position": 3})
    for key, value in model.state_dict().items():
        assert torch.equal(value, fresh.state_dict()[key]), key
    saved, loaded = optimizer.state_dict(), fresh_optimizer.state_dict()
    assert saved["param_groups"] == loaded["param_groups"]
    for index, values in saved["state"].items():
        for key, value in values.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(loaded["state"][index][key]))

    torch.manual_seed(123), np.random.seed(123), random.seed(123)
    restore_rng(state.rng[0])
    assert torch.equal(torch.rand(3), expected[0])
    assert np.array_equal(np.random.rand(3), expected[1]) and random.random() == expected[2]


def test_load_checkpoint_rebuilds_model_and_tokenizer(tmp_path, tokenizer):
    cfg = apply_overrides(RunConfig(), TINY + ["model.pe=conv_spe", "model.kernel_size=8"])
    model, _ = trained(cfg, tokenizer)
    save_checkpoint(tmp_path, model=model, tokenizer=tokenizer, config=cfg, step=3)
    for where in (tmp_path, tmp_path / "checkpoints", tmp_path / "checkpoints" / "step_000003"):
        ckpt = load_checkpoint(where)
        assert ckpt.step == 3 and ckpt.config == cfg and not ckpt.model.training
        assert ckpt.tokenizer.vocab.tokens == tokenizer.vocab.tokens
        for key, value in model.state_dict().items():
            assert torch.equal(value, ckpt.model.state_dict()[key]), key
    tokens = torch.randint(0, tokenizer.vocab_size, (1, 12))
    model.eval()
    noise = model.draw_positional_noise(12)
    assert torch.allclose(model(tokens, positional_noise=noise)[0], ckpt.model(tokens, positional_noise=noise)[0])


def test_mismatched_checkpoint_is_refused(tmp_path, tokenizer):
    cfg = apply_overrides(RunConfig(), TINY)
    model, _ = trained(cfg, tokenizer)
    path = save_checkpoint(tmp_path, model=model, tokenizer=tokenizer, config=cfg, step=1)
    other = MusicPerformer(apply_overrides(cfg, ["model.d_model=48"]).model_config(tokenizer.vocab_size))
    with pytest.raises(ValueError, match="does not match.*shape"):
        restore_training(path, other)
    meta = json.loads((path / "meta.json").read_text())
    meta["config"]["model"]["n_layer"] = 3  # weights of 2 layers, config of 3
    (path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="does not match.*the weights have 2 layers, the config 3"):
        load_checkpoint(tmp_path)


def test_latest_pointer_and_pruning(tmp_path, tokenizer):
    cfg = apply_overrides(RunConfig(), TINY)
    model, _ = trained(cfg, tokenizer, steps=0)
    for step in (5, 10, 15, 20):
        save_checkpoint(tmp_path, model=model, tokenizer=tokenizer, config=cfg, step=step, keep=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_000015", "step_000020"]
    assert resolve_checkpoint(tmp_path).name == "step_000020"
    save_checkpoint(tmp_path, model=model, tokenizer=tokenizer, config=cfg, step=20, keep=2)  # re-save
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == \
        ["latest", "step_000015", "step_000020"]  # no temporary leftovers


def test_missing_or_corrupt_checkpoint(tmp_path, tokenizer):
    with pytest.raises(ValueError, match="no complete checkpoint"):
        load_checkpoint(tmp_path)
    cfg = apply_overrides(RunConfig(), TINY)
    model, _ = trained(cfg, tokenizer, steps=0)
    path = save_checkpoint(tmp_path, model=model, tokenizer=tokenizer, config=cfg, step=1)
    size = (path / "model.safetensors").stat().st_size
    (path / "model.safetensors").write_bytes(b"not a safetensors file".ljust(size))  # its size, bad content
    with pytest.raises(ValueError, match="cannot read"):
        load_checkpoint(path)
    (path / "model.safetensors").write_bytes(b"cut short")
    with pytest.raises(ValueError, match="not a complete checkpoint"):
        load_checkpoint(path)


def test_sampling_defaults_can_be_changed_in_place(tmp_path, tokenizer):
    cfg = apply_overrides(RunConfig(), TINY)
    model, _ = trained(cfg, tokenizer)
    save_checkpoint(tmp_path, model=model, tokenizer=tokenizer, config=cfg, step=1)
    weights = (0.1, 0.2, 0.3, 0.4, 0.5, np.float64(0.6))
    set_generate_defaults(tmp_path, recall_weights=weights)
    ckpt = load_checkpoint(tmp_path)
    assert ckpt.config.generate.recall_weights == (0.1, 0.2, 0.3, 0.4, 0.5, 0.6)
    assert ckpt.config.generate.top_p == cfg.generate.top_p  # the rest kept
    for key, value in model.state_dict().items():
        assert torch.equal(value, ckpt.model.state_dict()[key]), key
    with pytest.raises(ValueError, match="recall"):
        set_generate_defaults(tmp_path, recall_weights=(0.5,))  # one weight for six orders: nothing written
    assert load_checkpoint(tmp_path).config.generate.recall_weights == (0.1, 0.2, 0.3, 0.4, 0.5, 0.6)
