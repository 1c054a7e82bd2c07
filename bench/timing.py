"""What the benchmarks share: fresh-process workers, the timed training step and peak memory.

Run the benchmarks as modules from the repository root (`python -m bench.spe_overhead`), so that
they import this one as `bench.timing`.
"""

from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import torch

from training.memory import ALLOCATORS, reuse_freed_memory

VOCAB = 340  # about the REMI vocabulary
CONTRACTIONS = ("compiled", "torch", "factorised", "autograd")  # StochasticPE.contraction choices
REPO = Path(__file__).resolve().parent.parent  # the repository root (workers run from there)


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def training_step(model: torch.nn.Module, tokens: torch.Tensor) -> Callable[[], None]:
    """One Adam step of `model` on `tokens` (B, N + 1), as a function (the optimizer is made here)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)

    def step() -> None:
        _, loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def time_training(model: torch.nn.Module, tokens: torch.Tensor, steps: int) -> dict[str, float]:
    """Median wall and CPU seconds of a training step on `tokens` (B, N + 1) after one warm-up
    step, the system part of the CPU time and the minor page faults per step, and peak memory. CPU
    time (all threads of this process) is less disturbed than wall time by other processes sharing
    the cores."""
    baseline = peak_rss_mb()
    train_step = training_step(model, tokens)
    train_step()
    wall, cpu, system, faults = [], [], [], []
    for _ in range(steps):
        before = resource.getrusage(resource.RUSAGE_SELF)
        start, start_cpu = time.perf_counter(), time.process_time()
        train_step()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        after = resource.getrusage(resource.RUSAGE_SELF)
        system.append(after.ru_stime - before.ru_stime)
        faults.append(after.ru_minflt - before.ru_minflt)
    peak = peak_rss_mb()
    return {"seconds": statistics.median(wall), "cpu_seconds": statistics.median(cpu),
            "system_seconds": statistics.median(system), "page_faults": statistics.median(faults),
            "peak_mb": peak, "extra_mb": peak - baseline}


def add_allocator_option(parser) -> None:
    """--allocator, for the scripts that time training steps in worker processes."""
    parser.add_argument("--allocator", choices=ALLOCATORS, default="system",
                        help="CPU allocator of the timed processes: system (glibc's defaults, as "
                             "train.py by default) or reuse (glibc keeps freed memory for the next "
                             "step, as train.py with train.cpu_allocator=reuse; training/memory.py)")


def use_allocator(name: str) -> None:
    """Set up the process' allocator as named by --allocator (call before building the model)."""
    if name == "reuse":
        reuse_freed_memory()


def run_isolated(module: str, spec: dict) -> dict:
    """Run `python -m module --worker JSON` in a fresh interpreter (from the repository root) and
    parse the JSON it prints last."""
    result = subprocess.run([sys.executable, "-m", module, "--worker", json.dumps(spec)], cwd=REPO,
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"worker {spec} failed:\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


