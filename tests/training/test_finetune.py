"""Fine-tuning (`train.py --init-from`): from the shipped model on a tiny MIDI folder written here,
shape-changing overrides and vocabulary mismatches refused with one line."""

from __future__ import annotations

import json
from pathlib import Path

import miditoolkit
import numpy as np
import pytest
from safetensors.torch import load_file

import apps.train as train
from model import ModelConfig
from training.checkpoint import list_checkpoints, load_checkpoint, read_meta
from training.checkpoint import PRETRAINED, shipped_default, shipped_models

SCALE = [60, 62, 64, 65, 67, 69, 71]


@pytest.fixture(scope="module")
def midi_dir(tmp_path_factory) -> Path:
    """Ten 8-bar 4/4 piano pieces: a bass note per bar and eighth notes of the C major scale above."""
    folder = tmp_path_factory.mktemp("my_midi")
    rng = np.random.default_rng(0)
    for index in range(10):
        file = miditoolkit.MidiFile(ticks_per_beat=480)
        piano = miditoolkit.Instrument(program=0, name="piano")
        for bar in range(8):
            start = bar * 4 * 480
            piano.notes.append(miditoolkit.Note(70, int(rng.choice([48, 53, 55])), start, start + 1920))
            for eighth in range(8):
                tick = start + eighth * 240
                piano.notes.append(miditoolkit.Note(80, int(rng.choice(SCALE)), tick, tick + 240))
        file.instruments.append(piano)
        file.time_signature_changes = [miditoolkit.TimeSignature(4, 4, 0)]
        file.dump(str(folder / f"tune_{index}.mid"))
    return folder


def finetune_args(midi_dir: Path, out: Path, *extra: str) -> list[str]:
    return ["--init-from", "pretrained", "--out", str(out), "--max-steps", "2",
            "--set", "data.kind=midi_folder", "--set", f"data.source={midi_dir}",
            "--set", "train.batch_size=2", "--set", "train.log_every=1", "--set", "train.device=cpu",
            "--set", "train.eval_batches=1", "--set", "train.lr=1e-5", "--set", "train.min_lr=1e-6",
            "--set", "train.warmup_steps=0",
            *extra]


def one_error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line.startswith("spe-train")]
    assert len(err) == 1, err
    assert err[0].startswith("spe-train: error: ")
    return err[0]


def test_finetune_two_steps_from_the_shipped_model(midi_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the corpus goes to corpus/midi_folder_<folder name> under the cwd
    out = tmp_path / "run"
    assert train.main(finetune_args(midi_dir, out, "--set", "model.dropout=0.1")) == 0
    corpus = tmp_path / "corpus" / f"midi_folder_{midi_dir.name}"
    assert (corpus / "summary.json").is_file()

    checkpoints = list_checkpoints(out)
    assert [p.name for p in checkpoints] == ["step_000002"]  # a new run: step 0 -> 2
    meta = read_meta(checkpoints[-1])
    source = read_meta(PRETRAINED)
    model_section = dict(source["config"]["model"], dropout=0.1)  # the source's, one shape-free change
    resolved = meta["config"]["model"]
    assert {key: resolved[key] for key in model_section} == model_section
    # fields ModelConfig gained after the model shipped take their defaults
    defaults = ModelConfig.__dataclass_fields__
    assert all(resolved[key] == defaults[key].default for key in set(resolved) - set(model_section))
    assert meta["config"]["data"]["source"] == str(midi_dir)
    # the source's tokenizer: same kind and vocabulary; its settings kept (newer settings at defaults)
    assert {k: v for k, v in meta["tokenizer"].items() if k != "config"} == \
        {k: v for k, v in source["tokenizer"].items() if k != "config"}
    assert source["tokenizer"]["config"].items() <= meta["tokenizer"]["config"].items()
    # a fresh optimizer: its step counters are those of this run
    steps = load_file(str(checkpoints[-1] / "optimizer.safetensors"))
    assert {float(v) for k, v in steps.items() if k.endswith(".step")} == {2.0}
    # the weights started from the shipped ones: two steps of lr 1e-5 move them by ~2e-5
    tuned = load_checkpoint(out).model.state_dict()
    shipped = load_checkpoint(PRETRAINED).model.state_dict()
    moved = max(float((tuned[k].float() - shipped[k].float()).abs().max()) for k in shipped
                if shipped[k].is_floating_point())
    assert 0.0 < moved < 1e-3
    record = json.loads((out / "init_from.json").read_text())
    assert record["init_from"] == "pretrained" and record["source_step"] == source["step"]


def test_shape_changing_override_is_refused(midi_dir, tmp_path, capsys):
    out = tmp_path / "run"
    args = finetune_args(midi_dir, out, "--set", "model.d_model=64", "--set", f"data.root={tmp_path / 'c'}")
    assert train.main(args) == 2
    message = one_error_line(capsys)
    source = read_meta(PRETRAINED)["config"]["model"]["d_model"]  # the default shipped model's width
    assert f"model.d_model=64 (source: {source})" in message and "shapes" in message
    assert not out.exists() and not (tmp_path / "c").exists()


def test_vocabulary_mismatch_is_one_clear_line(midi_dir, tmp_path, capsys):
    out = tmp_path / "run"
    args = finetune_args(midi_dir, out, "--set", "data.time_signatures=false",
                         "--set", f"data.root={tmp_path / 'corpus_no_meter'}")
    assert train.main(args) == 2
    message = one_error_line(capsys)
    assert "vocabulary" in message and "only in the model (TimeSig_" in message
    assert not out.exists()


def test_unknown_source_is_refused(tmp_path, capsys):
    assert train.main(["--init-from", str(tmp_path / "nowhere"), "--out", str(tmp_path / "run")]) == 2
    assert "--init-from" in one_error_line(capsys)


def test_shape_free_overrides_pass_and_the_run_is_named_after_the_source():
    from training.finetune import finetune_config, resolve_source

    source = resolve_source("pretrained")  # the default shipped model, named after its folder
    assert source.name == shipped_default().name and source.meta["step"] == read_meta(PRETRAINED)["step"]
    assert resolve_source(shipped_default().name).path == source.path  # or by its name
    overrides = ["model.attention=torch", "model.dropout=0.2", "data.source=/x/songs"]
    cfg = finetune_config(source, None, overrides)
    assert (cfg.model.attention, cfg.model.dropout) == ("torch", 0.2)
    assert cfg.model.d_model == source.config.model.d_model
    assert cfg.data.root == f"corpus/{source.config.data.kind}_songs"  # not the source's corpus folder
    with pytest.raises(ValueError, match=f"model.n_layer=2 .source: {source.config.model.n_layer}."):
        finetune_config(source, None, ["model.n_layer=2"])


def without_markers() -> Path:
    """A shipped REMI model without the infill markers (the default may have them)."""
    for folder in shipped_models().values():
        tokenizer = read_meta(folder)["tokenizer"]
        if "Bar_None" in tokenizer["vocab"] and not tokenizer["config"].get("infill"):
            return folder
    pytest.skip("no shipped REMI model without infill markers")


def test_fill_in_the_middle_appends_the_markers_to_the_shipped_vocabulary(midi_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "fim"
    plain = without_markers()
    args = finetune_args(midi_dir, out, "--set", "data.fim_rate=0.5")
    args[args.index("pretrained")] = str(plain)
    assert train.main(args) == 0
    meta = read_meta(list_checkpoints(out)[-1])
    source = read_meta(plain)
    assert meta["tokenizer"]["vocab"] == source["tokenizer"]["vocab"] + ["Infill_Hole", "Infill_Fill", "Infill_End"]
    assert meta["tokenizer"]["config"]["infill"] is True
    tuned = load_checkpoint(out).model.state_dict()
    shipped = load_checkpoint(plain).model.state_dict()
    rows = shipped["embedding.weight"].shape[0]
    for name in ("embedding.weight", "head.weight"):
        assert tuned[name].shape[0] == rows + 3
        assert np.allclose(tuned[name][:rows].numpy(), shipped[name].numpy(), atol=1e-3)
    # the new embedding rows started at the mean row (two steps of lr 1e-5 move them little)
    assert np.allclose(tuned["embedding.weight"][rows:].numpy(),
                       shipped["embedding.weight"].mean(0).expand(3, -1).numpy(), atol=1e-3)
