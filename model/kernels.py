"""Causal linear-attention kernels behind one signature.

A kernel computes, for feature maps Q, K of shape (B, H, N, M) and values V of shape (B, H, N, E),

    out[b, h, m] = sum_{n <= m} (Q[b, h, m] . K[b, h, n]) V[b, h, n]        -> (B, H, N, E)

without forming the N x N matrix. Two implementations:

- "ft": `fast_transformers.causal_product.causal_dot_product` (compiled CPU/CUDA kernels);
- "torch": a chunked pure-PyTorch version (no compiled code). Inside a chunk of C positions the
  masked C x C products are formed; across chunks an exclusive cumulative sum of K^T V carries the
  past. Cost O(N C (M + E) + N M E), memory O(N (C + M E / C)).
"""

from __future__ import annotations

import logging
import math
from typing import Callable

import torch
import torch.nn.functional as F

logger = logging.getLogger(__name__)

CausalKernel = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]

TORCH_CHUNK = 64  # positions per chunk of the pure-PyTorch kernel


def chunks(chunk: int, *tensors: torch.Tensor) -> list[torch.Tensor]:
    """(B, H, N, X) tensors zero-padded to a multiple of `chunk` positions -> (B, H, G, chunk, X) each."""
    B, H, N, _ = tensors[0].shape
    pad = (-N) % chunk
    return [F.pad(t, (0, 0, 0, pad)).reshape(B, H, (N + pad) // chunk, chunk, t.shape[-1]) for t in tensors]


def causal_dot_product_torch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             chunk: int = TORCH_CHUNK) -> torch.Tensor:
    """Chunked causal linear attention numerator in pure PyTorch (differentiable by autograd)."""
    B, H, N, _ = q.shape
    E = v.shape[-1]
    qc, kc, vc = chunks(chunk, q, k, v)  # (B, H, G, C, M), (B, H, G, C, M), (B, H, G, C, E)
    G = qc.shape[2]
    scores = torch.matmul(qc, kc.transpose(-1, -2)).tril()  # (B, H, G, C, C), causal inside a chunk
    out = torch.matmul(scores, vc)  # (B, H, G, C, E)
    kv = torch.matmul(kc.transpose(-1, -2), vc)  # (B, H, G, M, E), one summary per chunk
    past = kv.cumsum(dim=2) - kv  # (B, H, G, M, E), sum over the chunks strictly before
    out = out + torch.matmul(qc, past)  # (B, H, G, C, E)
    return out.reshape(B, H, G * chunk, E)[:, :, :N]  # (B, H, N, E)


def causal_dot_product_ft(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """fast_transformers' compiled causal_dot_product (raises ImportError without the package)."""
    from fast_transformers.causal_product import causal_dot_product

    return causal_dot_product(q.contiguous(), k.contiguous(), v.contiguous())


def _load_fast_transformers() -> CausalKernel | None:
    """`causal_dot_product_ft`, or None when fast_transformers cannot be imported."""
    try:
        import fast_transformers.causal_product  # noqa: F401
    except ImportError as error:
        logger.debug("fast_transformers unavailable: %s", error)
        return None
    return causal_dot_product_ft


KERNEL_LOADERS: dict[str, Callable[[], CausalKernel | None]] = {
    "ft": _load_fast_transformers,
    "torch": lambda: causal_dot_product_torch,
}


def resolve_kernel(name: str) -> tuple[str, CausalKernel]:
    """(effective name, kernel) for `name`; "ft" falls back to "torch" with a warning."""
    if name not in KERNEL_LOADERS:
        raise ValueError(f"unknown attention kernel {name!r}; choose from {sorted(KERNEL_LOADERS)}")
    kernel = KERNEL_LOADERS[name]()
    if kernel is None:
        logger.warning("attention=%r: fast_transformers cannot be imported, using the pure "
                       "PyTorch kernel 'torch' instead", name)
        return "torch", causal_dot_product_torch
    return name, kernel


def decay_rates(n_head: int, horizon: int, memory_heads: int = 0) -> torch.Tensor:
    """(H,) log decay rates log(gamma_h) of a multi-scale decayed state: the horizons 1 / (1 - gamma_h)
    of the first H - memory_heads heads are spaced geometrically from min(32, horizon) to `horizon`
    tokens, as RetNet's gamma_h = 1 - 2^(-5 - h) are from 32 tokens upwards; the last `memory_heads`
    heads never forget (gamma = 1)."""
    decayed = n_head - memory_heads
    shortest = min(32.0, float(horizon))
    horizons = torch.logspace(math.log10(shortest), math.log10(horizon), decayed, dtype=torch.float64)
    rates = torch.log1p(-1.0 / horizons.clamp_min(1.0 + 1e-6))
    return torch.cat([rates, rates.new_zeros(memory_heads)]).float()


def decayed_causal_product(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_decay: torch.Tensor,
                           past: torch.Tensor | None = None, chunk: int = TORCH_CHUNK
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal linear attention whose state forgets: out and the state after the last position.

        out[m] = sum_{n <= m} gamma^(m - n) (Q[m] . K[n]) V[n] + gamma^(m + 1) Q[m] . past
        state  = gamma^N past + sum_n gamma^(N - 1 - n) K[n]^T V[n]

    q, k: (B, H, N, M); v: (B, H, N, E); log_decay: (H,) log(gamma_h) <= 0; past: (B, H, M, E) or
    None (zeros). Chunked like `causal_dot_product_torch`, with the chunk states carried by a loop
    over the N / C chunks; every power of gamma has an exponent <= 0, so nothing overflows.
    """
    B, H, N, M = q.shape
    E = v.shape[-1]
    a = log_decay.to(q.dtype).view(1, H, 1, 1)  # (1, H, 1, 1)
    if past is None:
        past = q.new_zeros(B, H, M, E)
    if N == 1:  # a generation step: out = Q . state, with the state updated first
        state = torch.exp(a) * past + k.transpose(-1, -2) @ v  # (B, H, M, E)
        return q @ state, state
    positions = torch.arange(N, device=q.device, dtype=q.dtype)  # (N,)
    state = torch.exp(a * N) * past + (k * torch.exp(a * (N - 1 - positions)[:, None])).transpose(-1, -2) @ v
    C = min(chunk, N)
    qc, kc, vc = chunks(C, q, k, v)  # (B, H, G, C, M), (B, H, G, C, M), (B, H, G, C, E)
    G = qc.shape[2]
    local = torch.arange(C, device=q.device, dtype=q.dtype)  # (C,)
    lags = local[:, None] - local[None, :]  # (C, C): i - j
    weights = torch.exp(a[..., None] * lags.clamp_min(0)) * (lags >= 0)  # (1, H, 1, C, C)
    scores = torch.matmul(qc, kc.transpose(-1, -2)) * weights  # (B, H, G, C, C)
    out = torch.matmul(scores, vc)  # (B, H, G, C, E)
    summaries = (kc * torch.exp(a[..., None] * (C - 1 - local)[:, None])).transpose(-1, -2) @ vc  # (B, H, G, M, E)
    carried, states = past, []
    for g in range(G):
        states.append(carried)
        carried = torch.exp(a * C) * carried + summaries[:, :, g]
    before = torch.stack(states, dim=2)  # (B, H, G, M, E): the state before each chunk
    out = out + torch.matmul(qc * torch.exp(a[..., None] * (local + 1)[:, None]), before)  # (B, H, G, C, E)
    return out.reshape(B, H, G * C, E)[:, :, :N], state  # (B, H, N, E), (B, H, M, E)
