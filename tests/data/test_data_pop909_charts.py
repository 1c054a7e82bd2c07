"""data.pop909_charts: POP909's chord and beat annotations cut into MMA chord charts."""

from __future__ import annotations

import miditoolkit
import numpy as np
import pytest

import data.pop909_charts as pc

@pytest.mark.parametrize("label, name", [
    ("C:maj", "C"), ("A:min", "Am"), ("G:7", "G7"), ("F:maj7", "Fmaj7"), ("D:min7", "Dm7"), ("Bb:maj6", "Bb6"),
    ("E:min6", "Em6"), ("B:dim", "Bdim"), ("C#:aug", "C#aug"), ("F#:dim7", "F#dim7"), ("B:hdim7", "Bm7b5"),
    ("C:minmaj7", "CmM7"), ("D:sus2", "Dsus2"), ("G:sus4", "Gsus4"), ("A:sus4(b7)", "A7sus4"), ("C:maj/3", "C/E"),
    ("A:min/b3", "Am/C"), ("G:7/b7", "G7/F"), ("Db:maj/5", "C#/Ab"), ("F:maj/1", "F"), ("Eb:maj7/7", "Ebmaj7/D"),
])
def test_harte_to_mma_names(label, name):
    assert pc.parse_label(label).mma() == name


def test_harte_transposition_and_errors():
    assert pc.parse_label("N") is None
    assert pc.parse_label("E:min7").mma(shift=-5) == "Bm7"
    assert pc.parse_label("C:maj/3").mma(shift=6) == "F#/Bb"
    for bad in ("C:9", "H:maj", "C:maj/9", "Cmaj"):
        with pytest.raises(ValueError, match="unknown chord label"):
            pc.parse_label(bad)


def _beats(bar_beats: list[int], seconds: float = 0.5) -> np.ndarray:
    """Beat rows (time, downbeat flag) for bars of these numbers of beats, and the closing downbeat."""
    flags = [float(b == 0) for n in bar_beats for b in range(n)] + [1.0]
    return np.stack([np.arange(len(flags)) * seconds, flags], axis=1)


def _spans(beats: np.ndarray, halves: list[tuple[str, str]], jitter: float = 0.2) -> list:
    """Chord spans of two beats each from beat 0 (labels per half bar), moved ``jitter`` beats early."""
    step = beats[1, 0] - beats[0, 0]
    labels = [label for pair in halves for label in pair]
    return [(max(0.0, (2 * i - jitter) * step), (2 * i + 2 - jitter) * step, pc.parse_label(label))
            for i, label in enumerate(labels)]


def test_chart_cutting():
    beats = _beats([4] * 10)
    halves = [("C:maj", "G:maj") if bar % 2 == 0 else ("F:maj", "F:maj") for bar in range(10)]
    charts = pc.chart_song("123", beats, _spans(beats, halves), bars=4, charts_per_song=5)
    assert [(c.index, c.first_bar) for c in charts] == [(0, 0), (1, 4)]  # non-overlapping, bar 8.. too short
    assert charts[0].lines() == ["C / G /", "F", "C / G /", "F"]
    assert charts[1].lines(shift=2) == ["D / A /", "G", "D / A /", "G"]
    assert all(c.tempo == 120 and len(c.halves) == 4 for c in charts)
    (only,) = pc.chart_song("123", beats, _spans(beats, halves), bars=4, charts_per_song=1)
    assert only.first_bar == 0
    fast = _beats([4] * 4, seconds=0.2)  # 300 qpm: clamped
    assert pc.chart_song("1", fast, _spans(fast, halves[:4]), bars=4)[0].tempo == pc.TEMPO_RANGE[1]


def test_chart_runs_break_on_odd_bars_and_no_chord():
    beats = _beats([4] * 5 + [3] + [4] * 6)  # a 3-beat bar after bar 4: runs of 5 and 6 bars
    labels = [("C:maj", "C:maj")] * 12
    assert [c.first_bar for c in pc.chart_song("1", beats, _spans(beats, labels), 5, 5)] == [0, 6]
    beats = _beats([4] * 8)
    labels = [("C:maj", "A:min")] * 3 + [("N", "C:maj")] + [("C:maj", "A:min")] * 4
    assert [c.first_bar for c in pc.chart_song("1", beats, _spans(beats, labels), 3, 5)] == [0, 4]
    with pytest.raises(pc.Skipped, match="no run of 5 charted 4/4 bars") as err:
        pc.chart_song("1", beats, _spans(beats, labels), 5)
    assert err.value.reason == "no run of 5 charted 4/4 bars"
    with pytest.raises(pc.Skipped, match="not 4/4") as err:
        pc.chart_song("1", _beats([3] * 8), [], 4)
    assert err.value.reason == "not 4/4"


def test_chart_melody_follows_the_annotated_beats():
    midi = miditoolkit.MidiFile(ticks_per_beat=480)  # the default tempo, 120 qpm: 960 ticks a second
    melody = miditoolkit.Instrument(program=0, name="MELODY")
    seconds = [(0.5, 0.9, 60), (1.0, 1.3, 62), (1.9, 2.5, 64), (3.4, 4.0, 65), (4.2, 4.4, 67)]
    melody.notes = [miditoolkit.Note(velocity=80, pitch=p, start=round(a * 960), end=round(b * 960))
                    for a, b, p in seconds]
    midi.instruments = [miditoolkit.Instrument(program=0, name="PIANO"), melody]
    chord = pc.Chord(0, "maj")
    chart = pc.Chart("001", 0, 0, 100, [(chord, chord)], beat_times=(1.0, 1.6, 2.2, 2.8, 3.7))
    notes = pc.chart_melody(chart, midi)
    assert [p for _, _, p in notes] == [62, 64, 65]  # 0.5 s is before the chart, 4.2 s after it
    (a, b, _), (c, d, _), (e, f, _) = notes
    assert (a, b) == pytest.approx((0.0, 0.5)) and (c, d) == pytest.approx((1.5, 2.5))
    assert (e, f) == pytest.approx((3.0 + 0.6 / 0.9 * 1, 4.0))  # the last beat lasts 0.9 s; the end is clipped
    with pytest.raises(ValueError, match="no MELODY track"):
        pc.chart_melody(chart, miditoolkit.MidiFile())
    with pytest.raises(ValueError, match="no beat times"):
        pc.chart_melody(pc.Chart("001", 0, 0, 100, [(chord, chord)]), midi)


def test_charts_keep_their_beat_times():
    beats = _beats([4] * 4)
    halves = [("C:maj", "C:maj")] * 4
    (chart,) = pc.chart_song("1", beats, _spans(beats, halves), bars=2, charts_per_song=1)
    assert chart.beat_times == tuple(beats[:9, 0])

