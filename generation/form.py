"""Generate a song with a form: its sections come back.

    phrases = parse_form("i4 A8 B8 A8 B8 x4 B8 o4")
    steer = FormSteer(tokenizer, phrases, bars_from=0, restate=0.5, seed=0)
    Decoder(model, tokenizer, prompt, steer=steer)           # grammar-constrained sampling

Bars are counted from token `bars_from` (a prompt's bars are the form's first bars). Where a phrase's
label came before (tokenization.form.first_occurrences), each of its 2-bar units (RESTATE_UNIT) restates,
with probability `restate`, the corresponding bars of the label's first phrase: the steer lets through
only those bars' tokens, one at a time, as long as the grammar allows them, then the next Bar. The other
bars, and every bar of a first occurrence, the model writes freely, reading the song so far. A restated bar and a free
one thus alternate, as real songs vary a section when it returns (POP909: bar b of a returning phrase is
0.51 similar to bar b of its first occurrence, not a copy). The song cannot end before the form's last
bar; the caller stops it after that bar (generation.pieces.bar_stop / keep_bars).

`draw_form` draws a form when the user asks for `--form auto`: a pop song plan (intro, verse and
chorus rounds, an optional interlude and bridge, the chorus twice at the end, outro) with phrase
lengths drawn as POP909's labels have them (mostly 8 bars, some 4).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from generation.chords import FREE, ChordSteer, parse_progression
from generation.pieces import bars_budget
from tokenization import BaseTokenizer, format_of
from tokenization.form import Phrase, first_occurrences, form_bars, parse_form

RESTATE = 0.5  # default probability that a returning phrase's unit restates its first occurrence's
RESTATE_UNIT = 2  # bars restated or written afresh together (a motif spans 2 bars more often than 1)


class FormSteer:
    """The allowed-token mask narrowed so that returning phrases restate their first occurrence."""

    def __init__(self, tokenizer: BaseTokenizer, phrases: Sequence[Phrase], bars_from: int,
                 restate: float = RESTATE, seed: int = 0, inner=None) -> None:
        if not 0.0 <= restate <= 1.0:
            raise ValueError(f"the restatement probability must be in [0, 1], got {restate}")
        self.phrases = list(phrases)  # the form
        self.bars = form_bars(self.phrases)  # bars of the whole form
        self.bars_from = bars_from  # index of the token from which bars are counted
        self.inner = inner  # a steer applied first (e.g. generation.chords.ChordSteer), or None
        self.bar, self.eos = tokenizer.bar_id, tokenizer.eos_id
        rng = np.random.default_rng([seed, 7])
        # form bar -> the bar it restates (drawn once: every sample of a batch follows the same plan)
        self.plan: dict[int, int] = {}
        for index, source in first_occurrences(self.phrases).items():
            phrase = self.phrases[index]
            for unit in range(0, min(phrase.bars, source.bars), RESTATE_UNIT):
                if rng.random() < restate:
                    for b in range(unit, min(unit + RESTATE_UNIT, phrase.bars, source.bars)):
                        self.plan[phrase.first + b] = source.first + b

    def __call__(self, tokens: Sequence[int], allowed: np.ndarray) -> np.ndarray:
        """`allowed` (V,) for the sample's next token, given its tokens so far."""
        if self.inner is not None:
            allowed = self.inner(tokens, allowed)
        tail = np.asarray(tokens[self.bars_from:], dtype=np.int64)
        starts = np.flatnonzero(tail == self.bar)
        current = len(starts) - 1  # the form bar being written (-1: before the first Bar)
        if current < 0 or current >= self.bars:
            return allowed
        narrowed = allowed.copy()
        narrowed[self.eos] = False  # the form is not over yet
        source = self.plan.get(current)
        if source is None or source + 1 >= len(starts):
            return narrowed
        model = tail[starts[source]:starts[source + 1]]  # the restated bar, from its Bar token
        written = tail[starts[current]:]
        if len(written) > len(model) or not np.array_equal(written, model[:len(written)]):
            return narrowed  # the grammar refused the copy somewhere: the model goes on freely
        following = int(model[len(written)]) if len(written) < len(model) else self.bar
        if not narrowed[following]:
            return narrowed
        only = np.zeros_like(narrowed)
        only[following] = True
        return only


def draw_form(seed: int) -> list[Phrase]:
    """A pop form for `--form auto` (see the module docstring)."""
    rng = np.random.default_rng([seed, 11])

    def length(*choices_and_weights: tuple[int, float]) -> int:
        lengths, weights = zip(*choices_and_weights)
        return int(rng.choice(lengths, p=np.asarray(weights) / sum(weights)))

    verse, chorus = length((8, 0.7), (4, 0.3)), length((8, 0.8), (4, 0.2))
    parts = [f"i{length((4, 0.6), (8, 0.25), (2, 0.15))}"]
    rounds = int(rng.choice([2, 3], p=[0.7, 0.3]))
    for r in range(rounds):
        parts += [f"A{verse}"] * (2 if verse == 4 else 1) + [f"B{chorus}"] * (2 if chorus == 4 else 1)
        if r < rounds - 1 and rng.random() < 0.6:
            parts.append(f"x{length((4, 0.7), (8, 0.3))}")
    if rng.random() < 0.4:
        parts.append(f"C{length((8, 0.7), (4, 0.3))}")
    parts += [f"B{chorus}"] * (2 if chorus == 4 else 1)
    parts.append(f"o{length((4, 0.6), (2, 0.2), (8, 0.2))}")
    return parse_form(" ".join(parts))


def label_progressions(text: str) -> dict[str, list]:
    """Chord progressions per label, ``"A: C G Am F; B: F G C C"`` (``;`` or new lines between labels;
    symbols as generation.chords.parse_progression)."""
    progressions: dict[str, list] = {}
    for part in text.replace("\n", ";").split(";"):
        if not part.strip():
            continue
        label, colon, symbols = part.partition(":")
        label = label.strip()
        if not colon or len(label) != 1 or not label.isalpha():
            raise ValueError(f"expected chords per label such as 'A: C G Am F; B: F G C C', got {part.strip()!r}")
        if label in progressions:
            raise ValueError(f"label {label!r} has two chord progressions")
        progressions[label] = parse_progression(symbols)
    if not progressions:
        raise ValueError("the chord progression is empty: give one per label, e.g. 'A: C G Am F; B: F G C C'")
    return progressions


def form_chords(phrases: Sequence[Phrase], progressions: dict[str, list]) -> list:
    """One entry per bar of the form for a ChordSteer: each phrase whose label has a progression plays
    it from its first bar (repeated when the phrase is longer), so a progression comes back where
    its label does; other bars are FREE."""
    unknown = sorted(set(progressions) - {p.label for p in phrases})
    if unknown:
        raise ValueError(f"chords are given for label(s) {', '.join(unknown)}, which the form does not have")
    chords: list = []
    for phrase in phrases:
        progression = progressions.get(phrase.label)
        chords += [FREE] * phrase.bars if progression is None else \
            [progression[b % len(progression)] for b in range(phrase.bars)]
    return chords


AUTO = "auto"  # --form auto: a drawn form


def resolve_form(text: str, seed: int) -> list[Phrase]:
    """The phrases of `--form TEXT`, or a drawn form for 'auto'."""
    return draw_form(seed) if text.strip().lower() == AUTO else parse_form(text)


def form_budget(phrases: Sequence[Phrase], prompt_bars: int, tokens: int | None, default: int) -> int:
    """The token budget of a form (given, or enough for its bars), checked against what it needs."""
    total = form_bars(phrases)
    if prompt_bars >= total:
        raise ValueError(f"the prompt has {prompt_bars} bars and the form {total}: nothing is left to write "
                         f"(give a longer form or fewer prompt bars)")
    return bars_budget(total - prompt_bars, tokens, default, "the form")


def form_and_chords(text: str, chords: str | None, seed: int) -> tuple[list[Phrase], list | None]:
    """What a user's form request asks for: the phrases of `text` ('auto': drawn with `seed`) and, when
    `chords` gives progressions per label ("A: C G Am F; B: F G C C"), the chord of every bar of the
    form (else None). The command line and the studio both read a request through this."""
    phrases = resolve_form(text, seed)
    if chords is None or ":" not in chords:
        return phrases, None
    return phrases, form_chords(phrases, label_progressions(chords))


def form_steer(tokenizer: BaseTokenizer, phrases: Sequence[Phrase], bar_chords: list | None, restate: float,
               seed: int, inner=None) -> FormSteer:
    """The steer of a form request, bars counted from the piece's first token (a prompt's bars are the
    form's first): the chords per label (when given) under the restatement of returning phrases."""
    if format_of(tokenizer) != "remi":
        raise ValueError(f"a form is for pop piano models (REMI); this model writes the {format_of(tokenizer)} format")
    if bar_chords is not None:
        inner = ChordSteer(tokenizer, bar_chords, 0)
    return FormSteer(tokenizer, phrases, 0, restate, seed, inner)
