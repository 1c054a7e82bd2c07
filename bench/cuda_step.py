"""One training step (forward, backward, Adam) on a GPU: SPE's cost over APE, in float32 and under
bf16 autocast, with the stored and the factored sineSPE code.

Default: the paper's width (6 layers, d_model 512, 8 heads, batch 4, N 1024). Each variant builds its
model, takes 3 warm-up steps, then `--steps` timed steps (synchronised); the variants are interleaved
and repeated `--rounds` times, and medians are reported with the peak memory allocated on the device.

    python -m bench.cuda_step
    python -m bench.cuda_step --device cpu --layers 1 --d-model 64 --batch 1 --length 128 --steps 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from bench.timing import VOCAB, training_step
from model import ModelConfig, MusicPerformer

VARIANTS = (("ape", None), ("sine_spe", None), ("sine_spe", "factorised"), ("conv_spe", None))
WARMUP = 3  # untimed steps per variant (allocator, kernels' first launches)


def time_variant(args: argparse.Namespace, pe: str, contraction: str | None, bf16: bool) -> tuple[float, float]:
    """(median seconds per step, peak MiB allocated on a CUDA device, else nan)."""
    device = torch.device(args.device)
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=VOCAB, n_layer=args.layers, n_head=8, d_model=args.d_model,
                      d_ff=4 * args.d_model, pe=pe, gated=True, share_pe=True, attention="torch",
                      max_len=args.length)
    model = MusicPerformer(cfg).to(device).train()
    if cfg.is_spe:
        model.pe.contraction = contraction
    tokens = torch.randint(0, VOCAB, (args.batch, args.length + 1)).to(device)   # (B, N + 1)
    step = training_step(model, tokens)
    cuda = device.type == "cuda"

    def timed() -> float:
        start = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            step()
        if cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter() - start

    for _ in range(WARMUP):
        timed()
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    seconds = statistics.median(timed() for _ in range(args.steps))
    return seconds, torch.cuda.max_memory_allocated(device) / 2**20 if cuda else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per variant and round")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved repetitions of every variant")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("no CUDA device is available (--device cpu times the same steps on the CPU)")
    runs: dict[str, list[tuple[float, float]]] = {}
    for _ in range(args.rounds):
        for precision in ("fp32", "bf16"):
            for pe, contraction in VARIANTS:
                key = f"{pe}@{contraction or 'stored'}/{precision}"
                runs.setdefault(key, []).append(time_variant(args, pe, contraction, precision == "bf16"))
    results = {}
    for key, values in runs.items():
        precision = key.split("/")[1]
        ms = 1e3 * statistics.median(v[0] for v in values)
        ape = 1e3 * statistics.median(v[0] for v in runs[f"ape@stored/{precision}"])
        results[key] = {"ms": ms, "ratio_to_ape": ms / ape, "peak_mib": max(v[1] for v in values)}
        print(f"{key:28} {ms:8.1f} ms/step  {ms / ape:5.2f}x APE  peak {results[key]['peak_mib']:.0f} MiB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": vars(args), "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
