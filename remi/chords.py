"""Chord labels per beat with the rule-based recogniser of the ``chorder`` package (Dechorder).

The Pop1K7 pipeline ran ``Dechorder.dechord`` on each song: every 1-beat and 2-beat window gets the
chord that best matches ``Dechorder.chord_weights`` (scored on the pitch-class durations inside the
window), a few bass and seventh rules refine it, and two 1-beat chords replace the enclosing 2-beat
chord only where both score at least as well. ``dechord`` itself re-lists the whole note map for every
window (quadratic in the song length) and only looks back 10 onsets for sounding notes, so we evaluate
the same rule on all windows at once with numpy, with chorder's own weight tables; the tests check the
result against ``Dechorder.get_chord_quality`` window by window and against ``Dechorder.dechord``.

Times here are integers on any grid (the tokenizer passes sub-beats, 4 to a beat); a beat is ``beat``
units long.
"""

from __future__ import annotations

import numpy as np
from chorder import Dechorder

from remi.vocab import chord_token

SCORED_QUALITIES = tuple(Dechorder.chord_weights)  # chorder's scored triads, in its search order
WEIGHTS = np.array([Dechorder.chord_weights[q] for q in SCORED_QUALITIES], dtype=np.float64)  # (Q, 12)
REROOT_ON_BASS = {  # (detected quality, semitones from bass up to its root) -> quality rooted on the bass
    ("o", 4): "7",
    ("o", 3): "o7",
    ("M", 3): "m7",
    ("m", 4): "M7",
    ("m", 3): "/o7",
    ("sus2", 5): "sus4",
    ("sus4", 7): "sus2",
}
ROTATIONS = (np.arange(12)[:, None] + np.arange(12)[None, :]) % 12  # (root, interval) -> pitch class


def window_chords(
    start: np.ndarray, end: np.ndarray, pitch: np.ndarray, width: int, count: int
) -> tuple[list[tuple[int, str, int | None] | None], np.ndarray]:
    """Dechorder.get_chord_quality on the windows ``[i * width, (i + 1) * width)``, ``i < count``.

    Returns ``(chords, scores)``: per window ``(root_pc, quality, bass_pc)`` or None when no chord
    scores above chorder's threshold, and the score (-1 where there is no chord).
    """
    keep = end > start
    start, end, pitch = start[keep], end[keep], pitch[keep]
    first = start // width
    spans = (end - 1) // width - first + 1  # windows each note overlaps
    offsets = np.arange(spans.max() if len(spans) else 1)
    window = first[:, None] + offsets[None, :]  # (notes, K)
    inside = offsets[None, :] < spans[:, None]  # (notes, K)
    overlap = np.minimum(end[:, None], (window + 1) * width) - np.maximum(start[:, None], window * width)
    window, overlap = window[inside], overlap[inside].astype(np.float64)
    note_pitch = np.broadcast_to(pitch[:, None], inside.shape)[inside]

    chord_map = np.bincount(window * 12 + note_pitch % 12, overlap, count * 12).reshape(count, 12)
    by_pitch = np.bincount(window * 128 + note_pitch, overlap, count * 128).reshape(count, 128)
    bass_ok = by_pitch >= width / 8  # chorder: lowest pitch sounding >= 1/8 of the window
    has_bass = bass_ok.any(axis=1)
    bass = bass_ok.argmax(axis=1) % 12

    rotated = chord_map[:, ROTATIONS]  # (count, 12 roots, 12 intervals)
    scores = rotated @ WEIGHTS.T  # (count, 12 roots, Q)
    scores[rotated[:, :, 0] == 0] = -np.inf  # chorder skips roots that do not sound
    flat = scores.reshape(count, -1)  # (count, 12 * Q), chorder's search order
    best = flat.argmax(axis=1)
    best_score = flat[np.arange(count), best]
    found = best_score >= width * 10

    chords: list[tuple[int, str, int | None] | None] = [None] * count
    for i in np.flatnonzero(found).tolist():
        root, quality = divmod(int(best[i]), len(SCORED_QUALITIES))
        chords[i] = _refine(root, SCORED_QUALITIES[quality], int(bass[i]) if has_bass[i] else None, chord_map[i])
    return chords, np.where(found, best_score, -1.0)


def _refine(root: int, quality: str, bass: int | None, chord_map: np.ndarray) -> tuple[int, str, int | None]:
    """chorder's post-rules: re-root on the bass where it makes a seventh chord, then add sevenths."""
    if bass is not None:
        above = (root - bass) % 12  # interval from the bass up to the detected root
        rerooted = REROOT_ON_BASS.get((quality, above))
        if rerooted is not None:
            root, quality = bass, rerooted
    major_seventh, minor_seventh = chord_map[(root + 11) % 12], chord_map[(root + 10) % 12]
    if quality == "M":
        if major_seventh > 0 and major_seventh > minor_seventh:
            quality = "M7"
        elif minor_seventh > 0 and minor_seventh > major_seventh:
            quality = "7"
    if quality == "m" and minor_seventh > 0:
        quality = "m7"
    return root, quality, bass


def beat_chords(start: np.ndarray, end: np.ndarray, pitch: np.ndarray, beat: int) -> list[str]:
    """Chord token per beat ``0 .. ceil(max(end) / beat) - 1`` by chorder's dechord rule."""
    total = int(end.max()) if len(end) else 0
    count1, count2 = -(-total // beat), -(-total // (2 * beat))
    if count1 == 0:
        return []
    one, score1 = window_chords(start, end, pitch, beat, count1)
    two, score2 = window_chords(start, end, pitch, 2 * beat, count2)
    score2 = score2 / 2
    labels1 = [_label(c) for c in one]
    labels = []
    for i in range(count2):
        prev, nxt = 2 * i, 2 * i + 1
        if nxt < count1:
            if score1[prev] >= score2[i] and score1[nxt] >= score2[i]:
                labels += [labels1[prev], labels1[nxt]]
            else:
                labels += [_label(two[i])] * 2
        else:
            labels.append(labels1[prev] if score1[prev] > score2[i] else _label(two[i]))
    return labels


def _label(chord: tuple[int, str, int | None] | None) -> str:
    """Token of a detected chord; an incomplete one (no bass) is no chord, as chorder's is_complete."""
    if chord is None or chord[2] is None:
        return chord_token(None, None)
    return chord_token(chord[0], chord[1])
