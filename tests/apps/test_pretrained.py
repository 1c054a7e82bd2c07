"""The models shipped in pretrained/ load and generate with no training (`python generate.py`)."""

import miditoolkit
import pytest

from apps.generate import main
from training.checkpoint import PRETRAINED, load_checkpoint, load_model, shipped_default, shipped_models


def test_shipped_models_are_small_and_self_describing():
    assert shipped_default() is not None and shipped_default().parent == PRETRAINED
    assert shipped_default().name in shipped_models()
    for name, folder in shipped_models().items():
        assert (folder / "model.safetensors").is_file() and (folder / "README.md").is_file(), name
        assert sum(p.stat().st_size for p in folder.iterdir()) <= 25 * 2**20, name
        ckpt = load_checkpoint(folder)
        assert ckpt.model.cfg.vocab_size == ckpt.tokenizer.vocab_size


def test_shipped_models_by_name():
    name = next(iter(shipped_models()))
    assert load_model(name).path == shipped_models()[name]
    assert load_model(None).path == shipped_default()
    with pytest.raises(ValueError, match="shipped models: "):
        load_model("no_such_model")


def test_generate_with_no_checkpoint_uses_the_shipped_model(tmp_path):
    out = tmp_path / "song.mid"
    assert main(["--out", str(out), "--tokens", "48", "--seed", "3", "--no-progress"]) == 0
    tokens = (tmp_path / "song.txt").read_text().split()
    tokenizer = load_checkpoint(shipped_default()).tokenizer
    state = tokenizer.constraint_state()
    for token in tokenizer.strings_to_ids(tokens):
        assert state.allowed()[token]
        state.advance(token)
    assert len(miditoolkit.MidiFile(str(out)).instruments) >= 1
