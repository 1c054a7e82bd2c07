"""The training objective of a MusicPerformer: next-token cross-entropy with ignored targets."""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100  # target id left out of the loss (padding); torch's cross_entropy default


def token_loss(logits: torch.Tensor, targets: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy of (B, N, V) logits against (B, N) targets, IGNORE_INDEX left out.

    Computed in float32 at least (bf16 logits under autocast are promoted). reduction: "mean" (over
    the targets kept), "sum" (scalars), or "none": the (B, N) NLL per position, 0 where ignored.
    """
    if targets.shape != logits.shape[:-1]:
        raise ValueError(f"targets must have shape {tuple(logits.shape[:-1])}, got {tuple(targets.shape)}")
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX,
                           reduction=reduction)  # (), or (B*N,) when reduction="none"
    return loss.view(targets.shape) if reduction == "none" else loss  # (B, N) per position
