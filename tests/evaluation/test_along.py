"""evaluation.along: windows of 16 bars, tokens per bar, bar repetition and the window tables, on
pieces whose values are known by construction."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evaluation.along import (REPEAT_LAG, WINDOW_BARS, WINDOW_MEASURES, Along, along, bar_repetition,
                              bar_token_counts, bar_window, window_markdown, window_stats,
                              window_target_met)
from evaluation.quality import QualityRow, measure_piece
from evaluation.quality_metrics import NotePiece, from_midi, piece_metrics
from remi import REMITokenizer
from test_quality import midi

BAR = 16  # sub-beats in a 4/4 bar


def piece_of(bars: list[list[tuple[int, int]]]) -> NotePiece:
    """A 4/4 NotePiece from, per bar, its notes as (onset within the bar in sub-beats, pitch), each
    a sub-beat long."""
    notes = [(b * BAR + onset, pitch) for b, content in enumerate(bars) for onset, pitch in content]
    onsets = np.asarray([n[0] for n in notes], dtype=np.int64)
    return NotePiece(onsets, onsets + 1, np.asarray([n[1] for n in notes], dtype=np.int64),
                     np.arange(len(bars) + 1, dtype=np.int64) * BAR)


def distinct_bars(count: int, seed: int = 0) -> list[list[tuple[int, int]]]:
    """`count` bars of 4 notes, no two of the first 24 sharing a pitch: bar b plays pitches
    20 + 4 (b mod 24) .. 20 + 4 (b mod 24) + 3."""
    rng = np.random.default_rng(seed)
    return [[(int(rng.integers(0, BAR)), 20 + 4 * (b % 24) + i) for i in range(4)] for b in range(count)]


def test_a_song_that_restates_its_first_section_repeats_fully():
    section = distinct_bars(8)
    assert bar_repetition(piece_of(section + section)) == 1.0
    assert bar_repetition(piece_of(distinct_bars(16))) == 0.0
    half = [bar[:2] + [(onset, pitch + 1) for onset, pitch in bar[2:]] for bar in section]  # half the notes
    assert bar_repetition(piece_of(section + half)) == pytest.approx(1 / 3)  # Jaccard 2 / 6 per bar


def test_repetition_ignores_lags_below_eight_bars():
    pattern = distinct_bars(1)
    same_bar = piece_of(pattern * 8)  # one bar repeated: only bar-to-bar sameness, 8 bars
    assert math.isnan(bar_repetition(same_bar))  # nothing from bar 9 on
    riff = distinct_bars(4)
    assert bar_repetition(piece_of(riff + riff + distinct_bars(8, seed=3))) == pytest.approx(0.0, abs=0.2)
    assert REPEAT_LAG == 8


def test_windows_hold_the_notes_of_their_bars():
    bars = distinct_bars(40)
    piece = piece_of(bars)
    result = along(piece, [10] * 16 + [20] * 16 + [30] * 8)
    assert result.bars == 40 and len(result.windows) == 2  # bars 33-40 do not fill a window
    first = bar_window(piece, 0, WINDOW_BARS)
    assert first.num_notes == 16 * 4 and first.bars.tolist() == list(range(0, 17 * BAR, BAR))
    assert result.windows[0] == {**piece_metrics(first), "tokens_per_bar": 10.0}
    second = bar_window(piece, 16, WINDOW_BARS)
    assert second.num_notes == 16 * 4 and second.onsets.min() >= 0 and second.onsets.max() < WINDOW_BARS * BAR
    assert result.windows[1]["tokens_per_bar"] == 20.0
    assert set(result.windows[0]) == set(WINDOW_MEASURES)


def test_tokens_per_bar_follow_the_remi_bars():
    """A 20-bar REMI piece: 16-bar window 1 counts the tokens of its bars, from the first note's bar."""
    tokenizer = REMITokenizer()
    notes = [(4.0 * bar + beat, 4.0 * bar + beat + 0.5, 60 + (bar % 5) + beat)
             for bar in range(2, 22) for beat in range(1 + bar % 4)]  # bars 1-2 silent, then 1-4 notes a bar
    ids = [int(i) for i in tokenizer.encode(midi(notes))][:-1]
    values, result = measure_piece(tokenizer, ids)
    starts = tokenizer.bar_starts(ids)
    first_note_bar = 2 if len(starts) == 22 else 0  # the tokenizer may drop the silent opening bars
    counts = np.diff(starts + [len(ids)])[first_note_bar:]
    assert result.bars == 20 and len(result.windows) == 1
    assert result.windows[0]["tokens_per_bar"] == pytest.approx(counts[:16].mean())
    assert bar_token_counts([0, 5, 9], 12, 1) == [4, 3]
    assert values["pitch_range"] == pytest.approx(np.ptp(from_midi(tokenizer.decode(ids)).pitches))


def test_window_targets_and_tables():
    assert window_target_met("empty_beat_rate", 0.019, 0.0, 0.0)  # the 0.02 floor
    assert not window_target_met("empty_beat_rate", 0.05, 0.02, 0.0)
    assert window_target_met("polyphony", 3.0, 2.5, 0.5) and not window_target_met("polyphony", 3.1, 2.5, 0.5)
    assert window_target_met("tokens_per_bar", float("nan"), 2.0, 1.0) is None

    def row(source, windows, bars):
        values = [{m: v for m in WINDOW_MEASURES} for v in windows]
        return QualityRow("unconditional", source, f"{source}{bars}", {}, Along(bars, 0.5, values))

    rows = [row("real", [60.0, 80.0], 40), row("real", [70.0], 20), row("model", [100.0], 16)]
    stats = {(s.source, s.measure, s.window): s for s in window_stats(rows)}
    assert stats[("real", "tokens_per_bar", 0)].mean == 65.0 and stats[("real", "tokens_per_bar", 0)].count == 2
    assert stats[("real", "tokens_per_bar", 1)].count == 1  # only the 40-bar piece fills bars 17-32
    assert ("model", "tokens_per_bar", 1) not in stats
    table = window_markdown(window_stats(rows), "real")
    assert "| tokens per bar | 100 / 65 ± 7.1 (1/2) **no** | n/a |" in table
    assert "bars 17-32" in table
