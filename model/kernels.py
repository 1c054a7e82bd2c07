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
from typing import Callable

import torch
import torch.nn.functional as F

logger = logging.getLogger(__name__)

CausalKernel = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]

TORCH_CHUNK = 64  # positions per chunk of the pure-PyTorch kernel


def causal_dot_product_torch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             chunk: int = TORCH_CHUNK) -> torch.Tensor:
    """Chunked causal linear attention numerator in pure PyTorch (differentiable by autograd)."""
    B, H, N, M = q.shape
    E = v.shape[-1]
    pad = (-N) % chunk
    if pad:
        q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
    G = (N + pad) // chunk
    qc = q.reshape(B, H, G, chunk, M)  # (B, H, G, C, M)
    kc = k.reshape(B, H, G, chunk, M)  # (B, H, G, C, M)
    vc = v.reshape(B, H, G, chunk, E)  # (B, H, G, C, E)
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
