"""Song form in the notation of POP909's human phrase labels (Dai et al. 2020): ``i4A8B8A8B8x4B8o4``.

A form is a sequence of phrases, each a label letter followed by its length in bars. Upper-case letters
are melodic phrases (a letter that comes back is the same material coming back: verse, chorus), ``X`` a
melodic phrase that does not come back; lower-case letters are phrases without melody (``i`` the intro,
``o`` the outro, ``x``, ``b``, ... interludes). Spaces between phrases are optional, so a label file's
line parses as it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PHRASE = re.compile(r"([A-Za-z])(\d+)")
MAX_PHRASE_BARS = 128  # a phrase longer than this is taken for a typo (POP909 has one of 86)
MELODIC = "ABCDEFGHX"  # upper-case labels: melodic phrases (A-H material that may return, X that does not)
NON_MELODIC = "iobcx"  # lower-case labels: intro, outro, interludes (b, c, x)


class FormError(ValueError):
    """A form that does not parse: the message says where and why."""


@dataclass(frozen=True)
class Phrase:
    label: str  # one letter: see the module docstring
    bars: int  # length in bars
    first: int  # index of its first bar in the form (0-based)

    @property
    def melodic(self) -> bool:
        """Whether the phrase carries the melody (upper-case label)."""
        return self.label.isupper()


def parse_form(text: str) -> list[Phrase]:
    """The phrases of a form such as ``"i4 A8 B8 A8 B8 x4 B8 o4"`` or ``"i4A8B8A8B8x4B8o4"``."""
    compact = "".join(text.split())
    if not compact:
        raise FormError("the form is empty: expected phrases such as 'i4 A8 B8 A8 B8 o4'")
    phrases, position, first = [], 0, 0
    while position < len(compact):
        match = PHRASE.match(compact, position)
        if match is None:
            shown = compact[position:position + 8]
            if compact[position].isalpha():
                raise FormError(f"phrase {len(phrases) + 1} ({shown!r}) has no length in bars: "
                                f"write a letter and a number, e.g. A8")
            raise FormError(f"phrase {len(phrases) + 1} ({shown!r}) does not start with a letter: "
                            f"write a letter and a number, e.g. A8")
        bars = int(match.group(2))
        if match.group(1) not in MELODIC + NON_MELODIC:
            raise FormError(f"phrase {match.group(0)!r}: unknown label {match.group(1)!r}; labels are "
                            f"{', '.join(MELODIC)} (melodic) and {', '.join(NON_MELODIC)} (intro, outro, "
                            f"interludes)")
        if not 1 <= bars <= MAX_PHRASE_BARS:
            raise FormError(f"phrase {match.group(0)!r}: its length must be 1 .. {MAX_PHRASE_BARS} bars")
        phrases.append(Phrase(match.group(1), bars, first))
        first += bars
        position = match.end()
    return phrases


def form_text(phrases: list[Phrase]) -> str:
    """The notation of `phrases`, one space between phrases: ``i4 A8 B8``."""
    return " ".join(f"{p.label}{p.bars}" for p in phrases)


def form_bars(phrases: list[Phrase]) -> int:
    """Total bars of a form."""
    return sum(p.bars for p in phrases)


def first_occurrences(phrases: list[Phrase]) -> dict[int, Phrase]:
    """For each phrase (by index) whose label came before, the first phrase with that label; ``X``,
    a phrase that by definition does not come back, never has one."""
    seen: dict[str, Phrase] = {}
    earlier: dict[int, Phrase] = {}
    for index, phrase in enumerate(phrases):
        if phrase.label == "X":
            continue
        if phrase.label in seen:
            earlier[index] = seen[phrase.label]
        else:
            seen[phrase.label] = phrase
    return earlier
