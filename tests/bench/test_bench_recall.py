"""bench.recall on a tiny random model: fit on one split, measure on another, store, time; and
bench.infill's NLLs under recall."""

from __future__ import annotations

import numpy as np
import torch

from bench import infill, recall
from cli_helpers import save_tiny
from data.corpus import Piece, write_corpus
from generation.pieces import piece_ids
from remi import REMITokenizer
from training.checkpoint import load_checkpoint


def repeating_corpus(chorale_midi, root, tokenizer):
    """The chorale played twice in a row, in the valid and the test split: a copy cache has much to copy."""
    ids = piece_ids(tokenizer, chorale_midi)
    assert tokenizer.vocab.token(ids[1]).startswith("TimeSig")  # only a song's start states its meter
    twice = np.asarray(ids + ids[:1] + ids[2:] + [tokenizer.eos_id], dtype=np.int32)
    write_corpus(root, tokenizer, {"valid": [Piece("a", twice)], "test": [Piece("b", twice)]}, [], "test", {})
    return root


def test_fit_measure_and_write(chorale_midi, tmp_path, capsys):
    torch.set_num_threads(1)
    tokenizer = REMITokenizer()
    corpus = repeating_corpus(chorale_midi, tmp_path / "corpus", tokenizer)
    run = save_tiny(tmp_path / "tiny", tokenizer, max_len=4096)
    out = tmp_path / "out"
    assert recall.main(["--checkpoint", str(run), "--corpus", str(corpus), "--min-lag", "16", "--threads", "1",
                        "--out", str(out), "--write"]) == 0
    table = (out / "recall.md").read_text()
    assert "| **all** | 1 |" in table and (out / "recall_along.png").read_bytes()[:4] == b"\x89PNG"
    plain, mixed = (float(x.strip("* ")) for x in table.split("| **all** | 1 | |")[1].split("|")[:2])
    assert mixed < plain  # a random model gains from copying a song played twice
    weights = load_checkpoint(run).config.generate.recall_weights
    assert weights is not None and max(weights) > 0.5
    assert load_checkpoint(run).config.generate.recall_min_lag == 16
    capsys.readouterr()
    assert recall.main(["--checkpoint", str(run), "--timing", "64", "--rounds", "1"]) == 0
    table = capsys.readouterr().out
    assert "| plain (no recall, end schedule or token bias) |" in table
    assert "| 1.000 |" in table.split("| plain")[1].split("\n")[0]  # plain against itself
    assert "| defaults |" in table


def test_infill_nlls_under_recall(chorale_midi, tmp_path):
    torch.set_num_threads(1)
    tokenizer = REMITokenizer().with_infill()
    corpus = repeating_corpus(chorale_midi, tmp_path / "corpus", tokenizer)
    fim = save_tiny(tmp_path / "fim", tokenizer, max_len=4096, generate={"recall_weights": [0.5] * 6,
                                                                         "recall_min_lag": 8})
    plain = save_tiny(tmp_path / "plain", REMITokenizer(), max_len=4096)
    out = tmp_path / "out"
    args = ["--checkpoint", str(fim), "--plain", str(plain), "--corpus", str(corpus), "--songs", "1", "--bars", "2",
            "--threads", "1"]
    assert infill.main(args + ["--out", str(out / "alone")]) == 0
    assert infill.main(args + ["--recall", "--out", str(out / "recall")]) == 0
    table = (out / "recall" / "infill.md").read_text()
    assert "--recall`" in table and ", with recall:" in table
