"""Training augmentation of a Groove2Groove piece, re-drawn at every call (i.e. every epoch).

In order: choose the accompaniment track at random among the candidates; skip 0..``max_skip_bars``
whole 4/4 bars at the start (notes that start before the cut are dropped, the rest move earlier);
drop each track with probability ``drop_prob`` while keeping at least one non-empty track; transpose the
bass and accompaniment (never the drums) by a shift drawn uniformly among -``max_transpose``..
+``max_transpose`` that keeps every pitch inside 0..127 (drawing among the valid shifts is the same as
redrawing until one fits; 0 always fits).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from groove.roles import DRUMS, TICKS_PER_BAR, GridNote, GroovePiece


@dataclass
class Augmentation:
    """Settings of the training augmentation."""

    max_skip_bars: int = 4  # bars skipped at the start: uniform in 0..max_skip_bars (fewer for short pieces)
    drop_prob: float = 0.2  # probability of dropping each track (one non-empty track is always kept)
    max_transpose: int = 5  # semitones: the shift is drawn in -max_transpose..+max_transpose


@dataclass
class AugmentedPiece:
    """One draw of the augmentation and its result."""

    tracks: list[list[GridNote]]  # notes per role (bass, drums, accompaniment) after augmentation
    accompaniment: int  # index of the accompaniment candidate used (-1: the piece has none)
    skipped_bars: int  # whole bars removed at the start
    kept: tuple[bool, bool, bool]  # which roles survived the track dropping
    transposition: int  # semitones added to bass and accompaniment pitches


def _skip_bars(tracks: list[list[GridNote]], bars: int) -> list[list[GridNote]]:
    cut = bars * TICKS_PER_BAR
    return [[(s - cut, e - cut, p) for s, e, p in notes if s >= cut] for notes in tracks]


def valid_transpositions(tracks: list[list[GridNote]], max_transpose: int) -> list[int]:
    """Shifts in -max..+max that keep every non-drum pitch inside 0..127."""
    pitches = [p for role, notes in enumerate(tracks) if role != DRUMS for _, _, p in notes]
    if not pitches:
        return [0]
    low, high = min(pitches), max(pitches)
    return [k for k in range(-max_transpose, max_transpose + 1) if low + k >= 0 and high + k <= 127]


def augment(piece: GroovePiece, rng: np.random.Generator, settings: Augmentation) -> AugmentedPiece:
    """Draw one augmentation of ``piece`` (see the module docstring)."""
    accompaniment = int(rng.integers(len(piece.candidates))) if piece.candidates else -1
    tracks = piece.tracks(max(accompaniment, 0))

    last_onset = max(notes[-1][0] for notes in tracks if notes)  # notes are sorted by onset
    bars = int(rng.integers(min(settings.max_skip_bars, last_onset // TICKS_PER_BAR) + 1))
    tracks = _skip_bars(tracks, bars)

    non_empty = [role for role, notes in enumerate(tracks) if notes]
    kept = rng.random(len(tracks)) >= settings.drop_prob
    if not kept[non_empty].any():
        kept[rng.choice(non_empty)] = True
    tracks = [notes if keep else [] for notes, keep in zip(tracks, kept)]

    shift = int(rng.choice(valid_transpositions(tracks, settings.max_transpose)))
    tracks = [notes if role == DRUMS else [(s, e, p + shift) for s, e, p in notes] for role, notes in enumerate(tracks)]
    return AugmentedPiece(tracks, accompaniment, bars, tuple(bool(k) for k in kept), shift)
