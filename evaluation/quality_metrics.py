"""Generation-quality metrics of one piece: muspy's and the MusDr metrics of Wu and Yang (2020).

A piece is first reduced to a :class:`NotePiece`: its pitched (non-drum) notes on the 16th-note grid of
REMI (4 sub-beats per quarter note) and its bar lines, taken from the file's own time signatures
(4/4 when it has none; a meter change takes effect at the next bar line, as in the REMI encoder).

muspy metrics (computed by muspy on the piece at 4 time steps per quarter note):

* ``pitch_class_entropy``: entropy (bits) of the note-count histogram over the 12 pitch classes;
* ``scale_consistency``: the largest fraction of notes inside one major or minor scale;
* ``groove_consistency``: 1 - mean Hamming distance between the onset patterns of neighbouring bars
  (bar length: the meter that lasts longest in the piece);
* ``polyphony``: mean number of pitches sounding at once, over the time steps where any sounds;
* ``empty_beat_rate``: fraction of beats (quarter notes) without a sounding note, up to the last note;
* ``pitch_range``: highest minus lowest pitch (semitones);
* ``pitch_classes_used``: number of distinct pitch classes.

MusDr metrics (computed here from their definitions):

* ``pch_entropy_1bar`` / ``pch_entropy_4bar`` (H1, H4): for every window of 1 (4) consecutive bars that
  holds notes, the entropy (bits) of the normalised histogram of note onsets per pitch class; averaged
  over the windows (a piece shorter than 4 bars is one window);
* ``grooving_similarity`` (GS): every bar's grooving vector is the binary vector of the sub-beats of the
  bar where a note starts; GS(a, b) = 1 - (number of positions where a and b differ) / Q, Q the
  sub-beats of the longest bar; averaged over all pairs of bars of the piece.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

SUB_BEATS_PER_QUARTER = 4  # the grid every piece is measured on (16th notes, as REMI)
DEFAULT_METER = (4, 4)


@dataclass(frozen=True)
class Metric:
    name: str  # column name in the CSV files
    title: str  # human-readable name (tables, plots)
    source: str  # muspy or MusDr
    target: str  # "within_std": |generated - real| <= real std; "at_most_twice": generated <= 2 real


METRICS = (
    Metric("pitch_class_entropy", "pitch-class entropy (bits)", "muspy", "within_std"),
    Metric("scale_consistency", "scale consistency", "muspy", "within_std"),
    Metric("groove_consistency", "groove consistency", "muspy", "within_std"),
    Metric("polyphony", "polyphony (pitches)", "muspy", "within_std"),
    Metric("empty_beat_rate", "empty-beat rate", "muspy", "at_most_twice"),
    Metric("pitch_range", "pitch range (semitones)", "muspy", "within_std"),
    Metric("pitch_classes_used", "pitch classes used", "muspy", "within_std"),
    Metric("pch_entropy_1bar", "pitch-class entropy, 1 bar (H1)", "MusDr", "within_std"),
    Metric("pch_entropy_4bar", "pitch-class entropy, 4 bars (H4)", "MusDr", "within_std"),
    Metric("grooving_similarity", "grooving-pattern similarity (GS)", "MusDr", "within_std"),
)
METRIC_NAMES = tuple(m.name for m in METRICS)


@dataclass
class NotePiece:
    """The pitched notes of a piece on the sub-beat grid, and its bar lines."""

    onsets: np.ndarray  # (N,) int64: note starts in sub-beats, sorted
    ends: np.ndarray  # (N,) int64: note ends in sub-beats (> onset)
    pitches: np.ndarray  # (N,) int64: MIDI pitches
    bars: np.ndarray  # (B + 1,) int64: bar lines in sub-beats, bars[0] = 0, bars[-1] >= last note end

    @property
    def num_notes(self) -> int:
        return len(self.pitches)

    def after(self, cut: int) -> NotePiece:
        """The notes starting at or after sub-beat `cut` (a bar line), shifted to start at 0."""
        keep = self.onsets >= cut
        lines = self.bars[self.bars >= cut] - cut
        if len(lines) == 0 or lines[0] != 0:
            lines = np.concatenate([[0], lines])
        piece = NotePiece(self.onsets[keep] - cut, self.ends[keep] - cut, self.pitches[keep], lines)
        return piece.trimmed()

    def trimmed(self) -> NotePiece:
        """The same notes with the bar lines past the last note end dropped (at least one bar kept)."""
        end = int(self.ends.max()) if self.num_notes else 0
        last = max(1, int(np.searchsorted(self.bars, end, side="left")))
        return NotePiece(self.onsets, self.ends, self.pitches, self.bars[:last + 1])


def bar_lines(meters: list[tuple[int, int, int]], end: int) -> np.ndarray:
    """(B + 1,) bar lines from 0 until `end` is covered; meters: (sub-beat, numerator, denominator)
    sorted by time, each taking effect at the first bar line at or after its time."""
    changes = sorted(meters) or [(0, *DEFAULT_METER)]
    lines, meter, index = [0], DEFAULT_METER, 0
    while True:
        while index < len(changes) and changes[index][0] <= lines[-1]:
            meter, index = changes[index][1:], index + 1
        if lines[-1] >= end and len(lines) > 1:
            return np.asarray(lines, dtype=np.int64)
        lines.append(lines[-1] + bar_length(meter))


def bar_length(meter: tuple[int, int]) -> int:
    """Sub-beats in one bar of `meter` (at least 1)."""
    numerator, denominator = meter
    return max(1, round(numerator * 4 * SUB_BEATS_PER_QUARTER / denominator))


def from_midi(midi: Any) -> NotePiece:
    """A miditoolkit.MidiFile (any ticks per beat) as a NotePiece; drum tracks are left out."""
    scale = SUB_BEATS_PER_QUARTER / midi.ticks_per_beat
    notes = [(n.start, n.end, n.pitch) for inst in midi.instruments if not inst.is_drum for n in inst.notes]
    array = np.asarray(sorted(notes), dtype=np.float64).reshape(-1, 3)  # (N, 3): start, end, pitch
    onsets = np.round(array[:, 0] * scale).astype(np.int64)
    ends = np.maximum(np.round(array[:, 1] * scale).astype(np.int64), onsets + 1)
    meters = [(int(round(ts.time * scale)), ts.numerator, ts.denominator)
              for ts in midi.time_signature_changes]
    end = int(ends.max()) if len(ends) else 0
    return NotePiece(onsets, ends, array[:, 2].astype(np.int64), bar_lines(meters, end))


def to_muspy(piece: NotePiece) -> Any:
    """The piece as a one-track muspy.Music at SUB_BEATS_PER_QUARTER time steps per quarter note."""
    import muspy

    notes = [muspy.Note(time=int(s), pitch=int(p), duration=int(e - s), velocity=64)
             for s, e, p in zip(piece.onsets, piece.ends, piece.pitches)]
    return muspy.Music(resolution=SUB_BEATS_PER_QUARTER, tracks=[muspy.Track(program=0, notes=notes)])


def main_bar_length(piece: NotePiece) -> int:
    """The bar length (sub-beats) that covers the most time in the piece."""
    lengths = Counter()
    for length in np.diff(piece.bars).tolist():
        lengths[length] += length
    return lengths.most_common(1)[0][0]


def muspy_metrics(piece: NotePiece) -> dict[str, float]:
    """The seven muspy metrics (NaN for every one but the empty-beat rate when there is no note)."""
    import muspy

    if piece.num_notes == 0:
        return {"pitch_class_entropy": np.nan, "scale_consistency": np.nan, "groove_consistency": np.nan,
                "polyphony": np.nan, "empty_beat_rate": 1.0, "pitch_range": np.nan,
                "pitch_classes_used": np.nan}
    music = to_muspy(piece)
    return {
        "pitch_class_entropy": float(muspy.pitch_class_entropy(music)),
        "scale_consistency": float(muspy.scale_consistency(music)),
        "groove_consistency": float(muspy.groove_consistency(music, main_bar_length(piece))),
        "polyphony": float(muspy.polyphony(music)),
        "empty_beat_rate": float(muspy.empty_beat_rate(music)),
        "pitch_range": float(muspy.pitch_range(music)),
        "pitch_classes_used": float(muspy.n_pitch_classes_used(music)),
    }


def entropy_bits(counts: np.ndarray) -> float:
    """Shannon entropy (bits) of a histogram of counts (not all zero)."""
    probabilities = counts[counts > 0] / counts.sum()
    return float(-(probabilities * np.log2(probabilities)).sum())


def pitch_class_histogram_entropy(piece: NotePiece, window: int) -> float:
    """MusDr H_window: mean entropy of the pitch-class histograms of every `window` consecutive bars
    with notes (NaN without notes)."""
    bar_of_note = np.searchsorted(piece.bars, piece.onsets, side="right") - 1  # (N,)
    num_bars = len(piece.bars) - 1
    counts = np.zeros((num_bars, 12))  # (B, 12): note onsets per bar and pitch class
    np.add.at(counts, (bar_of_note, piece.pitches % 12), 1.0)
    window = min(window, num_bars)
    sums = np.cumsum(np.vstack([np.zeros((1, 12)), counts]), axis=0)  # (B + 1, 12)
    windows = sums[window:] - sums[:-window]  # (B - window + 1, 12)
    entropies = [entropy_bits(h) for h in windows if h.sum() > 0]
    return float(np.mean(entropies)) if entropies else np.nan


def grooving_similarity(piece: NotePiece) -> float:
    """MusDr GS: mean over all pairs of bars of 1 - XOR(grooving vectors) / Q (NaN below 2 bars)."""
    num_bars = len(piece.bars) - 1
    if num_bars < 2:
        return np.nan
    width = int(np.diff(piece.bars).max())  # Q: sub-beats of the longest bar
    grooves = np.zeros((num_bars, width))  # (B, Q): 1 where a note starts
    bar_of_note = np.searchsorted(piece.bars, piece.onsets, side="right") - 1  # (N,)
    grooves[bar_of_note, piece.onsets - piece.bars[bar_of_note]] = 1.0
    onsets = grooves.sum(axis=1)  # (B,)
    shared = grooves @ grooves.T  # (B, B): positions where both bars have an onset
    differing = onsets[:, None] + onsets[None, :] - 2.0 * shared  # (B, B): XOR counts
    upper = np.triu_indices(num_bars, k=1)
    return float(np.mean(1.0 - differing[upper] / width))


def musdr_metrics(piece: NotePiece) -> dict[str, float]:
    """H1, H4 and GS of a piece."""
    if piece.num_notes == 0:
        return {"pch_entropy_1bar": np.nan, "pch_entropy_4bar": np.nan, "grooving_similarity": np.nan}
    return {"pch_entropy_1bar": pitch_class_histogram_entropy(piece, 1),
            "pch_entropy_4bar": pitch_class_histogram_entropy(piece, 4),
            "grooving_similarity": grooving_similarity(piece)}


def piece_metrics(piece: NotePiece) -> dict[str, float]:
    """Every metric of METRICS for one piece, in that order."""
    values = {**muspy_metrics(piece), **musdr_metrics(piece)}
    return {name: values[name] for name in METRIC_NAMES}

