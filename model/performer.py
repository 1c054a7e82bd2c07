"""MusicPerformer: a decoder-only Performer (FAVOR+ causal attention) with pluggable positional encoding.

    tokens -> embedding * sqrt(d_model) (+ absolute PE) -> dropout -> n_layer pre-LN blocks
           -> LayerNorm -> linear head (untied from the embedding, as in the paper's models) -> logits

`forward(tokens, targets)` returns the logits and, given targets, the loss (nanoGPT style):
next-token cross-entropy with IGNORE_INDEX targets left out (`model.loss`).

The positional encoding's context (SPE codes, rope angles; see model.positional for the words) is
computed once per pass at model level and shared by the layers. A forward pass without positional
noise draws a fresh one (in training and in eval alike: SPE is stochastic); pass
`draw_positional_noise(length)`'s result to fix it, e.g. for evaluation, generation or comparing a
parallel forward with recurrent steps.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from model.attention import Block, LayerState
from model.config import ModelConfig
from model.kernels import resolve_kernel
from model.loss import token_loss
from model.positional import PositionalContext, PositionalNoise, StochasticPE, build_positional_encoding

logger = logging.getLogger(__name__)


@dataclass
class GenerationState:
    position: int  # index of the next token to be fed to `step`
    positional_noise: PositionalNoise | None  # the SPE realisation used for the whole sequence
    layers: list[LayerState]  # recurrent attention state of each layer


class MusicPerformer(nn.Module):
    """Performer language model over token ids; see the module docstring."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.attention_kernel, kernel = resolve_kernel(cfg.attention)  # effective kernel name
        self.embedding = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pe = build_positional_encoding(cfg)
        self.dropout = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList([Block(cfg, layer, self.pe.qk_dims, kernel)
                                     for layer in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.apply(self._init_weights)
        for name, parameter in self.named_parameters():
            if name.endswith("attn.proj.weight") or name.endswith("mlp.proj.weight"):
                nn.init.normal_(parameter, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        """GPT-2 initialisation of linear and embedding layers (SPE keeps its own)."""
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    @property
    def spe(self) -> nn.Module | None:
        """The shared SineSPE / ConvSPE (None without SPE, or with share_pe=False: see pe.spes)."""
        if isinstance(self.pe, StochasticPE) and len(self.pe.spes) == 1:
            return self.pe.spes[0]
        return None

    def gates(self) -> list[torch.Tensor] | None:
        """Per layer, the (H, D) gate values delta in [0, 1] (None unless gated SPE)."""
        if not (isinstance(self.pe, StochasticPE) and self.cfg.gated):
            return None
        return [f.gate_values() for f in self.pe.filters]

    def param_groups(self, weight_decay: float) -> list[dict[str, Any]]:
        """The optimizer's parameter groups: `weight_decay` on the weight matrices (embedding, linear
        layers), none on biases, norms or the positional encoding's parameters; frozen parameters left
        out. Parameters keep their registration order in each group."""
        positional = {id(parameter) for parameter in self.pe.parameters()}
        decay, no_decay = [], []
        for parameter in self.parameters():
            if parameter.requires_grad:
                matrix = parameter.dim() >= 2 and id(parameter) not in positional
                (decay if matrix else no_decay).append(parameter)
        return [{"params": decay, "weight_decay": weight_decay},
                {"params": no_decay, "weight_decay": 0.0}]

    def num_parameters(self, trainable_only: bool = True) -> int:
        """Number of (trainable) parameters."""
        return count_parameters(self, trainable_only)

    @torch.no_grad()
    def redraw_features(self, generator: torch.Generator | None = None) -> None:
        """Draw new FAVOR+ random features in every layer (they are fixed otherwise)."""
        for block in self.blocks:
            block.attn.features.redraw(generator)

    @property
    def max_positions(self) -> int | None:
        """Number of positions the model can encode (learned_ape: its table; None: any)."""
        return self.pe.max_positions

    def draw_positional_noise(self, length: int, generator: torch.Generator | None = None, formed: bool = True
                              ) -> PositionalNoise | None:
        """One SPE realisation for positions 0 .. length-1, shared by the batch (None if not SPE).
        formed=False leaves convSPE's noise as its seed until a pass needs it formed (a noise only
        handed to `forward` over all its positions never is)."""
        return self.pe.draw_noise(length, generator, formed)

    def extend_positional_noise(self, positional_noise: PositionalNoise | None, length: int,
                                generator: torch.Generator | None = None) -> PositionalNoise | None:
        """The same realisation covering `length` positions: positions already covered are unchanged.

        sineSPE noise does not depend on the length; convSPE noise gets fresh i.i.d. samples appended
        along its time axis.
        """
        return self.pe.extend_noise(positional_noise, length, generator)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None, *,
                positional_noise: PositionalNoise | None = None, reduction: str = "mean"
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(B, N) token ids -> (B, N, vocab_size) next-token logits, and the loss (None without targets).

        targets: (B, N) ids of the next tokens, IGNORE_INDEX where left out; the loss is their
        cross-entropy with `reduction` "mean", "sum" or "none" ((B, N) NLL per position).
        """
        x, context = self._embed(tokens, positional_noise, start=0)
        for block in self.blocks:
            x = block(x, self.pe, context)
        logits = self.head(self.ln_f(x))  # (B, N, V)
        loss = None if targets is None else token_loss(logits, targets, reduction)
        return logits, loss

    def attention_maps(self, tokens: torch.Tensor, layer: int = 0,
                       positional_noise: PositionalNoise | None = None) -> torch.Tensor:
        """Unnormalised causal attention phi(q) phi(k)^T of one layer: (B, H, N, N), float64."""
        if not 0 <= layer < self.cfg.n_layer:
            raise ValueError(f"layer must be in 0 .. {self.cfg.n_layer - 1}, got {layer}")
        x, context = self._embed(tokens, positional_noise, start=0)
        for block in self.blocks[:layer]:
            x = block(x, self.pe, context)
        block = self.blocks[layer]
        return block.attn.attention_map(block.ln_attn(x), self.pe, context)

    def init_state(self, batch_size: int, positional_noise: PositionalNoise | None = None
                   ) -> GenerationState:
        """Empty recurrent state; without positional noise, SPE draws one (conv_spe: for cfg.max_len
        tokens)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if positional_noise is None:
            positional_noise = self.draw_positional_noise(self.cfg.max_len)
        like = self.head.weight
        layers = [block.attn.initial_state(batch_size, like) for block in self.blocks]
        return GenerationState(position=0, positional_noise=positional_noise, layers=layers)

    def step(self, tokens: torch.Tensor, state: GenerationState
             ) -> tuple[torch.Tensor, GenerationState]:
        """Feed the tokens (B,) at position state.position: logits (B, vocab_size), next state."""
        if tokens.dim() != 1:
            raise ValueError(f"step expects tokens of shape (batch,), got {tuple(tokens.shape)}")
        return self.feed(tokens[:, None], state)

    def feed(self, tokens: torch.Tensor, state: GenerationState) -> tuple[torch.Tensor, GenerationState]:
        """Feed the tokens (B, N) at positions state.position onwards in one pass (a prompt read in
        chunks, the same state as N steps): the last position's logits (B, vocab_size), next state."""
        if tokens.dim() != 2 or tokens.shape[0] != state.layers[0].kv.shape[0]:
            raise ValueError(f"feed expects tokens of shape ({state.layers[0].kv.shape[0]}, length), "
                             f"got {tuple(tokens.shape)}")
        x, state = self._run(tokens, state)  # (B, N, C)
        return self.head(self.ln_f(x[:, -1])), state  # (B, V)

    def forward_state(self, tokens: torch.Tensor, targets: torch.Tensor | None, state: GenerationState,
                      reduction: str = "mean") -> tuple[torch.Tensor, torch.Tensor | None, GenerationState]:
        """`forward` continued from a recurrent state (training with state passing): (B, N) tokens at
        positions state.position onwards -> (B, N, V) logits, the loss (as `forward`) and the state
        after them. Gradients flow into the state's tensors; detach the state (`detach_state`) to
        truncate backpropagation between calls."""
        x, state = self._run(tokens, state)  # (B, N, C)
        logits = self.head(self.ln_f(x))  # (B, N, V)
        loss = None if targets is None else token_loss(logits, targets, reduction)
        return logits, loss, state

    def _run(self, tokens: torch.Tensor, state: GenerationState) -> tuple[torch.Tensor, GenerationState]:
        """The blocks over (B, N) tokens after `state`: final hidden states (B, N, C), next state."""
        x, context = self._embed(tokens, state.positional_noise, start=state.position)  # (B, N, C)
        layers = []
        for block, layer_state in zip(self.blocks, state.layers):
            x, layer_state = block.step(x, self.pe, context, layer_state)
            layers.append(layer_state)
        return x, GenerationState(position=state.position + tokens.shape[1],
                                  positional_noise=state.positional_noise, layers=layers)

    def _embed(self, tokens: torch.Tensor, positional_noise: PositionalNoise | None, start: int
               ) -> tuple[torch.Tensor, PositionalContext]:
        """Checked tokens (B, N) -> embeddings (B, N, C) and the positional context of the layers."""
        if tokens.dim() != 2 or tokens.shape[1] < 1:
            raise ValueError(f"tokens must have shape (batch, length), got {tuple(tokens.shape)}")
        if tokens.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"tokens must be integer ids, got dtype {tokens.dtype}")
        if tokens.min() < 0 or tokens.max() >= self.cfg.vocab_size:
            raise ValueError(f"token ids must be in 0 .. {self.cfg.vocab_size - 1}, got "
                             f"{int(tokens.min())} .. {int(tokens.max())}")
        length = tokens.shape[1]
        if positional_noise is None:
            positional_noise = self.draw_positional_noise(start + length, formed=False)  # formed if needed
        context = self.pe.context(positional_noise, start, length, batch=tokens.shape[0])
        x = self.embedding(tokens) * math.sqrt(self.cfg.d_model)  # (B, N, C)
        return self.dropout(self.pe.embed(x, start)), context


def detach_state(state: GenerationState) -> GenerationState:
    """The same state cut from the autograd graph (truncated backpropagation through the state)."""
    layers = [LayerState(kv=layer.kv.detach(), offset=layer.offset.detach()) for layer in state.layers]
    return GenerationState(position=state.position, positional_noise=state.positional_noise, layers=layers)


def count_parameters(module: nn.Module, trainable_only: bool = True) -> int:
    """Number of (trainable) parameters of any module."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)
