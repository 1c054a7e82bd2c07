"""Infill: rewrite a range of bars of a song so that they lead into the bars after them.

The song is rearranged for fill in the middle (``BaseTokenizer.arrange``, an ``Arrangement`` of
``tokenization.infill``; REMI's is ``remi.infill``): the model reads the bars before the
range but the last ``LEAD_BARS``, ``Infill_Hole``, the bars after the range, ``Infill_Fill`` and those
last bars (the lead), then writes as many bars as the range holds. Every other bar is kept token for
token, and the result is put back in time order.

Of the bars after the range the model reads only the first ones, within ``SUFFIX_TOKENS`` tokens: the
fine-tune's suffixes are the rest of a 2,048-token crop, and a whole song's suffix (thousands of tokens)
would put the bars before the range, which the rewritten bars continue, far out of the decayed state's
reach (``bench.infill --suffix-tokens`` measures the choice).

    spans = parse_bar_range("9-12")                       # 1-based, inclusive
    job = InfillJob.of(tokenizer, song_ids, spans)
    results = generate_batch(model, tokenizer, job.prompt, budget, n, sampling,
                             stop=bar_stop(tokenizer, len(job.prompt), job.bars), steer=job.steer())
    pieces = [job.restore(result) for result in results]

With recall (``generation.recall``), an infill copies from ``RECALL_LAG`` tokens back or more, nearer
than a left-to-right piece's lag: the range is a few bars, so a copy cannot feed a loop, and the suffix
and the lead sit right before it (``infill_sampling``; 4-bar spans of 20 held-out songs gain 0.06-0.14
nats from the suffix with it, 0.02-0.08 at 512: bench/README.md, "Recall").

The model must know the markers: a checkpoint fine-tuned with ``data.fim_rate > 0``.
:func:`infill_checkpoint` picks the shipped one when the default model lacks them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np

from generation.pieces import count_bars
from generation.sampling import GenerationResult, SamplingConfig
from model.shipped import shipped_model
from tokenization import BaseTokenizer
from tokenization.infill import Arrangement, marker_ids

logger = logging.getLogger(__name__)

INFILL_MODEL = "pop909_infill"  # the shipped fill-in-the-middle model, used when the default has no markers
SUFFIX_TOKENS = 512  # the model reads the whole bars after the range that fit in this many tokens (at least one)
LEAD_BARS = 4  # bars before the range read after the suffix, right before the range (bench.infill --lead-bars)
RECALL_LAG = 128  # an infill's recall copies from this many tokens back or more (at most the model's own lag)


def infill_sampling(sampling: SamplingConfig) -> SamplingConfig:
    """The sampling of an infill: the model's, its recall allowed to copy from RECALL_LAG tokens back."""
    if sampling.recall is None:
        return sampling
    return replace(sampling, recall=replace(sampling.recall, min_lag=min(sampling.recall.min_lag, RECALL_LAG)))


def parse_bar_range(text: str) -> tuple[int, int]:
    """``"9-12"`` -> (9, 12); ``"9"`` -> (9, 9): 1-based bar numbers, first <= last (ValueError otherwise)."""
    first, dash, last = text.strip().partition("-")
    try:
        span = (int(first), int(last) if dash else int(first))
    except ValueError:
        raise ValueError(f"expected a bar range like 9-12 (1-based, inclusive), got {text!r}") from None
    if span[0] < 1 or span[1] < span[0]:
        raise ValueError(f"expected a bar range like 9-12 (first >= 1, last >= first), got {text!r}")
    return span


def has_infill(tokenizer: BaseTokenizer) -> bool:
    """Whether the vocabulary holds the fill-in-the-middle markers."""
    return tokenizer.infill_markers() is not None


def infill_checkpoint(given: str | None) -> str | Path | None:
    """The checkpoint an infill loads: the one given, else the shipped infill model when present
    (else None: the default model)."""
    if given is not None:
        return given
    return shipped_model(INFILL_MODEL)


class InfillIncomplete(ValueError):
    """The token budget ran out before the bars to rewrite were all written."""


@dataclass
class InfillJob:
    """One song, the bars to rewrite, and the prompt that rewrites them."""

    tokenizer: BaseTokenizer  # with the markers
    parts: Arrangement  # the song cut around the range
    first: int  # first bar to rewrite (1-based)
    bars: int  # bars to rewrite
    read: Arrangement  # what the model reads: the prefix, and the suffix's first bars only

    @classmethod
    def of(cls, tokenizer: BaseTokenizer, ids: Sequence[int], span: tuple[int, int],
           suffix_tokens: int | None = SUFFIX_TOKENS, lead_bars: int = LEAD_BARS) -> InfillJob:
        """ValueError when the tokenizer has no markers or the range is not all in the song;
        `suffix_tokens`: how much of the suffix the model reads, in whole bars (None: all of it);
        `lead_bars`: the bars before the range read right before it (``Arrangement.lead``)."""
        marker_ids(tokenizer)
        have = len(tokenizer.bar_starts(list(ids)))
        if span[1] > have:
            raise ValueError(f"infill bars {span[0]}-{span[1]}: the song has {have} bars")
        parts = tokenizer.arrange(ids, span[0] - 1, span[1] - span[0] + 1, lead_bars)
        suffix = parts.suffix if suffix_tokens is None else bars_within(tokenizer, parts.suffix, suffix_tokens)
        read = Arrangement(prefix=parts.prefix, middle=parts.middle, suffix=suffix, lead=parts.lead)
        return cls(tokenizer, parts, span[0], span[1] - span[0] + 1, read)

    @property
    def prompt(self) -> list[int]:
        """What the model reads before writing the bars: prefix, hole, the suffix's first bars, fill, lead."""
        return self.read.prompt(self.tokenizer)

    def steer(self) -> BarsWithNotes:
        return BarsWithNotes(self.tokenizer, len(self.prompt), self.bars, open_with_bar=True)

    def restore(self, result: GenerationResult) -> GenerationResult:
        """The song in time order with the new bars in the range (prompt_len: the bars before it)."""
        start = len(self.prompt)
        bar_lines = count_bars(self.tokenizer, result.tokens, start)
        end = bar_lines[self.bars] if len(bar_lines) > self.bars else len(result.tokens)
        if len(bar_lines) < self.bars:
            raise InfillIncomplete(f"the token budget ran out after {len(bar_lines)} of the {self.bars} bars "
                                   f"to rewrite: nothing was written (give more tokens)")
        middle = [t for t in result.tokens[start:end] if t not in marker_ids(self.tokenizer)
                  and t != self.tokenizer.eos_id]
        tokens = self.parts.before + middle + self.parts.suffix + [self.tokenizer.eos_id]
        return GenerationResult(tokens=tokens, prompt_len=len(self.parts.before), stopped_at_eos=False,
                                seconds=result.seconds, noise_length=result.noise_length)

    def middle(self, restored: GenerationResult) -> list[int]:
        """The rewritten bars of a restored result."""
        return restored.tokens[len(self.parts.before):len(restored.tokens) - self.tail]

    @property
    def tail(self) -> int:
        """Tokens at the end of a restored result that are the song's own: its bars after the range, and EOS."""
        return len(self.parts.suffix) + 1


def bars_within(tokenizer: BaseTokenizer, ids: list[int], tokens: int) -> list[int]:
    """The whole bars that open `ids` within `tokens` tokens (at least the first bar)."""
    ends = tokenizer.bar_starts(ids)[1:] + [len(ids)]  # where each bar ends
    fitting = [end for end in ends if end <= tokens]
    return ids[:fitting[-1] if fitting else ends[0]]


class BarsWithNotes:
    """A steer for the bars being written (by an infill, or any continuation of `bars` bars): no end of
    piece before `bars` bars, no bar line before the
    current bar has a note (so every rewritten bar has notes), and no meter change (the bars after the
    range are in the meter at its start). With `open_with_bar` the first token written is a bar line:
    an infill's prompt may end inside the bar before the range (its lead), which is the song's own."""

    def __init__(self, tokenizer: BaseTokenizer, start: int, bars: int, open_with_bar: bool = False) -> None:
        self.start, self.bars = start, bars  # index of the first written token; bars to write
        self.open_with_bar = open_with_bar  # nothing is added to the bar the prompt ends in
        self.bar = tokenizer.bar_id
        markers = tokenizer.infill_markers()
        end = [] if markers is None else [markers[2]]  # Infill_End
        self.closing = [tokenizer.eos_id, *end, *tokenizer.vocab.by_type("TimeSig")]
        self.pitches = np.asarray(tokenizer.vocab.by_type("Note_Pitch"), dtype=np.int64)

    def __call__(self, tokens: Sequence[int], allowed: np.ndarray) -> np.ndarray:
        tail = np.asarray(tokens[self.start:], dtype=np.int64)
        if self.open_with_bar and not len(tail) and allowed[self.bar]:
            narrowed = np.zeros_like(allowed)
            narrowed[self.bar] = True
            return narrowed
        starts = np.flatnonzero(tail == self.bar)
        if len(starts) > self.bars:
            return allowed
        narrowed = allowed.copy()
        narrowed[self.closing] = False
        if len(starts) and not np.isin(tail[starts[-1]:], self.pitches).any():
            narrowed[self.bar] = False
        return narrowed if narrowed.any() else allowed
