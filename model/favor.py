"""FAVOR+ positive orthogonal random features (Choromanski et al., 2021), numerically stabilised.

    phi(x) = exp(w_i . x - |x|^2 / 2) / sqrt(M),   i = 1..M,   E[phi(q) . phi(k)] = exp(q . k)

The rows w_i are blocks of random orthogonal directions with chi-distributed norms (so each row is
marginally Gaussian). They are a buffer: fixed until `redraw()`.

Stabilisation. Attention only uses the ratio phi(q)^T S / phi(q)^T z, which is unchanged when every
query feature vector is multiplied by its own constant, or when all keys of a (batch, head) share a
constant. So queries subtract their own max over features, and keys subtract one max per (batch,
head) over positions and features (parallel mode), or a running max whose changes rescale the
recurrent state (recurrent mode). The ratio stays exact; only rounding differs.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn


def orthogonal_gaussian(num_features: int, in_dims: int,
                        generator: torch.Generator | None = None) -> torch.Tensor:
    """(num_features, in_dims) random matrix: orthogonal blocks, rows with chi(in_dims) norms."""
    blocks = math.ceil(num_features / in_dims)
    gaussian = torch.randn(blocks, in_dims, in_dims, generator=generator)
    q, r = torch.linalg.qr(gaussian)  # (blocks, F, F), orthonormal columns
    q = q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))[:, None, :]  # Haar (unbiased) signs
    directions = q.transpose(-1, -2).reshape(blocks * in_dims, in_dims)[:num_features]  # (M, F)
    norms = torch.randn(num_features, in_dims, generator=generator).norm(dim=1)  # (M,)
    return directions * norms[:, None]


class FavorFeatures(nn.Module):
    """Positive random feature map R^F -> R^M, applied on the last dimension."""

    def __init__(self, in_dims: int, num_features: int) -> None:
        super().__init__()
        self.in_dims = in_dims
        self.num_features = num_features
        self.register_buffer("projection", orthogonal_gaussian(num_features, in_dims))  # (M, F)

    @torch.no_grad()
    def redraw(self, generator: torch.Generator | None = None) -> None:
        """Draw new random features (in place)."""
        fresh = orthogonal_gaussian(self.num_features, self.in_dims, generator)
        self.projection.copy_(fresh.to(self.projection))

    def log_features(self, x: torch.Tensor) -> torch.Tensor:
        """log phi(x): (..., F) -> (..., M)."""
        if x.shape[-1] != self.in_dims:
            raise ValueError(f"feature map expects last dimension {self.in_dims}, got {tuple(x.shape)}")
        projected = torch.matmul(x, self.projection.T.to(x.dtype))  # (..., M)
        squared = 0.5 * x.square().sum(dim=-1, keepdim=True)  # (..., 1)
        return projected - (squared + 0.5 * math.log(self.num_features))

    def queries(self, x: torch.Tensor) -> torch.Tensor:
        """phi(x) divided by its own max over features: (..., F) -> (..., M)."""
        logits = self.log_features(x)
        return torch.exp(logits - logits.amax(dim=-1, keepdim=True).detach())

    def keys(self, x: torch.Tensor, offset: torch.Tensor | None = None
             ) -> tuple[torch.Tensor, torch.Tensor]:
        """phi(x) / exp(offset) for keys (B, H, N, F) -> ((B, H, N, M), offset (B, H, 1, 1)).

        The offset is the max of log phi over positions and features of each (batch, head); with
        a previous `offset` (recurrent mode) it is the running max, never lower than before.
        """
        logits = self.log_features(x)  # (B, H, N, M)
        new_offset = logits.detach().amax(dim=(-2, -1), keepdim=True)  # (B, H, 1, 1)
        if offset is not None:
            new_offset = torch.maximum(new_offset, offset)
        return torch.exp(logits - new_offset), new_offset

    def exact(self, x: torch.Tensor) -> torch.Tensor:
        """Unstabilised phi(x), computed in float64 (for inspecting attention maps)."""
        return torch.exp(self.log_features(x.double()))
