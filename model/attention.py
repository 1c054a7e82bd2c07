"""Causal FAVOR+ attention and the pre-LayerNorm transformer block, parallel and recurrent.

Parallel (training, teacher forcing):

    out(m) = phi(q_m)^T S_m / phi(q_m)^T z_m,   S_m = sum_{n<=m} phi(k_n) v_n^T,   z_m = sum_{n<=m} phi(k_n)

computed by one causal kernel call on values extended with a column of ones (the last output
column is then the denominator). Recurrent (generation): the layer carries [S | z] per head,
O(M E) memory and time per token whatever the position.
"""

from __future__ import annotations

from dataclasses import dataclass
import torch
import torch.nn as nn
import torch.nn.functional as F

from model.config import ModelConfig
from model.favor import FavorFeatures
from model.kernels import CausalKernel, decay_rates, decayed_causal_product
from model.positional import PositionalContext, PositionalEncoding


@dataclass
class LayerState:
    kv: torch.Tensor  # (B, H, M, D + 1): [S | z] scaled by exp(-offset)
    offset: torch.Tensor  # (B, H, 1, 1): running max of the keys' log-features (-inf at start)


class CausalLinearAttention(nn.Module):
    """Multi-head causal attention with FAVOR+ features and a positional encoding."""

    def __init__(self, cfg: ModelConfig, layer: int, qk_dims: int, kernel: CausalKernel) -> None:
        super().__init__()
        self.layer = layer  # index of this layer, handed to the positional encoding
        self.n_head = cfg.n_head
        self.head_dim = cfg.head_dim
        self.qk_scale = qk_dims ** -0.25  # 1/sqrt(D) (or 1/sqrt(R) for SPE) split over q and k
        self.kernel = kernel
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.dropout = nn.Dropout(cfg.dropout)
        self.features = FavorFeatures(qk_dims, cfg.feature_dims)
        # (H,) log(gamma_h) of a decayed state (cfg.decay_horizon), None without decay; from the config
        self.register_buffer("log_decay", decay_rates(cfg.n_head, cfg.decay_horizon, cfg.memory_heads)
                             if cfg.decay_horizon else None, persistent=False)

    def inputs(self, x: torch.Tensor, pe: PositionalEncoding, context: PositionalContext
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Feature-map inputs of queries and keys (B, H, N, F) and values (B, H, N, D)."""
        B, N, _ = x.shape
        q, k, v = self.qkv(x).view(B, N, 3, self.n_head, self.head_dim).unbind(dim=2)  # (B, N, H, D)
        # scaled before the positional encoding, which is linear in q and k (SPE: on D features, not R)
        q, k = pe.queries_keys(self.layer, q * self.qk_scale, k * self.qk_scale, context)  # (B, N, H, F) each
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, H, N, F), (B, H, N, F), (B, H, N, D)

    def forward(self, x: torch.Tensor, pe: PositionalEncoding, context: PositionalContext
                ) -> torch.Tensor:
        """(B, N, d_model) -> (B, N, d_model), position m attending to positions <= m."""
        B, N, C = x.shape
        q, k, v = self.inputs(x, pe, context)
        phi_q = self.features.queries(q)  # (B, H, N, M)
        phi_k, _ = self.features.keys(k)  # (B, H, N, M)
        values = F.pad(v, (0, 1), value=1.0)  # (B, H, N, D + 1)
        if self.log_decay is None:
            out = self.kernel(phi_q, phi_k, values)  # (B, H, N, D + 1)
        else:
            out, _ = decayed_causal_product(phi_q, phi_k, values, self.log_decay)  # (B, H, N, D + 1)
        y = out[..., :-1] / out[..., -1:].clamp_min(torch.finfo(out.dtype).tiny)  # (B, H, N, D)
        y = y.transpose(1, 2).reshape(B, N, C)  # (B, N, d_model)
        return self.dropout(self.proj(y))

    def step(self, x: torch.Tensor, pe: PositionalEncoding, context: PositionalContext,
             state: LayerState) -> tuple[torch.Tensor, LayerState]:
        """The N positions after `state`: (B, N, d_model) -> (B, N, d_model) and the updated state.
        One position is a generation step; a chunk of them (a prompt read at once) attends causally
        within the chunk and to the state's past."""
        B, N, C = x.shape
        q, k, v = self.inputs(x, pe, context)  # (B, H, N, F), (B, H, N, F), (B, H, N, D)
        phi_q = self.features.queries(q)  # (B, H, N, M)
        phi_k, offset = self.features.keys(k, state.offset)  # (B, H, N, M), (B, H, 1, 1)
        values = F.pad(v, (0, 1), value=1.0)  # (B, H, N, D + 1)
        past = state.kv * torch.exp(state.offset - offset)  # (B, H, M, D + 1), rescaled to the new offset
        if self.log_decay is not None:
            out, kv = decayed_causal_product(phi_q, phi_k, values, self.log_decay, past)
        else:
            kv = past + phi_k.transpose(-1, -2) @ values  # (B, H, M, D + 1)
            if N == 1:
                out = phi_q @ kv  # (B, H, 1, D + 1)
            else:
                out = self.kernel(phi_q, phi_k, values) + phi_q @ past  # (B, H, N, D + 1)
        y = out[..., :-1] / out[..., -1:].clamp_min(torch.finfo(out.dtype).tiny)  # (B, H, N, D)
        y = y.transpose(1, 2).reshape(B, N, C)  # (B, N, d_model)
        return self.dropout(self.proj(y)), LayerState(kv=kv, offset=offset)

    def initial_state(self, batch_size: int, like: torch.Tensor) -> LayerState:
        """Empty state (no key seen yet) with the dtype and device of `like`."""
        shape = (batch_size, self.n_head, self.features.num_features, self.head_dim + 1)
        kv = torch.zeros(shape, dtype=like.dtype, device=like.device)
        offset = torch.full((batch_size, self.n_head, 1, 1), float("-inf"), dtype=like.dtype,
                            device=like.device)
        return LayerState(kv=kv, offset=offset)

    def attention_map(self, x: torch.Tensor, pe: PositionalEncoding, context: PositionalContext
                      ) -> torch.Tensor:
        """Unnormalised causal attention phi(q) phi(k)^T, masked: (B, H, N, N) in float64."""
        q, k, _ = self.inputs(x, pe, context)
        scores = self.features.exact(q) @ self.features.exact(k).transpose(-1, -2)  # (B, H, N, N)
        if self.log_decay is not None:
            lags = torch.arange(q.shape[2], device=q.device)
            lags = (lags[:, None] - lags[None, :]).clamp_min(0).double()  # (N, N)
            scores = scores * torch.exp(self.log_decay.double().view(-1, 1, 1) * lags)
        return scores.tril()


class MLP(nn.Module):
    """Position-wise d_model -> d_ff -> d_model with GELU."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, cfg.d_ff)
        self.proj = nn.Linear(cfg.d_ff, cfg.d_model)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.proj(F.gelu(self.fc(x))))


class Block(nn.Module):
    """Pre-LayerNorm block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: ModelConfig, layer: int, qk_dims: int, kernel: CausalKernel) -> None:
        super().__init__()
        self.ln_attn = nn.LayerNorm(cfg.d_model)
        self.attn = CausalLinearAttention(cfg, layer, qk_dims, kernel)
        self.ln_mlp = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, pe: PositionalEncoding, context: PositionalContext
                ) -> torch.Tensor:
        x = x + self.attn(self.ln_attn(x), pe, context)
        return x + self.mlp(self.ln_mlp(x))

    def step(self, x: torch.Tensor, pe: PositionalEncoding, context: PositionalContext,
             state: LayerState) -> tuple[torch.Tensor, LayerState]:
        attended, state = self.attn.step(self.ln_attn(x), pe, context, state)
        x = x + attended
        return x + self.mlp(self.ln_mlp(x)), state
