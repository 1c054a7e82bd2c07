"""bench.density on a tiny random model: the pieces under each bias, the real songs, the fit."""

from __future__ import annotations

import torch

from bench import density
from cli_helpers import save_tiny, song_corpus
from remi import REMITokenizer
from training.checkpoint import load_model


def test_main_counts_each_bias_and_writes_the_fitted_one(chorale_midi, tmp_path):
    torch.set_num_threads(1)
    tokenizer = REMITokenizer()
    corpus = song_corpus(tmp_path / "corpus", tokenizer, chorale_midi, ("valid", "test"))
    run = save_tiny(tmp_path / "tiny", tokenizer, max_len=1024)
    out = tmp_path / "out"
    assert density.main(["--checkpoint", str(run), "--corpus", str(corpus), "--biases", "-3", "0", "--seeds", "1",
                         "--pieces", "2", "--tokens", "300", "--bars", "4", "--out", str(out), "--write"]) == 0
    text = (out / "density.md").read_text()
    rows = {line.split("|")[1].strip(): line.split("|") for line in text.splitlines() if line.startswith("| ")}
    assert {"bias -3", "bias +0", "real songs (valid)", "real songs (test)"} <= set(rows)
    assert all(rows[f"bias {b}"][2].strip() == "2" for b in ("-3", "+0"))  # two pieces each
    # a strong bias against pitches gives fewer notes per onset
    assert float(rows["bias -3"][6]) < float(rows["bias +0"][6])
    fitted = load_model(run).config.generate.token_bias
    assert fitted in ((), (("Note_Pitch", -3.0),)) and f"**{fitted[0][1] if fitted else 0:+g}**" in text
    assert (out / "density.png").stat().st_size > 0
