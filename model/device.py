"""Where a model runs: one resolver for every command (single process or one rank of several)."""

from __future__ import annotations

import torch

DEVICE_NAMES = ("auto", "cpu", "cuda")


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """auto -> cuda when available, else cpu; cuda -> GPU local_rank (modulo the GPUs present).

    cuda without a GPU, or a name outside DEVICE_NAMES, is a ValueError.
    """
    if name not in DEVICE_NAMES:
        raise ValueError(f"unknown device {name!r}; choose from {DEVICE_NAMES}")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ValueError("device cuda was asked for but no CUDA device is available")
    return torch.device("cuda", local_rank % torch.cuda.device_count())
