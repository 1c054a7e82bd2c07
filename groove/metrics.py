"""Style profiles and style similarity (Cífka et al. 2019, 2020), on ``muspy.Music`` pieces.

Times are in beats (``time / resolution``); pieces are taken as 4/4 with the bar starting at time 0.

* ``onset_duration_profile``: a (24, 12) histogram of (start mod 4, duration) over [0, 4) x [0, 2],
  bins of 1/6 beat; a duration of exactly 2 beats falls in the last bin, longer notes are left out.
* ``time_pitch_profile``: a (24, 41) histogram over ordered pairs of distinct notes (a, b) of the same
  track with 0 <= start(b) - start(a) < 4 beats: axis 0 = start(b) - start(a) in 1/6-beat bins, axis 1 =
  pitch(b) - pitch(a) from -20 to +20 (larger intervals are left out). Notes with the same onset give
  both orders.

Which notes: as in the reference code of Cífka et al. (``groove2groove/eval/style_profiles.py``, used with
one instrument at a time; drums get a different profile there), profiles use the **pitched tracks only**
(drums are excluded) and pairs are formed **within each track**, the counts of all tracks summed (the
reference code's list of sequences). ``tracks=`` restricts to tracks with the given names.

Histograms are densities (``numpy.histogram2d(density=True)``, in beats and semitones; the reference's
removed ``normed=``); bins are computed in integer ticks, which equals numpy's binning with the same
edges, without its float rounding at bin edges. A piece with nothing to count (no notes, or no pair) has
an all-zero profile (the reference code's ``nan_to_num``), and the cosine similarity involving an
all-zero profile is defined as 0.0: an empty continuation chunk counts as dissimilar, never NaN.
"""

from __future__ import annotations

from typing import Sequence

import muspy
import numpy as np

BIN = 6  # bins per beat (1/6-beat bins)
ONSET_BINS = 24  # start mod 4 beats
DURATION_BINS = 12  # durations 0..2 beats
TIME_BINS = 24  # onset differences 0..4 beats
MAX_INTERVAL = 20  # semitones each way
INTERVAL_BINS = 2 * MAX_INTERVAL + 1
BAR_BEATS = 4
METRICS = ("onset_duration", "time_pitch")


def _tracks(music: muspy.Music, tracks: Sequence[str] | None) -> list[muspy.Track]:
    if tracks is not None:
        return [t for t in music.tracks if t.name in tracks]
    return [t for t in music.tracks if not t.is_drum]


def _resolution(music: muspy.Music) -> int:
    return music.resolution or muspy.DEFAULT_RESOLUTION


def _density(counts: np.ndarray, bin_area: float) -> np.ndarray:
    total = counts.sum()
    return counts / (total * bin_area) if total else counts.astype(np.float64)


def onset_duration_profile(music: muspy.Music, tracks: Sequence[str] | None = None) -> np.ndarray:
    """(24, 12) density of (start mod 4 beats, duration in beats); see the module docstring."""
    res = _resolution(music)
    notes = [(n.time, n.duration) for t in _tracks(music, tracks) for n in t.notes]
    counts = np.zeros((ONSET_BINS, DURATION_BINS))
    if notes:
        start, dur = np.asarray(notes, dtype=np.int64).T  # (N,), (N,) in ticks
        onset_bin = (start % (BAR_BEATS * res)) * BIN // res
        dur_bin = np.where(dur * BIN == DURATION_BINS * res, DURATION_BINS - 1, dur * BIN // res)
        keep = (dur >= 0) & (dur_bin < DURATION_BINS)
        np.add.at(counts, (onset_bin[keep], dur_bin[keep]), 1)
    return _density(counts, (1 / BIN) * (1 / BIN))


def _pairs(start: np.ndarray, pitch: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """(time differences, intervals) of ordered pairs a != b with 0 <= start(b) - start(a) < window."""
    order = np.argsort(start, kind="stable")
    start, pitch = start[order], pitch[order]  # (N,)
    diffs, intervals = [], []
    for lag in range(1, len(start)):
        d = start[lag:] - start[:-lag]  # (N - lag,) later minus earlier, >= 0
        near = d < window
        if not near.any():
            break
        iv = pitch[lag:] - pitch[:-lag]
        diffs.append(d[near])
        intervals.append(iv[near])
        same = near & (d == 0)  # simultaneous notes: the reverse order too
        diffs.append(d[same])
        intervals.append(-iv[same])
    if not diffs:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(diffs), np.concatenate(intervals)


def time_pitch_profile(music: muspy.Music, tracks: Sequence[str] | None = None) -> np.ndarray:
    """(24, 41) density of (onset difference, interval) over note pairs within each track."""
    res = _resolution(music)
    counts = np.zeros((TIME_BINS, INTERVAL_BINS))
    for track in _tracks(music, tracks):
        if len(track.notes) < 2:
            continue
        start = np.array([n.time for n in track.notes], dtype=np.int64)
        pitch = np.array([n.pitch for n in track.notes], dtype=np.int64)
        diff, interval = _pairs(start, pitch, BAR_BEATS * res)
        keep = np.abs(interval) <= MAX_INTERVAL
        np.add.at(counts, (diff[keep] * BIN // res, interval[keep] + MAX_INTERVAL), 1)
    return _density(counts, 1 / BIN)


def profile(music: muspy.Music, metric: str, tracks: Sequence[str] | None = None) -> np.ndarray:
    if metric == "onset_duration":
        return onset_duration_profile(music, tracks)
    if metric == "time_pitch":
        return time_pitch_profile(music, tracks)
    raise ValueError(f"unknown metric {metric!r} (known: {', '.join(METRICS)})")


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two flattened profiles; 0.0 if either is all zeros."""
    a, b = a.ravel(), b.ravel()
    norm = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / norm) if norm > 0 else 0.0


def style_similarity(a: muspy.Music, b: muspy.Music, metric: str, tracks: Sequence[str] | None = None) -> float:
    """Cosine similarity of the two pieces' profiles (``metric``: "onset_duration" or "time_pitch")."""
    return cosine(profile(a, metric, tracks), profile(b, metric, tracks))


def split_by_onset(music: muspy.Music, chunks: int = 4, start: int | None = None) -> list[muspy.Music]:
    """``chunks`` pieces of equal duration: notes by onset in [t0 + i d, t0 + (i + 1) d).

    t0 is ``start`` (ticks) or the first onset, the end is the last note end, over all tracks. Times are
    kept (not shifted), so positions in the bar stay as in the piece.
    """
    notes = [n for t in music.tracks for n in t.notes]
    if not notes:
        raise ValueError("cannot split a piece without notes")
    t0 = min(n.time for n in notes) if start is None else start
    t1 = max(n.time + n.duration for n in notes)
    edges = [t0 + (t1 - t0) * i / chunks for i in range(chunks + 1)]
    out = []
    for i in range(chunks):
        low, high = edges[i], edges[i + 1]
        last = i == chunks - 1
        tracks = [
            muspy.Track(
                program=t.program,
                is_drum=t.is_drum,
                name=t.name,
                notes=[n for n in t.notes if low <= n.time and (n.time < high or (last and n.time <= high))],
            )
            for t in music.tracks
        ]
        out.append(muspy.Music(resolution=music.resolution, tracks=tracks))
    return out


def continuation_similarity(
    continuation: muspy.Music,
    reference: muspy.Music,
    metric: str,
    tracks: Sequence[str] | None = None,
    start: int | None = None,
) -> np.ndarray:
    """(4,) style similarity of each quarter (equal durations) of ``continuation`` to the whole ``reference``.

    ``start``: tick where the continuation begins (default: its first onset). Quarters without notes to
    count score 0.0. Both pieces must use the same time origin for bar positions to be comparable.
    """
    ref = profile(reference, metric, tracks)
    return np.array([cosine(profile(chunk, metric, tracks), ref) for chunk in split_by_onset(continuation, 4, start)])
