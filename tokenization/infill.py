"""Fill in the middle (FIM) through the tokenizer contract: a piece cut around a span of bars.

A format that can rewrite bars knowing the bars after them (REMI, ``remi.infill``) has three marker
tokens in its vocabulary (``BaseTokenizer.infill_markers()``: where the middle was, where it starts,
its end) and cuts a piece's ids into an :class:`Arrangement` (``BaseTokenizer.arrange``). The model
reads ``prefix Infill_Hole suffix Infill_Fill lead`` and writes the middle.

The lead is the last bars before the middle, read after the suffix rather than before it: the middle
then continues the bars right before it with nothing in between, as in a left-to-right piece, and the
suffix sits just behind them. To the model the lead is the first bars of a longer middle (a training
span of lead + middle bars), given rather than written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tokenization.base import BaseTokenizer


@dataclass
class Arrangement:
    """A piece cut for fill in the middle (ids; no markers in the three parts)."""

    prefix: list[int]  # the bars before the span (before the lead)
    middle: list[int]  # the span's bars (to rewrite)
    suffix: list[int]  # the bars after the span, without the end token
    lead: list[int] = field(default_factory=list)  # the bars right before the span, read after Infill_Fill

    @property
    def before(self) -> list[int]:
        """The bars before the span, in time order (prefix and lead)."""
        return self.prefix + self.lead

    def prompt(self, tokenizer: BaseTokenizer) -> list[int]:
        """``prefix Infill_Hole suffix Infill_Fill lead``: what a model reads before writing the middle."""
        hole, fill, _ = marker_ids(tokenizer)
        return self.prefix + [hole] + self.suffix + [fill] + self.lead

    def sequence(self, tokenizer: BaseTokenizer) -> list[int]:
        """The whole rearranged sequence, ``Infill_End`` included (a training sample)."""
        return self.prompt(tokenizer) + self.middle + [marker_ids(tokenizer)[2]]


def marker_ids(tokenizer: BaseTokenizer) -> tuple[int, int, int]:
    """Ids of Infill_Hole, Infill_Fill and Infill_End; ValueError when the vocabulary lacks them."""
    markers = tokenizer.infill_markers()
    if markers is None:
        raise ValueError(f"this {type(tokenizer).__name__} vocabulary has no fill-in-the-middle tokens (a "
                         "REMI model fine-tuned with data.fim_rate > 0 has them)")
    return markers
