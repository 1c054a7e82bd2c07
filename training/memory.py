"""CPU training: keep freed memory for the next step instead of handing it back to the system.

A training step allocates and frees the same large tensors every time. glibc serves each allocation
above its mmap threshold (at most 32 MiB) with a fresh mapping and unmaps it when freed, so every
step touches new pages again: one page fault, and a page zeroed by the operating system, per 4 KiB
(bench/README.md measures the system time this costs). SPE reuses its codes from step to step, so
this matters mostly for other large per-step allocations. With `reuse_freed_memory()` glibc serves every allocation
from its heap (M_MMAP_MAX = 0) and never trims it (M_TRIM_THRESHOLD = -1): freed blocks are reused
as they are. The price is memory: blocks that no later allocation fits stay resident, and peak
memory crept up by about 10% over the first 200 steps in bench/README.md's measurement (trimming
the heap every 50 steps did not stop it). Hence an opt-in of the training and benchmark entry
points (`train.cpu_allocator=reuse`, `--allocator reuse`), never a library default.
"""

from __future__ import annotations

import ctypes
import logging
import platform

logger = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # mallopt parameters (malloc.h)
M_MMAP_MAX = -4
ALLOCATORS = ("reuse", "system")  # TrainConfig.cpu_allocator choices


def reuse_freed_memory() -> bool:
    """Have glibc keep freed memory in its heap for reuse; False (nothing changed) off glibc."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        logger.debug("not glibc: the system allocator is left as it is")
        return False
    libc = ctypes.CDLL(None)
    done = libc.mallopt(M_MMAP_MAX, 0) == 1 and libc.mallopt(M_TRIM_THRESHOLD, -1) == 1
    if not done:
        logger.warning("glibc refused mallopt(M_MMAP_MAX / M_TRIM_THRESHOLD): allocator left as it is")
    return done
