"""SPE for generation, one position at a time: codes served from blocks, and a step's filter pass.

    blocks = CodeBlocks()
    qbar, kbar = blocks.code(spe, noise, start, 1)       # (1, 1, H, D, R) each, from a cached block
    step = StepCode.of(qbar, kbar, filters, gate_noises)  # None: use the filters as usual
    qhat, khat = step.filter(filters[layer], q, k, gate_noise)   # (B, 1, H, R) each

A code generator evaluates its code for a block of CODE_BLOCK positions at once, so that stepping
costs one evaluation per block rather than per token (convSPE computes a code by FFT over its
filter length). `StepCode` checks once per step, for every layer, what `SPEFilter` would check per
call; a step's Python overhead costs more than its contraction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import torch

from spe.contract import compiled_step, gated_compiled
from spe.filter import Code, SPEFilter

CODE_BLOCK = 128  # positions of code evaluated at once when stepping without gradients


class CodeBlocks:
    """One code generator's code at a noise's positions, evaluated CODE_BLOCK positions at a time."""

    def __init__(self) -> None:
        self.first = -1  # first position of the cached block
        self.end = -1  # one past its last position
        self.versions: tuple = ()  # the generator's parameters when the block was computed
        self.block: Code | None = None  # (qbar, kbar), each (1, end - first, H, D, R)

    def code(self, spe, noise: torch.Tensor, start: int, length: int, bound: int | None = None) -> Code:
        """`spe.codes(noise, start, length)` from the cached block that holds those positions (a new
        one when it does not, or when the parameters changed); `bound`: the last position + 1 the noise
        covers (convSPE)."""
        first = start - start % CODE_BLOCK
        versions = tuple((p._version, p.data_ptr(), p.dtype) for p in spe.parameters())
        if self.block is None or self.first != first or self.versions != versions or start + length > self.end:
            end = first + CODE_BLOCK if bound is None else min(first + CODE_BLOCK, bound)
            self.first, self.versions, self.end = first, versions, max(end, start + length)
            self.block = spe.codes(noise, first, self.end - first)
        offset = start - first
        qbar, kbar = self.block
        return qbar[:, offset:offset + length], kbar[:, offset:offset + length]


@dataclass
class StepCode:
    """One position's shared code, checked once for all layers of a generation step: the compiled
    gated kernel serves it and every gate and gate noise has its dtype."""

    qbar: torch.Tensor  # (1, H, D, R), contiguous
    kbar: torch.Tensor  # (1, H, D, R), contiguous

    @classmethod
    def of(cls, qbar: torch.Tensor, kbar: torch.Tensor, filters: Iterable[SPEFilter],
           gate_noises: list[torch.Tensor] | None) -> StepCode | None:
        """The step code of a code (qbar, kbar), each (1, 1, H, D, R), for these filters and gate
        noises, or None when the fast path does not apply (then filter as usual)."""
        step = cls(qbar[0], kbar[0])
        dtype = step.qbar.dtype
        if not gated_compiled(step.qbar) or any(f.gate.dtype != dtype for f in filters if f.gated) \
                or any(n.dtype != dtype for n in gate_noises or ()):
            return None
        return step

    def serves(self, q: torch.Tensor, k: torch.Tensor) -> bool:
        """Whether queries and keys have the code's dtype (else filter as usual)."""
        return q.dtype == self.qbar.dtype and k.dtype == self.qbar.dtype

    def filter(self, spe_filter: SPEFilter, q: torch.Tensor, k: torch.Tensor,
               gate_noise: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """`spe_filter(q, k, code, gate_noise)` for (B, 1, H, D) queries and keys -> (B, 1, H, R) each."""
        a, eps, c = spe_filter.gate_terms(gate_noise, self.qbar.shape[-1])
        return compiled_step(q, k, (self.qbar, self.kbar), None if a is None else (a, c, eps))
