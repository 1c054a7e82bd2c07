"""Positional encodings of a MusicPerformer, behind one interface.

A `PositionalEncoding` may act at two places:

- `embed(x, start)`: on the token embeddings (absolute encodings: ape, learned_ape);
- `queries_keys(layer, q, k, context)`: on each layer's queries and keys, before the FAVOR+ feature
  map (rope rotates them; SPE filters them into R-dimensional qhat, khat).

`context(code, start, length)` is computed once per forward pass (or recurrent step) at model level
and handed to every layer: the SPE codes (qbar, kbar) of the shared generator, or rope's angles.
A `PositionalCode` is the random part of one SPE realisation (the code noise and each layer's gate
noise); the same code gives the same encoding, in a parallel forward or step by step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from model.config import ModelConfig
from spe import ConvSPE, SharedCode, SineSPE, SPEFilter


@dataclass
class PositionalCode:
    noises: list[torch.Tensor]  # SPE noise, one per code generator (1 when share_pe, else n_layer)
    gate_noises: list[torch.Tensor] | None  # per layer (H, D, R) gate noise; None when ungated
    length: int  # number of positions the code was drawn for (conv_spe cannot go beyond)
    # generation: per generator, the (qbar, kbar) of the block of CODE_BLOCK positions in use
    blocks: dict = field(default_factory=dict, repr=False, compare=False)


CODE_BLOCK = 128  # positions of code evaluated at once when stepping without gradients


class PositionalEncoding(nn.Module):
    """Base class: no positional information at all (pe="none")."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.qk_dims = cfg.head_dim  # width of the vectors handed to the feature map

    def draw_code(self, length: int, generator: torch.Generator | None = None
                  ) -> PositionalCode | None:
        """One random realisation of the encoding (None: the encoding is deterministic)."""
        return None

    def embed(self, x: torch.Tensor, start: int) -> torch.Tensor:
        """Token embeddings (B, N, d_model) of positions start .. start+N-1, position added."""
        return x

    def context(self, code: PositionalCode | None, start: int, length: int) -> Any:
        """What every layer needs for positions start .. start+length-1, computed once."""
        if code is not None:
            raise ValueError(f"{type(self).__name__} takes no positional code, got one")
        return None

    def queries_keys(self, layer: int, q: torch.Tensor, k: torch.Tensor, context: Any
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, N, H, D) queries and keys -> (B, N, H, qk_dims) inputs of the feature map."""
        return q, k


def sinusoids(positions: torch.Tensor, dims: int) -> torch.Tensor:
    """Vaswani et al. sinusoidal encodings: (N,) positions -> (N, dims)."""
    half = torch.arange(0, dims, 2, device=positions.device, dtype=torch.float64)
    angles = positions.double()[:, None] / (10000.0 ** (half / dims))  # (N, ceil(dims / 2))
    table = torch.zeros(len(positions), dims, dtype=torch.float64, device=positions.device)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : dims // 2])
    return table


class AbsolutePE(PositionalEncoding):
    """ape (fixed sinusoids, any position) or learned_ape (a table of max_len positions)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.d_model = cfg.d_model
        self.max_len = cfg.max_len
        self.table = nn.Embedding(cfg.max_len, cfg.d_model) if cfg.pe == "learned_ape" else None

    def embed(self, x: torch.Tensor, start: int) -> torch.Tensor:
        positions = torch.arange(start, start + x.shape[1], device=x.device)  # (N,)
        if self.table is None:
            return x + sinusoids(positions, self.d_model).to(x.dtype)
        if start + x.shape[1] > self.max_len:
            raise ValueError(f"learned_ape knows {self.max_len} positions (max_len), asked for "
                             f"positions up to {start + x.shape[1] - 1}")
        return x + self.table(positions)


class RotaryPE(PositionalEncoding):
    """rope: rotate each (i, i + D/2) pair of queries and keys by position * 10000^(-2i/D)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        half = cfg.head_dim // 2
        inverse = 10000.0 ** (-torch.arange(half, dtype=torch.float64) / half)  # (D/2,)
        self.register_buffer("inv_freq", inverse, persistent=False)

    def context(self, code: PositionalCode | None, start: int, length: int
                ) -> tuple[torch.Tensor, torch.Tensor]:
        super().context(code, start, length)
        positions = torch.arange(start, start + length, device=self.inv_freq.device)
        angles = positions.double()[:, None] * self.inv_freq  # (N, D/2), float64 for far positions
        return angles.cos()[:, None, :], angles.sin()[:, None, :]  # (N, 1, D/2) each

    def queries_keys(self, layer: int, q: torch.Tensor, k: torch.Tensor,
                     context: tuple[torch.Tensor, torch.Tensor]
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = (t.to(q.dtype) for t in context)
        return rotate(q, cos, sin), rotate(k, cos, sin)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (B, N, H, D) by angles given as cos, sin of shape (N, 1, D/2)."""
    x1, x2 = x.chunk(2, dim=-1)  # (B, N, H, D/2) each
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class StochasticPE(PositionalEncoding):
    """sine_spe / conv_spe: shared (or per-layer) code generators, one SPEFilter per layer."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.qk_dims = cfg.num_realizations
        self.num_realizations = cfg.num_realizations
        self.gated = cfg.gated
        self.n_layer = cfg.n_layer

        def generator() -> nn.Module:
            if cfg.pe == "sine_spe":
                return SineSPE(num_heads=cfg.n_head, in_features=cfg.head_dim,
                               num_realizations=cfg.num_realizations, num_sines=cfg.num_sines)
            return ConvSPE(ndim=1, num_heads=cfg.n_head, in_features=cfg.head_dim,
                           num_realizations=cfg.num_realizations, kernel_size=cfg.kernel_size)

        self.spes = nn.ModuleList([generator() for _ in range(1 if cfg.share_pe else cfg.n_layer)])
        # how the layers apply a code: None (best available) / "compiled" / "torch" backend of a
        # SharedCode (one code, gradients accumulated in place), or "autograd" (the (qbar, kbar)
        # tuple, plain autograd: the reference); the values are the same
        self.contraction: str | None = None
        code_shape = self.spes[0].code_shape
        self.filters = nn.ModuleList([SPEFilter(gated=cfg.gated, code_shape=code_shape)
                                      for _ in range(cfg.n_layer)])

    def draw_code(self, length: int, generator: torch.Generator | None = None) -> PositionalCode:
        if length < 1:
            raise ValueError(f"a positional code needs length >= 1, got {length}")
        noises = [spe.draw_noise(length, self.num_realizations, generator=generator)
                  for spe in self.spes]
        gate_noises = None
        if self.gated:
            gate_noises = [f.draw_gate_noise(self.num_realizations, generator=generator).to(noises[0])
                           for f in self.filters]
        return PositionalCode(noises=noises, gate_noises=gate_noises, length=length)

    def context(self, code: PositionalCode | None, start: int, length: int
                ) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], PositionalCode]:
        if not isinstance(code, PositionalCode):
            raise ValueError(f"{type(self).__name__} needs a PositionalCode, got {type(code).__name__}")
        if len(code.noises) != len(self.spes) or (code.gate_noises is None) == self.gated:
            raise ValueError("this positional code was drawn for another SPE configuration "
                             "(share_pe / gated differ)")
        codes = [self._codes(index, code, start, length) for index in range(len(self.spes))]
        if self.contraction != "autograd":
            codes = [SharedCode(qbar, kbar, self.contraction) for qbar, kbar in codes]
        return codes, code  # codes: one SharedCode (or (qbar, kbar), each (1, N, H, D, R)) per generator

    def _codes(self, index: int, code: PositionalCode, start: int, length: int
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """(qbar, kbar) of generator `index` at positions start .. start+length-1, (1, N, H, D, R).

        Without gradients (generation), short requests are served from a block of CODE_BLOCK
        positions evaluated at once: stepping then costs one code evaluation per block, not per token
        (convSPE evaluates a code by FFT over the filter length).
        """
        spe, noise = self.spes[index], code.noises[index]
        if torch.is_grad_enabled() or length >= CODE_BLOCK:
            return spe.codes(noise, start, length)
        first = start - start % CODE_BLOCK
        versions = tuple((p._version, p.data_ptr(), p.dtype) for p in spe.parameters())  # changed: stale
        cached = code.blocks.get(index)
        if cached is None or cached[0] != first or cached[1] != versions or start + length > cached[2]:
            end = first + CODE_BLOCK if isinstance(spe, SineSPE) else min(first + CODE_BLOCK, code.length)
            end = max(end, start + length)
            cached = (first, versions, end, spe.codes(noise, first, end - first))
            code.blocks[index] = cached
        offset = start - first
        qbar, kbar = cached[3]
        return qbar[:, offset:offset + length], kbar[:, offset:offset + length]

    def queries_keys(self, layer: int, q: torch.Tensor, k: torch.Tensor,
                     context: tuple[list[SharedCode | tuple[torch.Tensor, torch.Tensor]], PositionalCode]
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        codes, code = context
        pair = codes[0] if len(codes) == 1 else codes[layer]
        gate_noise = None if code.gate_noises is None else code.gate_noises[layer]
        return self.filters[layer](q, k, pair, gate_noise=gate_noise)  # (B, N, H, R) each


def build_positional_encoding(cfg: ModelConfig) -> PositionalEncoding:
    """The positional encoding named by cfg.pe."""
    if cfg.is_spe:
        return StochasticPE(cfg)
    if cfg.pe in ("ape", "learned_ape"):
        return AbsolutePE(cfg)
    if cfg.pe == "rope":
        return RotaryPE(cfg)
    return PositionalEncoding(cfg)

