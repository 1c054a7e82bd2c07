"""bench.opening on a tiny random model: per-bar counts, and the table of both starts."""

from __future__ import annotations

import numpy as np
import torch

from bench import opening
from cli_helpers import save_tiny, song_corpus
from generation.pieces import piece_ids
from remi import REMITokenizer


def test_counts_are_taken_bar_by_bar(chorale_midi):
    tokenizer = REMITokenizer()
    ids = piece_ids(tokenizer, chorale_midi)
    counts = opening.Counts()
    mean = counts.add(tokenizer, ids, bars=3)
    starts = tokenizer.bar_starts(ids)
    assert counts.tokens[0] == [starts[i + 1] - starts[i] for i in range(3)]
    first_bar = [tokenizer.vocab.token(i) for i in ids[starts[0]:starts[1]]]
    assert counts.onsets[0][0] == sum(t.startswith("Beat_") for t in first_bar)
    assert counts.notes[0][0] == sum(t.startswith("Note_Pitch_") for t in first_bar)
    assert np.isclose(mean, np.mean(counts.tokens[0]))
    assert np.allclose(counts.per_bar(3), counts.tokens[0])


def test_main_compares_both_starts_with_the_real_songs(chorale_midi, tmp_path):
    torch.set_num_threads(1)
    tokenizer = REMITokenizer()
    corpus = song_corpus(tmp_path / "corpus", tokenizer, chorale_midi)
    run = save_tiny(tmp_path / "tiny", tokenizer, max_len=4096)
    out = tmp_path / "out"
    assert opening.main(["--checkpoint", str(run), "--corpus", str(corpus), "--seeds", "2", "--pieces", "1",
                         "--tokens", "80", "--bars", "2", "--out", str(out)]) == 0
    text = (out / "opening.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| ")}
    assert set(opening.VARIANTS) <= set(rows) and "real songs (test)" in rows
    assert rows["lone bar line"].split("|")[2].strip() == "2"  # one piece per seed, 2 seeds
    assert (out / "opening.png").read_bytes()[:4] == b"\x89PNG"
