"""Follow a chord progression: lead-sheet symbols, one per bar, forced into REMI's chord tokens.

    chords = parse_progression("C Am | F G7 | N | Bbmaj7")      # [(0, "M"), (9, "m"), ...], None for N
    steer = ChordSteer(tokenizer, chords, bars_from=0)          # bars counted from token 0 on
    Decoder(model, tokenizer, prompt, steer=steer)               # grammar-constrained sampling

    spans = parse_annotation(Path("chord_midi.txt").read_text())  # POP909's chords, in seconds
    chords = place_annotation(spans, "001.mid", REMITokenizer())   # one per bar of the song

Symbols: a root A-G with an optional # or b, then a quality: "" (major), m, dim, aug, sus2, sus4, 7,
maj7, m7, dim7, m7b5; N for no chord. Bars are separated by blanks; `|` may stand between them.
They map one to one onto REMI's chord qualities (chorder's: M, m, o, +, sus2, sus4, 7, M7, m7, o7,
/o7; ``tokenization.chords``), whose tokens the tokenizer gives (``BaseTokenizer.chord_id``: a format
without chords is a ValueError naming it).

A chord file holds either the same symbols, or POP909's annotation format: one `start end root:quality`
line per chord (Harte's syntax, in seconds on the MIDI's clock, e.g. `C#:maj`, `Bb:min7`, `G:7/3`, `N`).
The bars are those the REMI tokenizer finds in the song's MIDI (its meter policy included), timed by the
file's tempo map; each bar takes the chord that covers most of it (N where none). A slash bass is
dropped, and qualities beyond REMI's map to their nearest: maj6 to major, min6 and minmaj7 to minor,
sus4(b7) to sus4, hdim7 to half-diminished.

`ChordSteer` narrows the grammar's allowed tokens of each sample: every new bar opens with Beat_0
and the bar's chord token right after it, no other chord token is written inside a bar, and the
piece cannot end (EOS) before the last chord's bar. The model writes the notes; whether they follow
the chords is measured by `evaluation.chords`.
"""

from __future__ import annotations

import math
import re
from typing import Any, Sequence

import numpy as np

from tokenization import BaseTokenizer
from tokenization.chords import CHORD_ROOTS, Chord, chord_name  # noqa: F401  (chord_name: also this module's interface)
from tokenization.midi_io import load_midi, tick_to_seconds

FREE = "free"  # in a ChordSteer's list: a bar whose chord the model chooses
Span = tuple[float, float, Chord]  # an annotation's chord: start and end in seconds, the chord

QUALITIES = {"": "M", "m": "m", "dim": "o", "aug": "+", "sus2": "sus2", "sus4": "sus4", "7": "7",
             "maj7": "M7", "m7": "m7", "dim7": "o7", "m7b5": "/o7"}  # lead-sheet quality -> REMI
FAMILIES = {"M": "major", "7": "major", "M7": "major", "m": "minor", "m7": "minor", "o": "diminished",
            "o7": "diminished", "/o7": "diminished", "+": "augmented", "sus2": "suspended",
            "sus4": "suspended"}
LETTERS = {"C": 0, "D": 2, "E": 4, "F": 5, "G": 7, "A": 9, "B": 11}
_SYMBOL = re.compile(r"^([A-G])([#b]?)(.*)$")
HARTE = {"maj": "", "min": "m", "dim": "dim", "aug": "aug", "sus2": "sus2", "sus4": "sus4", "7": "7",
         "maj7": "maj7", "min7": "m7", "dim7": "dim7", "hdim7": "m7b5", "maj6": "", "min6": "m",
         "minmaj7": "m", "sus4(b7)": "sus4"}  # POP909's qualities -> lead-sheet ones


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


def chord_symbol(chord: Chord) -> str:
    """A chord as the lead-sheet symbol `parse_chord` reads back (roots with #)."""
    if chord is None:
        return "N"
    return CHORD_ROOTS[chord[0]] + next(symbol for symbol, remi in QUALITIES.items() if remi == chord[1])


def parse_progression(text: str) -> list[Chord]:
    """One chord per bar from lead-sheet symbols separated by blanks and optional `|`."""
    symbols = text.replace("|", " ").split()
    if not symbols:
        raise ValueError("the chord progression is empty: give one chord symbol per bar, e.g. \"C Am F G7\"")
    return [parse_chord(symbol) for symbol in symbols]


def parse_harte(label: str) -> Chord:
    """One POP909 label (`root:quality[/bass]` or N) -> a chord; ValueError naming it."""
    if label == "N":
        return None
    root, _, quality = label.partition(":")
    quality = quality.split("/")[0]
    if quality not in HARTE or _SYMBOL.match(root) is None or _SYMBOL.match(root).group(3):
        raise ValueError(f"bad chord label {label!r}: expected root:quality with a root A-G (# or b) and "
                         f"one of the qualities {', '.join(HARTE)}, or N")
    return parse_chord(root + HARTE[quality])


def is_annotation(text: str) -> bool:
    """Whether a chord file's text is POP909's `start end label` format (its first line decides)."""
    lines = [line.split() for line in text.splitlines() if line.strip()]
    if not lines or len(lines[0]) != 3:
        return False
    try:
        float(lines[0][0]), float(lines[0][1])
    except ValueError:
        return False
    return True


def parse_annotation(text: str) -> list[Span]:
    """POP909's `start end label` lines -> (start, end, chord) spans; ValueError naming a bad line."""
    spans = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split()
        try:
            start, stop = float(fields[0]), float(fields[1])
        except (ValueError, IndexError):
            start = stop = math.nan
        if len(fields) != 3 or not stop >= start:
            raise ValueError(f"chord annotation line {number}: expected `start end root:quality` with "
                             f"end >= start, got {line.strip()!r}")
        spans.append((start, stop, parse_harte(fields[2])))
    if not spans:
        raise ValueError("the chord annotation has no chords")
    return spans


def annotation_bars(spans: Sequence[Span], downbeats: Sequence[float], end: float) -> list[Chord]:
    """One chord per bar: the chord covering most of each bar [downbeats[i], downbeats[i + 1]) (the
    last bar ends at `end`), N where none covers it; bars after the annotation's end are left out."""
    last = max(stop for _, stop, _ in spans)
    bounds = [t for t in downbeats if t < last] + [max(end, last)]
    chords = []
    for low, high in zip(bounds[:-1], bounds[1:]):
        cover: dict[Chord, float] = {}
        for start, stop, chord in spans:
            overlap = min(stop, high) - max(start, low)
            if overlap > 0:
                cover[chord] = cover.get(chord, 0.0) + overlap
        chords.append(max(cover, key=cover.get) if cover else None)
    return chords


def place_annotation(spans: Sequence[Span], midi: Any, tokenizer: BaseTokenizer) -> list[Chord]:
    """The annotation's chords in the bars the REMI `tokenizer` finds in `midi` (a path or MidiFile),
    timed by the file's tempo map."""
    require_chord_tokens(tokenizer)
    song = load_midi(midi)  # a TokenizationError naming a missing or broken file
    tokenizer.encode(song)
    ticks = np.asarray(tokenizer.last_encode_stats.bar_ticks + [song.max_tick], dtype=np.int64)
    seconds = tick_to_seconds(song, ticks)
    return annotation_bars(spans, [float(t) for t in seconds[:-1]], float(seconds[-1]))


def require_chord_tokens(tokenizer: BaseTokenizer) -> None:
    """ValueError naming the format unless the tokenizer writes chords (``BaseTokenizer.chord_id``)."""
    tokenizer.chord_id(None)


def family(chord: Chord) -> tuple[int, str] | None:
    """(root, family) of a chord, None for no chord."""
    return None if chord is None else (chord[0], FAMILIES[chord[1]])


class ChordSteer:
    """The allowed-token mask of a sample narrowed so that its bars follow `chords` (module docstring)."""

    def __init__(self, tokenizer: BaseTokenizer, chords: Sequence[Chord], bars_from: int) -> None:
        require_chord_tokens(tokenizer)
        vocab = tokenizer.vocab
        # per bar: the chord token to write, or -1 where the model chooses (FREE)
        self.chords = [-1 if chord == FREE else tokenizer.chord_id(chord) for chord in chords]
        self.bars_from = bars_from  # index of the token from which bars are counted (a Bar token)
        self.bar, self.beat0, self.eos = tokenizer.bar_id, vocab["Beat_0"], tokenizer.eos_id
        self.beats = np.asarray(vocab.by_type("Beat"), dtype=np.int64)
        self.chord_ids = np.asarray(vocab.by_type("Chord"), dtype=np.int64)
        self.tempi = np.asarray(vocab.by_type("Tempo"), dtype=np.int64)

    def __call__(self, tokens: Sequence[int], allowed: np.ndarray) -> np.ndarray:
        """`allowed` (V,) for the sample's next token, given its tokens so far."""
        tail = np.asarray(tokens[self.bars_from:], dtype=np.int64)
        starts = np.flatnonzero(tail == self.bar)
        if len(starts) == 0 or len(starts) > len(self.chords):  # before the first steered bar, or past the last
            return allowed
        narrowed = allowed.copy()
        narrowed[self.eos] = False  # the progression is not over yet
        if self.chords[len(starts) - 1] < 0:  # a free bar
            return narrowed
        bar = tail[starts[-1]:]  # the bar being written, from its Bar token
        beats = np.isin(bar, self.beats)
        if not beats.any():  # Bar [TimeSig] so far: open the bar on its first beat
            return _only(narrowed, self.beat0)
        at = np.flatnonzero(beats)  # the bar's Beat tokens
        if len(at) == 1 and bar[at[0]] == self.beat0 and np.isin(bar[at[0] + 1:], self.tempi).all():
            return _only(narrowed, self.chords[len(starts) - 1])  # right after Beat_0 (and a Tempo)
        narrowed[self.chord_ids] = False
        return narrowed


def _only(allowed: np.ndarray, token: int) -> np.ndarray:
    """Only `token`, when the grammar allows it (else the grammar's own mask)."""
    if not allowed[token]:
        return allowed
    mask = np.zeros_like(allowed)
    mask[token] = True
    return mask
