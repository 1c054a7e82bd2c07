"""The model shipped in pretrained/ loads and generates with no training (`python generate.py`)."""

import miditoolkit

from training.checkpoint import load_checkpoint
from training.checkpoint import PRETRAINED
from apps.generate import main


def test_shipped_model_is_small_and_self_describing():
    assert (PRETRAINED / "meta.json").is_file() and (PRETRAINED / "model.safetensors").is_file()
    assert sum(p.stat().st_size for p in PRETRAINED.iterdir()) <= 25 * 2**20
    ckpt = load_checkpoint(PRETRAINED)
    assert ckpt.model.cfg.vocab_size == ckpt.tokenizer.vocab_size


def test_generate_with_no_checkpoint_uses_the_shipped_model(tmp_path):
    out = tmp_path / "song.mid"
    assert main(["--out", str(out), "--tokens", "48", "--seed", "3", "--no-progress"]) == 0
    tokens = (tmp_path / "song.txt").read_text().split()
    tokenizer = load_checkpoint(PRETRAINED).tokenizer
    state = tokenizer.constraint_state()
    for token in tokenizer.strings_to_ids(tokens):
        assert state.allowed()[token]
        state.advance(token)
    assert len(miditoolkit.MidiFile(str(out)).instruments) >= 1
