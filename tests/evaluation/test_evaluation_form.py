"""evaluation.form: phrase similarity by label, the self-similarity matrix and the memory measure."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from evaluation.form import form_score, jaccard, memory_gain, plot_self_similarity, self_similarity, summary
from evaluation.quality_metrics import NotePiece
from generation.recall import KeyTokens, RecallConfig
from model import ModelConfig, MusicPerformer
from tokenization.form import parse_form

BAR = 16  # sub-beats of a 4/4 bar


def piece_of(bars: list[list[tuple[int, int]]]) -> NotePiece:
    """A piece from per-bar lists of (onset in the bar, pitch)."""
    notes = [(b * BAR + onset, pitch) for b, bar in enumerate(bars) for onset, pitch in bar]
    onsets = np.asarray([n[0] for n in notes], dtype=np.int64)
    return NotePiece(onsets, onsets + 2, np.asarray([n[1] for n in notes], dtype=np.int64),
                     np.arange(len(bars) + 1, dtype=np.int64) * BAR)


def test_same_label_phrases_are_compared_bar_by_bar():
    a = [[(0, 60), (4, 64)], [(0, 62)]]
    b = [[(0, 70)], [(8, 72)]]
    varied = [[(0, 60), (4, 64)], [(0, 62), (8, 65)]]  # the second bar varied: Jaccard 1/2
    piece = piece_of([[]] + a + b + varied)  # one empty bar before the form
    score = form_score(piece, parse_form("A2 B2 A2"), shift=1)
    assert score.same == pytest.approx((1.0 + 0.5) / 2) and score.same_pairs == 2
    assert score.different == 0.0 and score.different_pairs == 4
    assert score.gap == pytest.approx(0.75)
    assert jaccard(set(), set()) == 0.0
    stats = summary([score, score])
    assert stats["same"] == (pytest.approx(0.75), 0.0, 2)


def test_bars_outside_the_piece_are_left_out():
    piece = piece_of([[(0, 60)], [(0, 60)]])
    score = form_score(piece, parse_form("A1 A1 A1"), shift=0)
    assert score.same_pairs == 1 and score.same == 1.0 and math.isnan(score.different)


def test_self_similarity_and_its_plot(tmp_path):
    piece = piece_of([[(0, 60)], [(0, 61)], [(0, 60)]])
    matrix = self_similarity(piece)
    assert matrix.shape == (3, 3) and matrix[0, 2] == 1.0 and matrix[0, 1] == 0.0
    path = tmp_path / "ssm.png"
    plot_self_similarity([("a piece", matrix, parse_form("A1 B1 A1"), 0), ("no form", matrix, [], 0)], path)
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_memory_gain_reads_returning_phrases_twice():
    torch.manual_seed(0)
    model = MusicPerformer(ModelConfig(vocab_size=12, n_layer=1, n_head=2, d_model=16, d_ff=32, dropout=0.0,
                                       num_realizations=8, num_sines=2, feature_dims=16, attention="torch",
                                       max_len=64, decay_horizon=8, memory_heads=1))
    bar = [0, 3, 4, 5]  # token 0 starts a bar
    ids = [0, 1] + [0, 6, 7, 8] + bar * 2 + [0, 9] + bar * 2 + [0, 10]
    starts = [i for i, t in enumerate(ids) if t == 0]
    memory = memory_gain(model, ids, starts, parse_form("A2 X1 A2"), shift=2)
    assert memory.tokens == 8 and memory.song_tokens == len(ids) - 1
    assert math.isfinite(memory.gain) and memory.returning > 0 and memory.as_first > 0
    none = memory_gain(model, ids, starts, parse_form("A2 X1 B2"), shift=2)
    assert none.tokens == 0 and math.isnan(none.gain)


def test_memory_gain_under_recall_counts_what_the_copy_cache_restates():
    torch.manual_seed(0)
    model = MusicPerformer(ModelConfig(vocab_size=12, n_layer=1, n_head=2, d_model=16, d_ff=32, dropout=0.0,
                                       num_realizations=8, num_sines=2, feature_dims=16, attention="torch",
                                       max_len=64))
    bar = [0, 3, 4, 5]
    ids = [0, 1] + [0, 6, 7, 8] + bar * 2 + [0, 9] + bar * 2 + [0, 10]
    starts = [i for i, t in enumerate(ids) if t == 0]
    form = parse_form("A2 X1 A2")
    plain = memory_gain(model, ids, starts, form, shift=2)
    recall = (RecallConfig((0.9,), orders=(2,), min_lag=4), KeyTokens.plain(12))
    copied = memory_gain(model, ids, starts, form, shift=2, recall=recall)
    assert copied.tokens == plain.tokens == 8
    assert copied.returning < plain.returning  # the returning A is predicted from the first one
    assert copied.gain > plain.gain + 0.5
