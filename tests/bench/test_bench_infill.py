"""bench.infill on tiny random models: every song gets NLLs, an infill that keeps the other bars, a table."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch

from bench import infill
from cli_helpers import save_tiny
from data.corpus import Piece, write_corpus
from generation.pieces import piece_ids
from remi import REMITokenizer


@pytest.fixture()
def one_song_corpus(chorale_midi, tmp_path):
    tokenizer = REMITokenizer().with_infill()
    ids = piece_ids(tokenizer, chorale_midi) + [tokenizer.eos_id]
    piece = Piece("chorale", np.asarray(ids, dtype=np.int32))
    write_corpus(tmp_path / "corpus", tokenizer, {"test": [piece]}, [], "test", {})
    return tmp_path / "corpus", tokenizer, len(tokenizer.bar_starts(ids))


def test_the_table_and_rows_of_one_song(one_song_corpus, tmp_path):
    corpus, tokenizer, bars = one_song_corpus
    assert bars >= 2 * infill.MARGIN + 1
    torch.set_num_threads(1)
    fim = save_tiny(tmp_path / "fim", tokenizer, max_len=4096)
    plain = save_tiny(tmp_path / "plain", REMITokenizer(), max_len=4096)
    out = tmp_path / "out"
    assert infill.main(["--checkpoint", str(fim), "--plain", str(plain), "--corpus", str(corpus), "--songs", "1",
                        "--bars", "1", "--threads", "1", "--out", str(out)]) == 0
    with open(out / "infill.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["source"] for row in rows] == ["real", "fim", "plain"]
    fim_row = next(row for row in rows if row["source"] == "fim")
    assert float(fim_row["notes_kept"]) == 1.0 and float(fim_row["bars_with_notes"]) == 1.0
    for row in rows:
        for nll in ("nll_both_sides", "nll_left_only", "nll_span_as_suffix", "nll_plain_repeat"):
            assert float(row[nll]) > 0
    table = (out / "infill.md").read_text()
    assert "Notes kept outside the span: 100.0%" in table and "| tokens_per_bar |" in table
    assert "the span itself as the suffix" in table
    real = next(row for row in rows if row["source"] == "real")
    assert float(real["join_as_real"]) == 1.0 and 0 <= float(real["join"]) <= 1 and "| join |" in table


def test_a_chord_move_is_its_root_interval_and_families():
    assert infill.move((7, "7"), (0, "M")) == (5, "major", "major")
    assert infill.move((9, "m"), None) == (None, "minor", None)


def test_a_corpus_without_long_enough_songs_is_refused(one_song_corpus, tmp_path):
    corpus, tokenizer, bars = one_song_corpus
    fim = save_tiny(tmp_path / "fim", tokenizer, max_len=4096)
    with pytest.raises(SystemExit):
        infill.main(["--checkpoint", str(fim), "--plain", str(fim), "--corpus", str(corpus), "--bars", str(bars),
                     "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()
