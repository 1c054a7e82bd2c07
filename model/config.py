"""Configuration of a MusicPerformer: one typed dataclass, validated on construction."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from model.positional import POSITIONAL_ENCODINGS

PE_KINDS = tuple(POSITIONAL_ENCODINGS)  # the registered positional encodings
SPE_KINDS = tuple(name for name, encoding in POSITIONAL_ENCODINGS.items() if encoding.stochastic)
ATTENTION_KINDS = ("ft", "torch")
CODE_DTYPES = ("float16", "float32")  # ModelConfig.code_dtype


@dataclass
class ModelConfig:
    vocab_size: int  # number of token ids (the tokenizer's vocabulary size)
    n_layer: int = 24  # number of pre-LayerNorm transformer blocks
    n_head: int = 8  # attention heads per block
    d_model: int = 512  # width of the residual stream; head size D = d_model / n_head
    d_ff: int = 2048  # hidden width of the GELU MLP
    dropout: float = 0.1  # dropout on embeddings, attention output and MLP output
    pe: str = "sine_spe"  # positional encoding: sine_spe, conv_spe, ape, learned_ape, rope or none
    gated: bool = True  # SPE only: per-layer gates trading positional for position-free attention
    share_pe: bool = True  # SPE only: one code generator for all layers (False: one per layer)
    num_realizations: int = 64  # SPE only: R, the number of noise realisations (width of qhat, khat)
    num_sines: int = 5  # sine_spe only: K, sinusoidal components per (head, feature)
    kernel_size: int = 128  # conv_spe only: P, length of the learned filters
    # SPE only: precision the shared code is stored in while it serves the layers of a training pass
    # where spe can read it back in float32: float16 (half the memory and the bytes read per layer;
    # values rounded to 11 significant bits) or float32 (exactly the computed code). Passes without
    # gradients (evaluation, generation) always keep the computed code
    code_dtype: str = "float16"
    feature_dims: int = 128  # M, number of FAVOR+ positive orthogonal random features
    attention: str = "ft"  # causal linear-attention kernel: ft (fast_transformers) or torch
    max_len: int = 2048  # learned_ape: size of the position table; conv_spe: default noise length
    # decayed attention state: the heads forget with horizons 1 / (1 - gamma_h) spaced geometrically from
    # 32 tokens up to this many (RetNet-style), so attention statistics stop drifting with the position
    # beyond it; 0: no decay (every head sums over the whole past)
    decay_horizon: int = 0
    # with decay_horizon: this many heads (the last ones) never forget, beside the decayed ones, so that
    # a song's first sections stay in the state when they return (0: every head decays)
    memory_heads: int = 0

    def __post_init__(self) -> None:
        positive = ("vocab_size", "n_layer", "n_head", "d_model", "d_ff", "num_realizations",
                    "num_sines", "kernel_size", "feature_dims", "max_len")
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ModelConfig.{name} must be a positive int, got {value!r}")
        if self.d_model % self.n_head != 0:
            raise ValueError(f"ModelConfig.d_model ({self.d_model}) must be divisible by "
                             f"n_head ({self.n_head})")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"ModelConfig.dropout must be in [0, 1), got {self.dropout!r}")
        if self.pe not in PE_KINDS:
            raise ValueError(f"ModelConfig.pe must be one of {PE_KINDS}, got {self.pe!r}")
        if isinstance(self.decay_horizon, bool) or not isinstance(self.decay_horizon, int) \
                or self.decay_horizon < 0:
            raise ValueError(f"ModelConfig.decay_horizon must be an int >= 0, got {self.decay_horizon!r}")
        if isinstance(self.memory_heads, bool) or not isinstance(self.memory_heads, int) \
                or not 0 <= self.memory_heads < self.n_head:
            raise ValueError(f"ModelConfig.memory_heads must be an int in 0 .. n_head - 1, got {self.memory_heads!r}")
        if self.memory_heads and not self.decay_horizon:
            raise ValueError("ModelConfig.memory_heads needs decay_horizon > 0 (without decay every head "
                             "already keeps the whole past)")
        if self.code_dtype not in CODE_DTYPES:
            raise ValueError(f"ModelConfig.code_dtype must be one of {CODE_DTYPES}, got {self.code_dtype!r}")
        if self.attention not in ATTENTION_KINDS:
            raise ValueError(f"ModelConfig.attention must be one of {ATTENTION_KINDS}, "
                             f"got {self.attention!r}")
        POSITIONAL_ENCODINGS[self.pe].check_config(self)
        for name in ("gated", "share_pe"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"ModelConfig.{name} must be a bool, got {getattr(self, name)!r}")

    @property
    def head_dim(self) -> int:
        """D, the size of one attention head."""
        return self.d_model // self.n_head

    @property
    def is_spe(self) -> bool:
        """Whether the positional encoding is stochastic (sine_spe or conv_spe)."""
        return self.pe in SPE_KINDS

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of the fields (for checkpoints and YAML)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ModelConfig:
        """Inverse of `to_dict`; unknown keys are a ValueError."""
        unknown = sorted(set(values) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"unknown ModelConfig fields: {unknown}")
        return cls(**values)
