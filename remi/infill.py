"""Fill in the middle (FIM) for REMI: rewrite some bars of a piece knowing the bars that follow them.

A left-to-right model cannot see what comes after the bars it writes. Rearranged as

    prefix  Infill_Hole  suffix  Infill_Fill  [lead]  middle  Infill_End

a piece puts the bars to rewrite (the middle) last, after the bars that follow them (the suffix): a causal
model then writes the middle having read both sides. This is the prefix-suffix-middle order of Bavarian
et al. (2022), "Efficient training of language models to fill in the middle", with spans of whole bars.
At generation the last bars before the middle (the lead) can be moved behind the suffix, so that the
middle follows them directly: the hole is then at the lead's first bar line, and the grammar and the
restored order are those of a middle of lead + middle bars.

* :func:`arrange` cuts a piece's ids at bar lines into that order (the generation prompt is everything
  up to ``Infill_Fill``; ``REMITokenizer.arrange``, the tokenizer contract's, calls it); the
  :class:`Arrangement` and :func:`marker_ids` are the format-neutral ones of ``tokenization.infill``;
* :func:`fim_crop` rearranges a training crop around a random span of bars, keeping its length;
* :func:`restore_order` puts a rearranged sequence back in time order (the decoder calls it).

The suffix is read in the meter in force at the hole (``remi.grammar``); a span across which the meter
changes is refused by :func:`arrange` and skipped by :func:`fim_crop`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence, TypeVar

import numpy as np

from tokenization.infill import Arrangement, marker_ids  # noqa: F401  (this module's interface too)

if TYPE_CHECKING:
    from remi.tokenizer import REMITokenizer

T = TypeVar("T")

MAX_SPAN_BARS = 8  # longest middle fim_crop draws, in bars
MARKERS_PER_CROP = 3  # Infill_Hole, Infill_Fill and Infill_End: the tokens a rearranged crop adds


def arrange(tokenizer: REMITokenizer, ids: Sequence[int], first_bar: int, bars: int,
            lead_bars: int = 0) -> Arrangement:
    """Cut ``ids`` around bars ``first_bar .. first_bar + bars - 1`` (0-based; ValueError when the piece
    has fewer bars, or when the meter changes inside the span), with up to ``lead_bars`` bars before
    the span as the lead (fewer where the piece starts sooner or the meter changes in them)."""
    ids = [int(i) for i in ids]
    starts = tokenizer.bar_starts(ids)
    if first_bar < 0 or bars < 1 or first_bar + bars > len(starts):
        raise ValueError(f"bars {first_bar + 1}-{first_bar + bars} are not all in the piece, which has "
                         f"{len(starts)} bars")
    begin = starts[first_bar]
    end = starts[first_bar + bars] if first_bar + bars < len(starts) else len(ids)
    meter = meter_at(tokenizer, ids, begin)
    if meter != meter_at(tokenizer, ids, end):
        raise ValueError(f"the meter changes inside bars {first_bar + 1}-{first_bar + bars}: fill in the "
                         "middle needs one meter across the span")
    lead = min(lead_bars, first_bar)
    while lead > 0 and meter_at(tokenizer, ids, starts[first_bar - lead]) != meter:
        lead -= 1  # the suffix is read in the meter at the hole: the lead keeps the span's
    cut = starts[first_bar - lead]
    suffix = [i for i in ids[end:] if i not in (tokenizer.eos_id, tokenizer.pad_id)]
    return Arrangement(prefix=ids[:cut], middle=ids[begin:end], suffix=suffix, lead=ids[cut:begin])


def meter_at(tokenizer: REMITokenizer, ids: Sequence[int], index: int) -> tuple[int, int]:
    """The meter in force at ``ids[index]`` (the grammar's bar clock after the tokens before it)."""
    state = tokenizer.constraint_state()
    for token in ids[:index]:
        if state.accepts(int(token)):
            state.advance(int(token))
    return state.clock.meter


def fim_crop(tokenizer: REMITokenizer, crop: np.ndarray, rng: np.random.Generator,
             suffix_tokens: int | None = None) -> np.ndarray:
    """``crop`` rearranged around a random span of 1 .. MAX_SPAN_BARS whole bars, cut to the crop's
    length by trimming the end of the suffix; the crop itself when it has no such span. With
    ``suffix_tokens``, the span ends where at most that many tokens of the crop follow it, so that the
    suffix read is as short as the one generation reads (``generation.infill.SUFFIX_TOKENS``) and the
    crop stays full: the bars before the span are then most of it."""
    starts = tokenizer.bar_starts(crop.tolist())
    complete = len(starts) - 1  # bars that end inside the crop (the last one may be cut)
    if complete < 1:
        return crop
    bars = int(rng.integers(1, min(MAX_SPAN_BARS, complete) + 1))
    lowest = 0  # the first bar the span may start at
    if suffix_tokens is not None:  # the earliest bar line after which the suffix fits
        end = next((k for k in range(1, complete + 1) if len(crop) - starts[k] - MARKERS_PER_CROP <= suffix_tokens),
                   complete)
        lowest = max(0, end - bars)
    first = int(rng.integers(lowest, complete - bars + 1))
    try:
        parts = arrange(tokenizer, crop, first, bars)
    except ValueError:  # a meter change inside the span
        return crop
    keep = len(parts.suffix) - MARKERS_PER_CROP
    if keep < 1:
        return crop
    parts.suffix = parts.suffix[:keep]
    return np.asarray(parts.sequence(tokenizer)[:len(crop)], dtype=np.int64)


def restore_order(tokens: Sequence[T], hole: T, fill: T, end: T) -> list[T]:
    """A rearranged sequence back in time order: prefix, middle, suffix (unchanged without a hole;
    whatever follows ``end`` is dropped)."""
    tokens = list(tokens)
    if hole not in tokens:
        return tokens
    at_hole = tokens.index(hole)
    at_fill = tokens.index(fill, at_hole) if fill in tokens[at_hole:] else len(tokens)
    at_end = tokens.index(end, at_fill) if end in tokens[at_fill:] else len(tokens)
    prefix, suffix, middle = tokens[:at_hole], tokens[at_hole + 1:at_fill], tokens[at_fill + 1:at_end]
    return prefix + middle + suffix
