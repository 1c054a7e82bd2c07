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
from contextlib import nullcontext
from pathlib import Path
from typing import Callable

import torch

from spe import kernels
from training.memory import ALLOCATORS, reuse_freed_memory

VOCAB = 340  # about the REMI vocabulary
# StochasticPE.contraction choices, and "plain": the stored code with spe's kernels off (spe.kernels.plain)
CONTRACTIONS = ("stored", "plain", "factorised", "autograd")
REPO = Path(__file__).resolve().parent.parent  # the repository root (workers run from there)


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def set_contraction(model: torch.nn.Module, contraction: str | None) -> bool:
    """Apply a --contraction value to an SPE model; returns whether its steps must run with spe's
    kernels off ("plain")."""
    if getattr(model, "cfg", None) is not None and model.cfg.is_spe:
        model.pe.contraction = "stored" if contraction == "plain" else contraction
    return contraction == "plain"


def training_step(model: torch.nn.Module, tokens: torch.Tensor, plain: bool = False) -> Callable[[], None]:
    """One Adam step of `model` on `tokens` (B, N + 1), as a function (the optimizer is made here);
    plain: with spe's kernels off."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)

    def step() -> None:
        with kernels.plain() if plain else nullcontext():
            _, loss = model(tokens[:, :-1], tokens[:, 1:])
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def time_training(model: torch.nn.Module, tokens: torch.Tensor, steps: int, plain: bool = False) -> dict[str, float]:
    """Median wall and CPU seconds of a training step on `tokens` (B, N + 1) after one warm-up
    step, the system part of the CPU time and the minor page faults per step, and peak memory. CPU
    time (all threads of this process) is less disturbed than wall time by other processes sharing
    the cores."""
    baseline = peak_rss_mb()
    train_step = training_step(model, tokens, plain)
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


