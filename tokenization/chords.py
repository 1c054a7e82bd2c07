"""Chords as the formats that write them name them: a root pitch class and a quality in chorder's names.

    chord = (9, "m")             # A minor: root pitch class 0..11 (0 = C), quality; None: no chord
    chord_name(chord)            # "A_m"; chord_name(None) == "N_N"

The qualities are those of the ``chorder`` recogniser (which labelled the REMI corpora): M (major),
m (minor), o (diminished), + (augmented), sus2, sus4, 7 (dominant seventh), M7, m7, o7 (diminished
seventh), /o7 (half-diminished). A format states a chord with ``BaseTokenizer.chord_id(chord)``.
"""

from __future__ import annotations

CHORD_ROOTS = ("C", "C#", "D", "D#", "E", "F", "F#", "G", "G#", "A", "A#", "B")  # pitch-class names, 0 = C
CHORD_QUALITIES = ("M", "m", "o", "+", "sus2", "sus4", "7", "M7", "m7", "o7", "/o7")  # chorder's qualities
NO_CHORD = "N_N"  # the name of no chord (root and quality both N)

Chord = tuple[int, str] | None  # (root pitch class, quality in CHORD_QUALITIES), None: no chord


def chord_name(chord: Chord) -> str:
    """A chord's name, root and quality: C_M, A_m, N_N (REMI's chord token without its type)."""
    return NO_CHORD if chord is None else f"{CHORD_ROOTS[chord[0]]}_{chord[1]}"
