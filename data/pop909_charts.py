"""POP909's chord annotations as MMA chord charts: bars of two half-bar chords, with a tempo.

**Charts** come from POP909's annotations: ``NNN/chord_midi.txt`` (``start end label``, Harte labels) and
``NNN/beat_midi.txt`` (a beat a row, time first, 1.0 in the last column on downbeats). A bar runs from one
downbeat to the next; a song with under half its bars of 4 beats is skipped (not 4/4). Each half of a 4-beat
bar takes the chord covering most of it (MMA: ``C / G /``, or ``C`` when both agree); a 3- or 5-beat bar, or
a half bar without a chord (N, or under half covered), breaks the run. A chart is ``bars`` consecutive
charted bars (default 16, the length of Groove2Groove's val/test files; 794 of POP909's 869 songs have
one); a song gives up to ``charts_per_song`` non-overlapping charts spread over it. Tempo: the chart's median
beat interval, clamped to 60..180 qpm. Harte qualities map to MMA's chord names by ``MMA_QUALITY`` (min7
Cm7, maj6 C6, hdim7 Cm7b5, minmaj7 CmM7, sus4(b7) C7sus4...), a slash bass (``maj/3``) to ``C/E``.

**Melody.** ``chart_melody`` cuts the song's own lead melody (POP909's ``MELODY`` track) to a chart, in
beats, so a rendition can put the real melody over the rendered band.

Used by ``data.groove_mma``, which renders the charts into a band corpus.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import miditoolkit
import numpy as np

from tokenization.midi_io import tick_to_seconds

CHART_BARS = 16  # bars per chart (module docstring)
TEMPO_RANGE = (60, 180)  # qpm the annotated tempo is clamped to
BEATS_PER_BAR = 4
MELODY_TRACK = "MELODY"  # POP909's lead-melody track
PIANO_TRACK = "PIANO"  # POP909's piano accompaniment track
BeatNote = tuple[float, float, int]  # (start, end) in beats from the chart's first beat, MIDI pitch
ROOT_NAMES = ("C", "C#", "D", "Eb", "E", "F", "F#", "G", "Ab", "A", "Bb", "B")  # spelling of the rendered roots
LETTERS = {"C": 0, "D": 2, "E": 4, "F": 5, "G": 7, "A": 9, "B": 11}
ACCIDENTALS = {"#": 1, "b": -1}
MMA_QUALITY = {  # Harte quality (POP909's) -> MMA chord suffix
    "maj": "", "min": "m", "7": "7", "maj7": "maj7", "min7": "m7", "maj6": "6", "min6": "m6", "dim": "dim",
    "aug": "aug", "dim7": "dim7", "hdim7": "m7b5", "minmaj7": "mM7", "sus2": "sus2", "sus4": "sus4",
    "sus4(b7)": "7sus4",
}
DEGREES = {  # Harte bass degree -> semitones above the root
    "1": 0, "b2": 1, "2": 2, "#2": 3, "b3": 3, "3": 4, "4": 5, "#4": 6, "b5": 6, "5": 7, "#5": 8, "b6": 8,
    "6": 9, "bb7": 9, "b7": 10, "7": 11,
}



class Skipped(Exception):
    """A song that gives no chart, or a rendition that failed; ``reason`` is the category counted."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass(frozen=True)
class Chord:
    """One chord of a chart."""

    root: int  # pitch class, C = 0
    quality: str  # Harte quality, a key of MMA_QUALITY
    bass: int | None = None  # slash bass in semitones above the root (None: the root)

    def mma(self, shift: int = 0) -> str:
        """MMA's name of the chord transposed by ``shift`` semitones: ``C#m7``, ``F/A``."""
        root = (self.root + shift) % 12
        name = ROOT_NAMES[root] + MMA_QUALITY[self.quality]
        return name if self.bass is None else f"{name}/{ROOT_NAMES[(root + self.bass) % 12]}"


@dataclass
class Chart:
    """A chord chart cut from one POP909 song."""

    song: str  # POP909 song number, e.g. "001"
    index: int  # the chart's number within the song (in file names)
    first_bar: int  # its first bar, counted among the song's annotated bars (downbeat to downbeat)
    tempo: int  # qpm: the median beat interval of its bars, clamped to TEMPO_RANGE
    halves: list[tuple[Chord, Chord]]  # chords of each bar's two half bars
    beat_times: tuple[float, ...] = ()  # seconds of its beats and of the downbeat after it (4 bars + 1)

    def lines(self, shift: int = 0) -> list[str]:
        """MMA's chord line of each bar: ``C / G /``, or ``C`` when both halves agree."""
        return [a.mma(shift) if a == b else f"{a.mma(shift)} / {b.mma(shift)} /" for a, b in self.halves]




def parse_label(label: str) -> Chord | None:
    """A Harte label (``C#:min7``, ``G:maj/3``, ``N``) -> a chord (None for N); ValueError naming it."""
    if label == "N":
        return None
    root, _, rest = label.partition(":")
    quality, _, degree = rest.partition("/")
    if not root or root[0] not in LETTERS or any(a not in ACCIDENTALS for a in root[1:]) \
            or quality not in MMA_QUALITY or (degree and degree not in DEGREES):
        raise ValueError(f"unknown chord label {label!r}")
    pitch = LETTERS[root[0]] + sum(ACCIDENTALS[a] for a in root[1:])
    bass = DEGREES[degree] if degree and DEGREES[degree] else None
    return Chord(pitch % 12, quality, bass)


def load_song(folder: Path) -> tuple[np.ndarray, list[tuple[float, float, Chord | None]]]:
    """(beats (N, 2): time in seconds and downbeat flag, chord spans) of one annotation folder."""
    try:
        rows = np.loadtxt(folder / "beat_midi.txt", ndmin=2)
        spans = []
        for line in (folder / "chord_midi.txt").read_text().splitlines():
            if line.strip():
                start, end, label = line.split()
                spans.append((float(start), float(end), parse_label(label)))
    except (OSError, ValueError) as err:
        raise Skipped("unreadable annotation", str(err)) from err
    return np.stack([rows[:, 0], rows[:, -1] == 1.0], axis=1), sorted(spans, key=lambda s: s[0])


def _half_chord(spans: list, ends: np.ndarray, low: float, high: float) -> Chord | None:
    """The chord covering most of [low, high), None if that is N or covers under half of it."""
    cover: Counter = Counter()
    for k in range(int(np.searchsorted(ends, low, side="right")), len(spans)):
        start, end, chord = spans[k]
        if start >= high:
            break
        cover[chord] += min(end, high) - max(start, low)
    if not cover:
        return None
    chord, seconds = cover.most_common(1)[0]
    return chord if seconds >= (high - low) / 2 else None


def chart_song(song: str, beats: np.ndarray, spans: list, bars: int = CHART_BARS,
               charts_per_song: int = 1) -> list[Chart]:
    """Up to ``charts_per_song`` charts of ``bars`` bars (module docstring); Skipped when none."""
    times, downbeats = beats[:, 0], np.flatnonzero(beats[:, 1])
    lengths = np.diff(downbeats)
    if not len(lengths) or np.mean(lengths == BEATS_PER_BAR) < 0.5:
        raise Skipped("not 4/4", f"{np.mean(lengths == BEATS_PER_BAR) if len(lengths) else 0:.0%} 4-beat bars")
    ends = np.maximum.accumulate(np.array([end for _, end, _ in spans]))  # sorted, for the search
    halves: list[tuple[Chord, Chord] | None] = []
    for first, length in zip(downbeats[:-1], lengths):
        if length != BEATS_PER_BAR:
            halves.append(None)
            continue
        low, mid, high = times[first], times[first + 2], times[first + BEATS_PER_BAR]
        pair = (_half_chord(spans, ends, low, mid), _half_chord(spans, ends, mid, high))
        halves.append(pair if None not in pair else None)
    starts, run = [], 0  # first bars of the non-overlapping windows inside runs of charted bars
    for bar, pair in enumerate(halves):
        run = run + 1 if pair is not None else 0
        if run == bars:
            starts.append(bar - bars + 1)
            run = 0
    if not starts:
        raise Skipped(f"no run of {bars} charted 4/4 bars")
    chosen = sorted({starts[i] for i in np.linspace(0, len(starts) - 1, min(charts_per_song, len(starts))).round()
                     .astype(int)})
    charts = []
    for index, first in enumerate(chosen):
        beat_times = times[downbeats[first]:downbeats[first + bars] + 1]
        qpm = int(round(60.0 / float(np.median(np.diff(beat_times)))))
        charts.append(Chart(song, index, first, int(np.clip(qpm, *TEMPO_RANGE)), halves[first:first + bars],
                            tuple(float(t) for t in beat_times)))
    return charts


def chart_melody(chart: Chart, midi: miditoolkit.MidiFile, track: str = MELODY_TRACK) -> list[BeatNote]:
    """The notes of the song's ``track`` that start within the chart, in beats from its first beat.

    Note times go from MIDI ticks to seconds by the file's tempo map, then to beats by interpolating
    between the chart's annotated beats, so the melody follows the song's own timing; ends are clipped to
    the chart's end. ValueError when the chart has no beat times or the file no such track.
    """
    if len(chart.beat_times) < 2:
        raise ValueError(f"chart {chart.song}_{chart.index} has no beat times")
    found = [inst for inst in midi.instruments if inst.name == track]
    if not found:
        raise ValueError(f"song {chart.song} has no {track} track")
    grid = np.arange(len(chart.beat_times), dtype=np.float64)  # beat numbers of the annotated beats
    end_beat = float(grid[-1])
    melody = sorted(found[0].notes, key=lambda n: (n.start, n.pitch))
    ticks = np.array([(n.start, n.end) for n in melody], dtype=np.int64).reshape(-1, 2)  # (N, 2)
    seconds = tick_to_seconds(midi, ticks)  # (N, 2)
    beats = np.interp(seconds, chart.beat_times, grid)  # (N, 2)
    inside = (seconds[:, 0] >= chart.beat_times[0]) & (seconds[:, 0] < chart.beat_times[-1])
    return [(float(start), min(float(end), end_beat), int(note.pitch))
            for note, (start, end), keep in zip(melody, beats, inside) if keep]
