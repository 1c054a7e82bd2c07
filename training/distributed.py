"""The process group of a data-parallel run (torchrun), and a single process without one."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass
class DistEnv:
    rank: int  # global rank of this process
    local_rank: int  # rank on this machine (selects the GPU)
    world: int  # number of processes

    @classmethod
    def from_environment(cls) -> DistEnv:
        """The torchrun variables (RANK, LOCAL_RANK, WORLD_SIZE), single process without them."""
        return cls(rank=int(os.environ.get("RANK", 0)), local_rank=int(os.environ.get("LOCAL_RANK", 0)),
                   world=int(os.environ.get("WORLD_SIZE", 1)))

    def init(self, device: torch.device) -> None:
        """Join the process group: nccl for CUDA devices, gloo on CPU."""
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def mean(self, values: list[float], device: torch.device) -> list[float]:
        """Average of each value across processes."""
        if self.world == 1:
            return values
        tensor = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(tensor)
        return (tensor / self.world).tolist()

    def total(self, values: list[float], device: torch.device) -> list[float]:
        """Sum of each value across processes."""
        return [v * self.world for v in self.mean(values, device)]

    def gather(self, value: Any) -> list[Any]:
        """`value` of every process, in rank order (in memory only)."""
        if self.world == 1:
            return [value]
        values: list[Any] = [None] * self.world
        dist.all_gather_object(values, value)
        return values
