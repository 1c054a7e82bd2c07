"""Follow a chord progression: lead-sheet symbols, one per bar, forced into REMI's chord tokens.

    chords = parse_progression("C Am | F G7 | N | Bbmaj7")      # [(0, "M"), (9, "m"), ...], None for N
    steer = ChordSteer(tokenizer, chords, bars_from=0)          # bars counted from token 0 on
    Decoder(model, tokenizer, prompt, steer=steer)               # grammar-constrained sampling

Symbols: a root A-G with an optional # or b, then a quality: "" (major), m, dim, aug, sus2, sus4, 7,
maj7, m7, dim7, m7b5; N for no chord. Bars are separated by blanks; `|` may stand between them.
They map one to one onto REMI's chord qualities (chorder's: M, m, o, +, sus2, sus4, 7, M7, m7, o7,
/o7).

`ChordSteer` narrows the grammar's allowed tokens of each sample: every new bar opens with Beat_0
and the bar's chord token right after it, no other chord token is written inside a bar, and the
piece cannot end (EOS) before the last chord's bar. The model writes the notes; whether they follow
the chords is measured by `evaluation.chords`.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from remi.vocab import CHORD_ROOTS, NO_CHORD, chord_token
from tokenization import BaseTokenizer

Chord = tuple[int, str] | None  # (root pitch class, REMI quality), None: no chord

QUALITIES = {"": "M", "m": "m", "dim": "o", "aug": "+", "sus2": "sus2", "sus4": "sus4", "7": "7",
             "maj7": "M7", "m7": "m7", "dim7": "o7", "m7b5": "/o7"}  # lead-sheet quality -> REMI
FAMILIES = {"M": "major", "7": "major", "M7": "major", "m": "minor", "m7": "minor", "o": "diminished",
            "o7": "diminished", "/o7": "diminished", "+": "augmented", "sus2": "suspended",
            "sus4": "suspended"}
LETTERS = {"C": 0, "D": 2, "E": 4, "F": 5, "G": 7, "A": 9, "B": 11}
_SYMBOL = re.compile(r"^([A-G])([#b]?)(.*)$")


def parse_chord(symbol: str) -> Chord:
    """One lead-sheet symbol -> (root pitch class, REMI quality), None for N; ValueError naming it."""
    if symbol == "N":
        return None
    match = _SYMBOL.match(symbol)
    if match is None or match.group(3) not in QUALITIES:
        raise ValueError(f"bad chord symbol {symbol!r}: expected a root A-G with an optional # or b, then "
                         f"one of the qualities {', '.join(repr(q) for q in QUALITIES)}, or N")
    letter, accidental, quality = match.groups()
    return (LETTERS[letter] + {"": 0, "#": 1, "b": -1}[accidental]) % 12, QUALITIES[quality]


def parse_progression(text: str) -> list[Chord]:
    """One chord per bar from lead-sheet symbols separated by blanks and optional `|`."""
    symbols = text.replace("|", " ").split()
    if not symbols:
        raise ValueError("the chord progression is empty: give one chord symbol per bar, e.g. \"C Am F G7\"")
    return [parse_chord(symbol) for symbol in symbols]


def chord_name(chord: Chord) -> str:
    """REMI's token of a chord, without the type: C_M, A_m, N_N."""
    return NO_CHORD if chord is None else f"{CHORD_ROOTS[chord[0]]}_{chord[1]}"


def family(chord: Chord) -> tuple[int, str] | None:
    """(root, family) of a chord, None for no chord."""
    return None if chord is None else (chord[0], FAMILIES[chord[1]])


class ChordSteer:
    """The allowed-token mask of a sample narrowed so that its bars follow `chords` (module docstring)."""

    def __init__(self, tokenizer: BaseTokenizer, chords: Sequence[Chord], bars_from: int) -> None:
        vocab = tokenizer.vocab
        if "Beat_0" not in vocab or chord_token(None, None) not in vocab:
            raise ValueError(f"chords need a REMI model with chord tokens; this one is "
                             f"{type(tokenizer).__name__}")
        self.chords = [vocab[chord_token(*chord) if chord else chord_token(None, None)] for chord in chords]
        self.bars_from = bars_from  # index of the token from which bars are counted (a Bar token)
        self.bar, self.beat0, self.eos = tokenizer.bar_id, vocab["Beat_0"], tokenizer.eos_id
        self.beats = np.asarray(vocab.by_type("Beat"), dtype=np.int64)
        self.chord_ids = np.asarray(vocab.by_type("Chord"), dtype=np.int64)

    def __call__(self, tokens: Sequence[int], allowed: np.ndarray) -> np.ndarray:
        """`allowed` (V,) for the sample's next token, given its tokens so far."""
        tail = np.asarray(tokens[self.bars_from:], dtype=np.int64)
        starts = np.flatnonzero(tail == self.bar)
        if len(starts) == 0 or len(starts) > len(self.chords):  # before the first steered bar, or past the last
            return allowed
        narrowed = allowed.copy()
        narrowed[self.eos] = False  # the progression is not over yet
        bar = tail[starts[-1]:]  # the bar being written, from its Bar token
        beats = np.isin(bar, self.beats)
        if not beats.any():  # Bar [TimeSig] so far: open the bar on its first beat
            return _only(narrowed, self.beat0)
        if beats.sum() == 1 and bar[-1] == self.beat0:  # right after the bar's first Beat_0
            return _only(narrowed, self.chords[len(starts) - 1])
        narrowed[self.chord_ids] = False
        return narrowed


def _only(allowed: np.ndarray, token: int) -> np.ndarray:
    """Only `token`, when the grammar allows it (else the grammar's own mask)."""
    if not allowed[token]:
        return allowed
    mask = np.zeros_like(allowed)
    mask[token] = True
    return mask
