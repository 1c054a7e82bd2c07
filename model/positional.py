"""Positional encodings of a MusicPerformer: one interface, one registry.

Vocabulary (the same words in model/, spe/ and docs/architecture.md):

- a *positional encoding* (`PositionalEncoding`, the class registered under `ModelConfig.pe` in
  `POSITIONAL_ENCODINGS`) acts on the token embeddings (`embed`: ape, learned_ape) and/or on each
  layer's queries and keys before the FAVOR+ feature map (`queries_keys`: rope rotates them, SPE
  filters them into R-dimensional qhat, khat);
- the *positional noise* (`PositionalNoise`, from `draw_noise(length)`) is the random part of one SPE
  realisation: each code generator's noise and each layer's gate noise. The same positional noise
  gives the same encoding, in a parallel forward or step by step. Deterministic encodings have none;
- a *code* is the pair (qbar, kbar), each (1, N, H, D, R), that a code generator (`SineSPE`,
  `ConvSPE`) computes from its noise at N given positions (spe's word); wrapped in a `SharedCode`
  when every layer uses it;
- the *context* (`PositionalContext`, from `context(noise, start, length)`) is what every layer needs
  for positions start .. start+length-1, computed once per forward pass or recurrent step at model
  level: an `SPEContext` (the codes and the gate noises) or a `RotaryContext` (cos, sin).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Union

import torch
import torch.nn as nn

from spe import ConvSPE, SharedCode, SineSPE, SPEFilter
from spe.factorised import FactorisedCode
from spe.filter import Code  # (qbar, kbar), each (1, N, H, D, R)
from spe.random import draw_seed
from spe.step import CODE_BLOCK, CodeBlocks, StepCode

if TYPE_CHECKING:
    from model.config import ModelConfig

# size of one stored sineSPE code above which it is applied in factored form by default (bench/README)
FACTORISED_CODE_BYTES = 256 * 2**20


@dataclass
class PositionalNoise:
    # one per code generator (1 when share_pe, else n_layer); None: not formed yet, given by its seed
    # (a draw the model makes for its own pass: `StochasticPE.code_noise` forms it when needed)
    code_noises: list[torch.Tensor | None]
    gate_noises: list[torch.Tensor] | None  # per layer (H, D, R) gate noise; None when ungated
    length: int  # number of positions the noise was drawn for (conv_spe cannot go beyond)
    # per code generator, (seed, data_ptr, version) of its noise when drawn from a seed (conv_spe:
    # `ConvSPE.noise_from_seed`, so that a pass over the whole noise filters its spectra drawn from
    # the seed, `ConvSPE.seeded_code`; used only while code_noises holds that tensor unchanged, or
    # None there), or None
    code_seeds: list[tuple[int, int | None, int | None] | None] | None = None

    def seed(self, index: int) -> int | None:
        """The seed code noise `index` was drawn from, if that tensor is still there, unchanged (or
        not formed yet)."""
        if not self.code_seeds or self.code_seeds[index] is None:
            return None
        seed, pointer, version = self.code_seeds[index]
        tensor = self.code_noises[index]
        if tensor is None:
            return seed
        return seed if (tensor.data_ptr(), tensor._version) == (pointer, version) else None
    # generation: per generator, its code served in blocks of positions
    blocks: dict[int, CodeBlocks] = field(default_factory=dict, repr=False, compare=False)


@dataclass
class SPEContext:
    codes: list[SharedCode | FactorisedCode | Code]  # one code per generator at the pass's positions
    gate_noises: list[torch.Tensor] | None  # per layer (H, D, R) gate noise; None when ungated
    # a generation step's fast path (`queries_keys`): the one shared code, checked once for all
    # layers; None when it does not apply
    step: StepCode | None = None


@dataclass
class RotaryContext:
    cos: torch.Tensor  # (N, 1, D/2) float64 cosines of the rotation angles
    sin: torch.Tensor  # (N, 1, D/2) float64 sines


PositionalContext = Optional[Union[SPEContext, RotaryContext]]


class PositionalEncoding(nn.Module):
    """Base class: no positional information at all (pe="none")."""

    stochastic = False  # whether the encoding draws a PositionalNoise (SPE)

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.qk_dims = cfg.head_dim  # width of the vectors handed to the feature map

    @classmethod
    def check_config(cls, cfg: ModelConfig) -> None:
        """ValueError when cfg does not suit this encoding (called by ModelConfig)."""

    @property
    def max_positions(self) -> int | None:
        """Number of positions the encoding knows (None: any position)."""
        return None

    def draw_noise(self, length: int, generator: torch.Generator | None = None, formed: bool = True
                   ) -> PositionalNoise | None:
        """One random realisation for positions 0 .. length-1 (None: the encoding is deterministic).
        formed=False leaves code noises drawn from a seed unformed until a pass needs them (the
        model's own draws; PositionalNoise.code_noises then holds None there)."""
        return None

    def extend_noise(self, noise: PositionalNoise | None, length: int,
                     generator: torch.Generator | None = None) -> PositionalNoise | None:
        """The same realisation covering `length` positions; positions already covered unchanged."""
        return noise

    def embed(self, x: torch.Tensor, start: int) -> torch.Tensor:
        """Token embeddings (B, N, d_model) of positions start .. start+N-1, position added."""
        return x

    def context(self, noise: PositionalNoise | None, start: int, length: int, batch: int = 1
                ) -> PositionalContext:
        """What every layer needs for positions start .. start+length-1 of `batch` sequences,
        computed once."""
        if noise is not None:
            raise ValueError(f"{type(self).__name__} takes no positional noise, got one")
        return None

    def queries_keys(self, layer: int, q: torch.Tensor, k: torch.Tensor, context: PositionalContext
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, N, H, D) queries and keys -> (B, N, H, qk_dims) inputs of the feature map; linear in q
        and k (the attention scales them before this call)."""
        return q, k


def sinusoids(positions: torch.Tensor, dims: int) -> torch.Tensor:
    """Vaswani et al. sinusoidal encodings: (N,) positions -> (N, dims)."""
    half = torch.arange(0, dims, 2, device=positions.device, dtype=torch.float64)
    angles = positions.double()[:, None] / (10000.0 ** (half / dims))  # (N, ceil(dims / 2))
    table = torch.zeros(len(positions), dims, dtype=torch.float64, device=positions.device)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : dims // 2])
    return table


class SinusoidalAPE(PositionalEncoding):
    """ape: fixed sinusoids added to the embeddings, any position."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.d_model = cfg.d_model

    def embed(self, x: torch.Tensor, start: int) -> torch.Tensor:
        positions = torch.arange(start, start + x.shape[1], device=x.device)  # (N,)
        return x + sinusoids(positions, self.d_model).to(x.dtype)


class LearnedAPE(PositionalEncoding):
    """learned_ape: a learned table of max_len positions added to the embeddings."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.table = nn.Embedding(cfg.max_len, cfg.d_model)

    @property
    def max_positions(self) -> int:
        return self.table.num_embeddings

    def embed(self, x: torch.Tensor, start: int) -> torch.Tensor:
        if start + x.shape[1] > self.max_positions:
            raise ValueError(f"learned_ape knows {self.max_positions} positions (max_len), asked for "
                             f"positions up to {start + x.shape[1] - 1}")
        positions = torch.arange(start, start + x.shape[1], device=x.device)  # (N,)
        return x + self.table(positions)


class RotaryPE(PositionalEncoding):
    """rope: rotate each (i, i + D/2) pair of queries and keys by position * 10000^(-2i/D)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        half = cfg.head_dim // 2
        inverse = 10000.0 ** (-torch.arange(half, dtype=torch.float64) / half)  # (D/2,)
        self.register_buffer("inv_freq", inverse, persistent=False)

    @classmethod
    def check_config(cls, cfg: ModelConfig) -> None:
        if cfg.head_dim % 2 != 0:
            raise ValueError(f"rope needs an even head size, got d_model / n_head = {cfg.head_dim}")

    def context(self, noise: PositionalNoise | None, start: int, length: int, batch: int = 1
                ) -> RotaryContext:
        super().context(noise, start, length, batch)
        positions = torch.arange(start, start + length, device=self.inv_freq.device)
        angles = positions.double()[:, None] * self.inv_freq  # (N, D/2), float64 for far positions
        return RotaryContext(cos=angles.cos()[:, None, :], sin=angles.sin()[:, None, :])  # (N, 1, D/2)

    def queries_keys(self, layer: int, q: torch.Tensor, k: torch.Tensor, context: RotaryContext
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = context.cos.to(q.dtype), context.sin.to(q.dtype)
        return rotate(q, cos, sin), rotate(k, cos, sin)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (B, N, H, D) by angles given as cos, sin of shape (N, 1, D/2)."""
    x1, x2 = x.chunk(2, dim=-1)  # (B, N, H, D/2) each
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class StochasticPE(PositionalEncoding):
    """SPE: shared (or per-layer) code generators, one SPEFilter per layer; subclasses name the generator."""

    stochastic = True
    bounded_by_noise = False  # whether a code exists only at the positions its noise was drawn for

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.qk_dims = cfg.num_realizations
        self.num_realizations = cfg.num_realizations
        self.gated = cfg.gated
        self.n_layer = cfg.n_layer
        count = 1 if cfg.share_pe else cfg.n_layer
        self.spes = nn.ModuleList([self.make_generator(cfg) for _ in range(count)])
        # how the layers apply a code (the values are the same): None (chosen per call, `_factorise`),
        # "stored" (a SharedCode: one stored code, gradients accumulated in place), "factorised"
        # (sineSPE only: a FactorisedCode, never stored), or "autograd" (the (qbar, kbar) tuple,
        # plain autograd: the reference for tests)
        self.contraction: str | None = None
        # dtype of a shared code stored for a pass with gradients (`spe.shared.storage_dtype`): float16,
        # or None (the code's own)
        self.code_dtype = torch.float16 if cfg.code_dtype == "float16" else None
        code_shape = self.spes[0].code_shape
        self.filters = nn.ModuleList([SPEFilter(gated=cfg.gated, code_shape=code_shape)
                                      for _ in range(cfg.n_layer)])

    @staticmethod
    def make_generator(cfg: ModelConfig) -> SineSPE | ConvSPE:
        """One code generator for cfg."""
        raise NotImplementedError

    def extend_code_noise(self, noise: torch.Tensor, extra: int, generator: torch.Generator | None
                          ) -> torch.Tensor:
        """One generator's noise covering `extra` more positions (unchanged when not bounded)."""
        return noise

    def draw_noise(self, length: int, generator: torch.Generator | None = None, formed: bool = True
                   ) -> PositionalNoise:
        if length < 1:
            raise ValueError(f"a positional noise needs length >= 1, got {length}")
        drawn = [self.draw_code_noise(spe, length, generator, formed) for spe in self.spes]
        code_noises = [noise for noise, _ in drawn]
        code_seeds = [None if seed is None else (seed, *_identity(noise)) for noise, seed in drawn]
        gate_noises = None
        if self.gated:
            like = self.spes[0].code_parameter()
            gate_noises = [f.draw_gate_noise(self.num_realizations, generator=generator).to(like)
                           for f in self.filters]
        return PositionalNoise(code_noises=code_noises, gate_noises=gate_noises, length=length,
                               code_seeds=code_seeds)

    def draw_code_noise(self, spe: SineSPE | ConvSPE, length: int, generator: torch.Generator | None,
                        formed: bool = True) -> tuple[torch.Tensor | None, int | None]:
        """One generator's noise for `length` positions, and the seed it was drawn from (or None);
        the noise None when drawn from a seed and not `formed`."""
        return spe.draw_noise(length, self.num_realizations, generator=generator), None

    def code_noise(self, noise: PositionalNoise, index: int) -> torch.Tensor:
        """Code noise `index` of `noise`, formed from its seed (and kept there) if it was not yet."""
        tensor = noise.code_noises[index]
        if tensor is None:
            seed = noise.code_seeds[index][0]
            tensor = self.spes[index].noise_from_seed(noise.length, seed, self.num_realizations)
            noise.code_noises[index] = tensor
            noise.code_seeds[index] = (seed, *_identity(tensor))
        return tensor

    def extend_noise(self, noise: PositionalNoise | None, length: int,
                     generator: torch.Generator | None = None) -> PositionalNoise | None:
        if noise is None or noise.length >= length:
            return noise
        code_noises = [self.extend_code_noise(self.code_noise(noise, index), length - noise.length, generator)
                       for index in range(len(noise.code_noises))]
        return PositionalNoise(code_noises=code_noises, gate_noises=noise.gate_noises, length=length)

    def context(self, noise: PositionalNoise | None, start: int, length: int, batch: int = 1
                ) -> SPEContext:
        if not isinstance(noise, PositionalNoise):
            raise ValueError(f"{type(self).__name__} needs a PositionalNoise, got {type(noise).__name__}")
        if len(noise.code_noises) != len(self.spes) or (noise.gate_noises is None) == self.gated:
            raise ValueError("this positional noise was drawn for another SPE configuration "
                             "(share_pe / gated differ)")
        with autocast_off(self.spes[0].code_parameter().device.type):  # codes in full precision
            return self._context(noise, start, length, batch)

    def _context(self, noise: PositionalNoise, start: int, length: int, batch: int) -> SPEContext:
        if length == 1 and not torch.is_grad_enabled() and len(self.spes) == 1 \
                and self.contraction in (None, "stored"):
            context = self._step_context(noise, start)
            if context is not None:
                return context
        if self._factorise(length, batch):
            return SPEContext(codes=[spe.factorised(self.code_noise(noise, index), start, length)
                                     for index, spe in enumerate(self.spes)],
                              gate_noises=noise.gate_noises)
        code = self._code if self.contraction == "autograd" else self._shared_code
        codes: list[SharedCode | Code] = [code(index, noise, start, length) for index in range(len(self.spes))]
        return SPEContext(codes=codes, gate_noises=noise.gate_noises)

    def _shared_code(self, index: int, noise: PositionalNoise, start: int, length: int) -> SharedCode:
        """Generator `index`'s code as a SharedCode; a code evaluated afresh (not served from a
        generation block) through the generator's `shared_code` (its gradient in factored form where
        spe can, its storage reused from the previous pass)."""
        spe = self.spes[index]
        if self._afresh(length):
            seed = noise.seed(index)
            # training only: passes without gradients (evaluation, generation) keep the computed code,
            # so that a parallel forward equals the generation steps (which read float32 blocks)
            code_dtype = self.code_dtype if torch.is_grad_enabled() else None
            if seed is not None and start == 0 and length == noise.length:  # the whole noise: by its seed
                return spe.seeded_code(seed, length, self.num_realizations, code_dtype=code_dtype,
                                       noise=noise.code_noises[index])
            return spe.shared_code(self.code_noise(noise, index), start, length, code_dtype=code_dtype)
        return SharedCode(*self._code(index, noise, start, length))

    @staticmethod
    def _afresh(length: int) -> bool:
        """Whether `_code` evaluates a request of `length` positions afresh (training, or a long
        request) rather than from a cached generation block."""
        return torch.is_grad_enabled() or length >= CODE_BLOCK

    def _step_context(self, noise: PositionalNoise, start: int) -> SPEContext | None:
        """A generation step's context with SPEContext.step set, when the one shared code takes the
        step's fast path (`spe.step.StepCode`), else None."""
        qbar, kbar = self._code(0, noise, start, 1)                     # (1, 1, H, D, R) each, of the block
        step = StepCode.of(qbar, kbar, self.filters, noise.gate_noises)
        return None if step is None else SPEContext(codes=[(qbar, kbar)], gate_noises=noise.gate_noises, step=step)

    def _factorise(self, length: int, batch: int) -> bool:
        """Whether this pass applies the code in factored form (`spe.factorised`): when asked to, or
        by default for sineSPE when the batch holds one sequence or one stored code would take more
        than FACTORISED_CODE_BYTES (measured in bench/README.md: the stored code is faster when
        several sequences share its reads, the factored one when it is memory-bound). Generation
        steps always use the cached stored blocks."""
        sine = all(isinstance(spe, SineSPE) for spe in self.spes)
        if self.contraction == "factorised":
            if not sine:
                raise ValueError("the factorised contraction needs sineSPE code generators")
            return True
        if self.contraction is not None or not sine:
            return False
        if length < CODE_BLOCK and not torch.is_grad_enabled():         # a generation step
            return False
        heads, features = self.spes[0].code_shape
        parameter = self.spes[0].freqs
        code_bytes = length * heads * features * self.num_realizations * parameter.element_size()
        return batch == 1 or code_bytes > FACTORISED_CODE_BYTES

    def _code(self, index: int, noise: PositionalNoise, start: int, length: int) -> Code:
        """The code (qbar, kbar) of generator `index` at positions start .. start+length-1: evaluated
        afresh for training and long requests, else (generation) from a block of positions
        (`spe.step.CodeBlocks`)."""
        spe, code_noise = self.spes[index], self.code_noise(noise, index)
        if self._afresh(length):
            return spe.codes(code_noise, start, length)
        blocks = noise.blocks.setdefault(index, CodeBlocks())
        return blocks.code(spe, code_noise, start, length, noise.length if self.bounded_by_noise else None)

    def queries_keys(self, layer: int, q: torch.Tensor, k: torch.Tensor, context: SPEContext
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        gate_noise = None if context.gate_noises is None else context.gate_noises[layer]
        if context.step is not None and context.step.serves(q, k):
            return context.step.filter(self.filters[layer], q, k, gate_noise)  # (B, 1, H, R) each
        code = context.codes[0] if len(context.codes) == 1 else context.codes[layer]
        # under autocast (bf16 training on CUDA) the code and its products stay in float32 at least
        dtype = torch.promote_types(q.dtype, torch.float32)
        if q.dtype != dtype or k.dtype != dtype:
            q, k = q.to(dtype), k.to(dtype)
        with autocast_off(q.device.type):
            return self.filters[layer](q, k, code, gate_noise=gate_noise)  # (B, N, H, R)


def _identity(tensor: torch.Tensor | None) -> tuple[int | None, int | None]:
    """(data_ptr, version) of a tensor, by which a PositionalNoise checks that it is unchanged."""
    return (None, None) if tensor is None else (tensor.data_ptr(), tensor._version)


def autocast_off(device_type: str):
    """A context with autocast off on `device_type`; a plain no-op one when it is off already (a
    generation step enters it seven times)."""
    return torch.autocast(device_type, enabled=False) if torch.is_autocast_enabled(device_type) else nullcontext()


class SineStochasticPE(StochasticPE):
    """sine_spe: SineSPE generators; the code exists at any position whatever the noise's length."""

    @staticmethod
    def make_generator(cfg: ModelConfig) -> SineSPE:
        return SineSPE(num_heads=cfg.n_head, in_features=cfg.head_dim,
                       num_realizations=cfg.num_realizations, num_sines=cfg.num_sines)


class ConvStochasticPE(StochasticPE):
    """conv_spe: ConvSPE generators; the noise covers the positions it was drawn for."""

    bounded_by_noise = True

    @staticmethod
    def make_generator(cfg: ModelConfig) -> ConvSPE:
        return ConvSPE(ndim=1, num_heads=cfg.n_head, in_features=cfg.head_dim,
                       num_realizations=cfg.num_realizations, kernel_size=cfg.kernel_size)

    def draw_code_noise(self, spe: ConvSPE, length: int, generator: torch.Generator | None,
                        formed: bool = True) -> tuple[torch.Tensor | None, int]:
        seed = draw_seed(generator)
        return (spe.noise_from_seed(length, seed, self.num_realizations) if formed else None), seed

    def extend_code_noise(self, noise: torch.Tensor, extra: int, generator: torch.Generator | None
                          ) -> torch.Tensor:
        """Fresh i.i.d. samples appended along time (position m's code reads noise m .. m + P - 1)."""
        appended = torch.randn(*noise.shape[:-1], extra, generator=generator, device=noise.device,
                               dtype=noise.dtype)  # (R, H*D, extra)
        return torch.cat([noise, appended], dim=-1)  # (R, H*D, length + P - 1)


# ModelConfig.pe -> encoding class (model.config derives PE_KINDS and SPE_KINDS from it)
POSITIONAL_ENCODINGS: dict[str, type[PositionalEncoding]] = {
    "sine_spe": SineStochasticPE,
    "conv_spe": ConvStochasticPE,
    "ape": SinusoidalAPE,
    "learned_ape": LearnedAPE,
    "rope": RotaryPE,
    "none": PositionalEncoding,
}


def build_positional_encoding(cfg: ModelConfig) -> PositionalEncoding:
    """The positional encoding named by cfg.pe."""
    return POSITIONAL_ENCODINGS[cfg.pe](cfg)
