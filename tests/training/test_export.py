"""training.export / spe-export: a shipped model folder loads like a checkpoint, is smaller, predicts
the same, keeps the positional encoding in float32, and carries a model card with the run's record."""

from __future__ import annotations

import csv
import json
import re

import pytest
import torch
from safetensors.torch import load_file

from apps.export import main
from remi import REMITokenizer
from training.checkpoint import load_checkpoint, save_checkpoint
from training.config import RunConfig, apply_overrides
from training.export import averaged_weights, trained_on, training_record
from model import MusicPerformer

TINY = ["model.n_layer=2", "model.n_head=2", "model.d_model=32", "model.d_ff=64", "model.dropout=0.0",
        "model.num_realizations=8", "model.feature_dims=16", "model.attention=torch", "model.max_len=64",
        "data.crop_len=32"]


def write_run(run_dir, metrics: list[dict]) -> MusicPerformer:
    cfg = apply_overrides(RunConfig(), TINY)
    tokenizer = REMITokenizer()
    torch.manual_seed(0)
    model = MusicPerformer(cfg.model_config(tokenizer.vocab_size))
    optimizer = torch.optim.AdamW(model.parameters())
    save_checkpoint(run_dir, model=model, tokenizer=tokenizer, config=cfg, step=5, optimizer=optimizer,
                    rng=[])
    with (run_dir / "metrics.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["step", "loss", "val_loss", "elapsed_s"])
        writer.writeheader()
        writer.writerows(metrics)
    return model


def test_exported_model_loads_predicts_the_same_and_has_a_card(tmp_path):
    metrics = [{"step": 1, "loss": 5.0, "val_loss": "", "elapsed_s": 1800},
               {"step": 2, "loss": 4.0, "val_loss": 3.5, "elapsed_s": 3600},  # session 1 ends at 1 h
               {"step": 3, "loss": 3.0, "val_loss": "", "elapsed_s": 900},
               {"step": 4, "loss": 2.5, "val_loss": 2.25, "elapsed_s": 1800}]  # session 2: 0.5 h
    model = write_run(tmp_path / "run", metrics)
    section = tmp_path / "quality.md"
    section.write_text("| metric | generated | real |\n|---|---|---|\n| polyphony | 3.1 | 3.7 |\n")
    out = tmp_path / "shipped"
    assert main(["--checkpoint", str(tmp_path / "run"), "--out", str(out), "--title", "Tiny test model",
                 "--section", str(section)]) == 0

    assert sorted(p.name for p in out.iterdir()) == ["README.md", "meta.json", "model.safetensors"]
    meta = json.loads((out / "meta.json").read_text())
    assert "optimizer" not in meta and "rng" not in meta and meta["step"] == 5
    weights = load_file(str(out / "model.safetensors"))
    assert weights["head.weight"].dtype == torch.bfloat16
    assert all(v.dtype == torch.float32 for k, v in weights.items() if k.startswith("pe."))
    assert weights["blocks.0.attn.features.projection"].dtype == torch.float32
    trained = load_file(str(tmp_path / "run" / "checkpoints" / "step_000005" / "model.safetensors"))
    assert sum(v.nbytes for v in weights.values()) < 0.6 * sum(v.nbytes for v in trained.values())

    shipped = load_checkpoint(out).model
    tokens = torch.randint(0, 300, (1, 40))
    noise = model.draw_positional_noise(40, generator=torch.Generator().manual_seed(0))
    model.eval()
    with torch.no_grad():
        expected = model(tokens, positional_noise=noise)[0].log_softmax(-1)
        got = shipped(tokens, positional_noise=noise)[0].log_softmax(-1)
    assert (expected - got).abs().max() < 0.05  # bf16 weights: a few 1e-3 of relative error

    card = (out / "README.md").read_text()
    assert card.startswith("# Tiny test model") and "1.5 h over 2 session(s)." in card  # device: auto
    assert "2.250 at step 4" in card and "| polyphony | 3.1 | 3.7 |" in card


def test_training_record_without_metrics(tmp_path):
    assert training_record(tmp_path) == {} and training_record(None) == {}


def test_training_record_stops_at_the_exported_step(tmp_path):
    write_run(tmp_path, [{"step": 2, "loss": 4.0, "val_loss": 3.5, "elapsed_s": 600},
                         {"step": 4, "loss": 3.0, "val_loss": 3.0, "elapsed_s": 1200},
                         {"step": 6, "loss": 2.0, "val_loss": 2.0, "elapsed_s": 1800}])
    record = training_record(tmp_path, up_to_step=5)
    assert (record["val_loss"], record["val_step"], record["hours"]) == (3.0, 4, 1200 / 3600)


def test_bad_section_is_a_one_line_error(tmp_path, capsys):
    write_run(tmp_path / "run", [])
    assert main(["--checkpoint", str(tmp_path / "run"), "--out", str(tmp_path / "o"), "--title", "t",
                 "--section", str(tmp_path / "missing.md")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_sampling_defaults_can_be_set_at_export_and_nothing_else(tmp_path, capsys):
    write_run(tmp_path / "run", [])
    out = tmp_path / "shipped"
    assert main(["--checkpoint", str(tmp_path / "run"), "--out", str(out), "--title", "t",
                 "--set", "generate.temperature=1.0", "--set", "generate.top_p=0.95",
                 "--set", "data.root=corpus/songs"]) == 0
    config = load_checkpoint(out).config
    assert (config.generate.temperature, config.generate.top_p) == (1.0, 0.95)
    assert config.data.root == "corpus/songs"
    assert "temperature 1," in (out / "README.md").read_text()
    run_meta = json.loads((tmp_path / "run" / "checkpoints" / "step_000005" / "meta.json").read_text())
    assert run_meta["config"]["generate"]["temperature"] != 1.0  # the run itself is unchanged

    assert main(["--checkpoint", str(tmp_path / "run"), "--out", str(tmp_path / "o2"), "--title", "t",
                 "--set", "model.n_layer=3"]) == 2
    assert "only the sampling defaults" in capsys.readouterr().err


def test_card_names_the_device_trained_on():
    recorded = {"extra": {"position": 0, "device": "NVIDIA H200"}, "config": {"train": {"device": "auto"}}}
    assert trained_on(recorded, 1) == ", on NVIDIA H200"
    assert trained_on({"extra": {}, "config": {"train": {"device": "cpu"}}}, 3) == ", the last on CPU"
    assert trained_on({"config": {"train": {"device": "cuda"}}}, 1) == ", on a GPU"
    assert trained_on({"config": {"train": {"device": "auto"}}}, 1) == ""


def test_averaged_export_ships_the_weighted_mean_of_two_checkpoints(tmp_path, capsys):
    first = write_run(tmp_path / "start", [])
    torch.manual_seed(1)
    tuned = write_run(tmp_path / "run", [])  # another initialisation: every tensor differs
    out = tmp_path / "shipped"
    assert main(["--checkpoint", str(tmp_path / "run"), "--out", str(out), "--title", "t", "--fp32",
                 "--average-with", str(tmp_path / "start"), "--average-weight", "0.25"]) == 0
    weights = load_file(str(out / "model.safetensors"))
    start, run = first.state_dict(), tuned.state_dict()
    for name, tensor in weights.items():
        assert torch.allclose(tensor, 0.25 * run[name] + 0.75 * start[name], atol=1e-6), name
    meta = json.loads((out / "meta.json").read_text())
    assert meta["averaged_with"] == {"checkpoint": str(tmp_path / "start"), "step": 5, "weight_of_this_run": 0.25}
    assert "0.25 x this run's + 0.75 x those of" in (out / "README.md").read_text()
    load_checkpoint(out)  # the averaged folder loads like any checkpoint

    assert main(["--checkpoint", str(tmp_path / "run"), "--out", str(tmp_path / "o2"), "--title", "t",
                 "--average-with", str(tmp_path / "start"), "--average-weight", "1.5"]) == 2
    assert "must be in [0, 1]" in capsys.readouterr().err


def test_averaging_refuses_checkpoints_of_different_models():
    one = {"a": torch.zeros(2, 3), "b": torch.zeros(3)}
    assert averaged_weights(one, {"a": torch.ones(2, 3), "b": torch.ones(3)}, 0.5)["a"].eq(0.5).all()
    for other, message in (({"a": torch.zeros(2, 3)}, "in one only"),
                           ({"a": torch.zeros(3, 2), "b": torch.zeros(3)}, "(2, 3) in one and (3, 2)")):
        with pytest.raises(ValueError, match=re.escape(message)):
            averaged_weights(one, other, 0.5)
