"""Does a piece follow the chords it was asked for? Chords recognised again from its notes.

    requested = parse_progression("C Am F G7")
    recognised = recognised_chords(tokenizer, result.tokens, first_bar=1, count=4)
    chord_agreement(requested, recognised)     # fraction of bars with the requested root and family

Each bar's chord is the label the tokenizer's own recogniser (chorder's rule, `remi.chords`, on the
decoded notes, beat by beat) gives its first beat. Two chords agree when they have the same root and
family (major: M, 7, M7; minor: m, m7; diminished: o, o7, /o7; augmented; suspended); no chord agrees
with no chord only.

`real_progressions` reads the chords of held-out songs from their tokens (the tokenizer wrote them
with the same recogniser), one per bar: the progressions a follow-the-chords test asks for.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from evaluation.quality_metrics import SUB_BEATS_PER_QUARTER, from_midi
from generation.chords import Chord, family
from remi.chords import beat_chords
from remi.vocab import CHORD_ROOTS, NO_CHORD
from tokenization import BaseTokenizer


def chord_of_token(token: str) -> Chord:
    """`Chord_<root>_<quality>` -> (root, quality), None for Chord_N_N."""
    name = token.removeprefix("Chord_")
    if name == NO_CHORD:
        return None
    root, quality = name.split("_", 1)
    return CHORD_ROOTS.index(root), quality


def recognised_chords(tokenizer: BaseTokenizer, ids: Sequence[int], first_bar: int, count: int) -> list[Chord]:
    """The recognised chord of bars first_bar .. first_bar + count - 1 of the decoded ids (None past
    the piece's notes)."""
    piece = from_midi(tokenizer.decode(list(ids)))
    labels = beat_chords(piece.onsets, piece.ends, piece.pitches, SUB_BEATS_PER_QUARTER) if piece.num_notes else []
    chords = []
    for bar in range(first_bar, first_bar + count):
        beat = int(piece.bars[bar]) // SUB_BEATS_PER_QUARTER if bar < len(piece.bars) else len(labels)
        chords.append(chord_of_token(labels[beat]) if beat < len(labels) else None)
    return chords


def chord_agreement(requested: Sequence[Chord], recognised: Sequence[Chord]) -> float:
    """Fraction of bars whose recognised chord has the requested root and family."""
    if not requested:
        return float("nan")
    return float(np.mean([family(a) == family(b) for a, b in zip(requested, recognised)]))


def real_progressions(tokenizer: BaseTokenizer, ids: Sequence[int]) -> list[Chord]:
    """The chord in force at the first beat of every bar of a tokenised piece."""
    chords, current, bar_open = [], None, False
    for token in tokenizer.tokens_to_strings([int(i) for i in ids]):
        if token == "Bar_None":
            if bar_open:
                chords.append(at_start)
            bar_open, at_start, first_beat = True, current, None
        elif token.startswith("Beat_"):
            first_beat = token == "Beat_0" if first_beat is None else False
        elif token.startswith("Chord_"):
            current = chord_of_token(token)
            if bar_open and first_beat:
                at_start = current
    if bar_open:
        chords.append(at_start)
    return chords
