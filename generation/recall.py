"""Recall: a copy cache mixed into the model's next-token distribution, so that a piece can restate itself.

A linear-attention model keeps its past in a fixed-size state and cannot copy a passage it has read
(bench/README.md, "The lead": a 4-bar span read a second time right after itself is predicted hardly
better than the first time). Real songs restate their sections. Recall gives the decoder the missing
exact memory, as a cache language model does (Kuhn and De Mori 1990; Grave et al. 2017):

    key(t)    = the last n tokens up to t, leaving out expressive detail (the tokenizer's
                `expressive_types`: REMI's velocities and tempi), whether token t itself was left out,
                and the last token of the tokenizer's `position_types` (REMI: the Bar or Beat we are at)
    p_copy    = the tokens that followed the earlier positions with the same key, at least `min_lag`
                tokens back, as frequencies; the longest order n of `orders` with such a match is used
    p         = (1 - weights[n]) * p_model + weights[n] * p_copy

The lag keeps recall to what a song restates, sections 8 bars or more apart: the model itself handles
the bar it is in. Without it, a bar or two that happen to repeat feed their own copy, and a sampled
piece can lock into a loop of them.

The weights are fitted on held-out songs by likelihood (`fit_weights`; bench/recall.py), so the
mixture is a better model of real music, not a taste: an order with no gain gets weight 0. Each new
token updates one hash table per order, O(len(orders)) per token whatever the position: decoding stays
O(1) per token. One `Recall` follows one sequence (a sample, or a prompt followed by its samples).
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from tokenization import BaseTokenizer

ORDERS = (2, 4, 8, 16, 32, 64)  # key lengths looked up by default
MIN_LAG = 512  # tokens between a position and the earliest it copies from by default (about 6-8 pop bars)


@dataclass
class RecallConfig:
    weights: tuple[float, ...]  # copy weight per order, in [0, 1) (fitted: `fit_weights`)
    orders: tuple[int, ...] = ORDERS  # key lengths (kept tokens), increasing; the longest match wins
    min_lag: int = MIN_LAG  # a position copies from positions at least this many tokens back

    def __post_init__(self) -> None:
        self.orders, self.weights = tuple(self.orders), tuple(self.weights)
        if not self.orders or list(self.orders) != sorted(set(self.orders)) or self.orders[0] < 1:
            raise ValueError(f"recall orders must be increasing integers >= 1, got {self.orders}")
        if len(self.weights) != len(self.orders):
            raise ValueError(f"{len(self.weights)} recall weights for {len(self.orders)} orders")
        if not all(0.0 <= w < 1.0 for w in self.weights):
            raise ValueError(f"recall weights must be in [0, 1), got {self.weights}")
        if self.min_lag < 1:
            raise ValueError(f"the recall lag must be >= 1 token, got {self.min_lag}")


@dataclass(frozen=True)
class KeyTokens:
    """The parts tokens play in recall: `skipped` ones are left out of the keys (a restated passage
    varies them); the last `anchors` token seen joins every key (the position in the bar: a short key
    then matches only at the same place of a bar, and cannot end a bar early); the `end` token's
    probability stays the model's (a copy never ends a piece, nor keeps one from ending)."""

    skipped: np.ndarray  # (V,) bool
    anchors: np.ndarray  # (V,) bool
    end: int = -1  # the end-of-piece id (-1: none)

    @classmethod
    def of(cls, tokenizer: BaseTokenizer) -> KeyTokens:
        """The tokenizer's `expressive_types` skipped, its `position_types` anchors, its EOS the end."""
        names = [tokenizer.vocab.token(i) for i in range(tokenizer.vocab_size)]
        return cls(np.array([n.startswith(tokenizer.expressive_types) for n in names], dtype=bool),
                   np.array([n.startswith(tokenizer.position_types) for n in names], dtype=bool),
                   tokenizer.eos_id)

    @classmethod
    def plain(cls, vocab_size: int) -> KeyTokens:
        """Every token in the keys, no anchor, no end."""
        return cls(np.zeros(vocab_size, dtype=bool), np.zeros(vocab_size, dtype=bool))


@dataclass(frozen=True)
class Sections:
    """A form laid on the piece's bars: recall then copies a bar only from bars of the same label, so a
    chorus's material returns in the chorus and not in the verse."""

    bar: int  # the bar-line id (bars are counted from the piece's first token)
    starts: tuple[tuple[int, str], ...]  # (first bar, label) of each phrase, in order

    def label(self, bar: int) -> str | None:
        """The label of (0-based) bar `bar`: its phrase's; None before the first phrase."""
        found = None
        for first, label in self.starts:
            if first > bar:
                break
            found = label
        return found


@dataclass
class Recall:
    """The copy cache of one sequence: `extend` it with tokens, ask `match` for the next one's."""

    orders: tuple[int, ...]
    keys: KeyTokens  # what is left out of the keys and what anchors them
    min_lag: int = 1  # a token is copied from at least this many positions before the one predicted
    sections: Sections | None = None  # a form: the current bar's label joins every key
    kept: list[int] = field(default_factory=list)  # the sequence's tokens less the skipped ones
    tables: list[dict[int, Counter]] = field(default_factory=list)  # per order: key -> next tokens
    pending: list[int | None] = field(default_factory=list)  # per order: the key after the last token
    waiting: deque = field(default_factory=deque)  # (position, keys, next token), not yet min_lag old
    anchor: int = -1  # the last anchor token seen
    section: str | None = None  # the label of the bar being read
    bars: int = 0  # bar lines seen (with sections)
    length: int = 0  # tokens seen

    def __post_init__(self) -> None:
        self.tables = [dict() for _ in self.orders]
        self.pending = [None] * len(self.orders)

    def extend(self, tokens: Sequence[int]) -> None:
        for token in tokens:
            self.append(int(token))

    def append(self, token: int) -> None:
        """Read one more token: it is what followed the previous keys; then the keys after it. A token
        is copied only from min_lag or more positions before the one predicted."""
        self.waiting.append((self.length, self.pending, token))
        self.length += 1
        while self.waiting and self.waiting[0][0] <= self.length - self.min_lag:
            _, keys, following = self.waiting.popleft()
            for table, key in zip(self.tables, keys):
                if key is not None:
                    table.setdefault(key, Counter())[following] += 1
        skipped = bool(self.keys.skipped[token])
        if not skipped:
            self.kept.append(token)
        if self.keys.anchors[token]:
            self.anchor = token
        if self.sections is not None and token == self.sections.bar:
            self.bars += 1
            self.section = self.sections.label(self.bars - 1)
        kept, anchor, section = self.kept, self.anchor, self.section
        self.pending = [hash((skipped, anchor, section, *kept[-n:])) if len(kept) >= n else None
                        for n in self.orders]

    def match(self) -> tuple[int, Counter] | None:
        """(order index, counts of the tokens that followed) of the longest key seen before, or None."""
        for index in range(len(self.orders) - 1, -1, -1):
            key = self.pending[index]
            if key is not None and key in self.tables[index]:
                return index, self.tables[index][key]
        return None


def copy_distribution(counts: Counter, vocab_size: int) -> np.ndarray:
    """(V,) the frequencies of `counts`."""
    p = np.zeros(vocab_size)
    total = sum(counts.values())
    for token, count in counts.items():
        p[token] = count / total
    return p


def mix_logits(logits: torch.Tensor, recalls: Sequence[Recall], weights: Sequence[float]) -> torch.Tensor:
    """(B, V) logits -> (B, V) logits of the mixture with each row's copy distribution (log-probabilities;
    rows with no match, or whose order has weight 0, keep the model's logits, which sample the same)."""
    found = [recall.match() for recall in recalls]
    copies = {row: (weights[f[0]], f[1]) for row, f in enumerate(found) if f is not None and weights[f[0]] > 0}
    if not copies:
        return logits
    mixed = logits.to(torch.float64, copy=True)  # (B, V)
    for row, (weight, counts) in copies.items():
        copy = torch.from_numpy(copy_distribution(counts, logits.shape[-1])).to(mixed)  # (V,)
        own = torch.softmax(mixed[row], dim=-1)  # (V,)
        end = recalls[row].keys.end
        if end >= 0:  # the copy gives the end token the model's probability, the rest in proportion
            copy = copy * (1.0 - own[end])
            copy[end] = own[end]
        mixed[row] = torch.log((1.0 - weight) * own + weight * copy)
    return mixed


@dataclass
class Trace:
    """Per position of some sequences: which order matched (-1: none) and the copy probability of the
    token that came, next to the model's own probability of it (for fitting and measuring)."""

    order: np.ndarray  # (N,) int
    p_copy: np.ndarray  # (N,) float
    p_model: np.ndarray  # (N,) float


def trace(ids: Sequence[int], p_model: np.ndarray, orders: Sequence[int], keys: KeyTokens,
          min_lag: int = 1) -> Trace:
    """The `Trace` of ids[1:] read left to right (p_model: (len(ids) - 1,) the model's probability of
    each of them). The end token's copy probability is the model's, as `mix_logits` gives it; the
    other tokens' copy share, which `mix_logits` scales by 1 - p_model(end), is taken unscaled (inside a
    song the model gives the end almost nothing)."""
    recall = Recall(tuple(orders), keys, min_lag)
    recall.append(int(ids[0]))
    order = np.full(len(ids) - 1, -1)
    p_copy = np.zeros(len(ids) - 1)
    for t, token in enumerate(ids[1:]):
        found = recall.match()
        if found is not None:
            order[t] = found[0]
            p_copy[t] = p_model[t] if token == keys.end else found[1][int(token)] / sum(found[1].values())
        recall.append(int(token))
    return Trace(order, p_copy, np.asarray(p_model, dtype=float))


def recall_nll(ids: Sequence[int], nll: np.ndarray, config: RecallConfig, keys: KeyTokens) -> np.ndarray:
    """(len(ids) - 1,) the NLL of ids[1:] under the mixture, from the model's own NLL of each (`nll`)."""
    return mixture_nll(trace(ids, np.exp(-np.asarray(nll, dtype=float)), config.orders, keys, config.min_lag),
                       config.weights)


def mixture_nll(trace: Trace, weights: Sequence[float]) -> np.ndarray:
    """(N,) NLL (nats) of each token under the mixture with `weights`."""
    w = np.asarray([*weights, 0.0])[trace.order]  # order -1 (no match) picks the trailing 0
    return -np.log((1.0 - w) * trace.p_model + w * trace.p_copy)


def fit_weights(trace: Trace, num_orders: int, grid: int = 100) -> tuple[float, ...]:
    """Per order, the weight in [0, 1) (a grid of `grid` steps) that minimises the NLL of its positions."""
    weights = []
    candidates = np.arange(grid) / grid  # (G,)
    for index in range(num_orders):
        at = trace.order == index
        if not at.any():
            weights.append(0.0)
            continue
        pm, pc = trace.p_model[at], trace.p_copy[at]  # (M,) each
        nll = -np.log((1 - candidates[:, None]) * pm + candidates[:, None] * pc).sum(axis=1)  # (G,)
        weights.append(float(candidates[int(np.argmin(nll))]))
    return tuple(weights)


def concat(traces: Sequence[Trace]) -> Trace:
    return Trace(*(np.concatenate([getattr(t, name) for t in traces]) for name in ("order", "p_copy", "p_model")))

