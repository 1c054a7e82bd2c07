"""Cost of SPE over APE for one training step (forward, backward, Adam): time and peak memory.

Each variant runs in a fresh subprocess (so that ru_maxrss is its own peak); the variants are
interleaved and repeated, and medians are reported. Default setting: 6 layers, d_model 256,
8 heads, d_ff 1024, N = 2048 tokens, batch 2, R = 64, M = 128, gated SPE shared across layers.

    .venv/bin/python -m bench.spe_overhead
    .venv/bin/python -m bench.spe_overhead --repeats 5 --steps 3 --attention torch

Printed: per variant the median step time (wall, CPU, and the system part of CPU with the minor
page faults of a step), peak RSS and peak RSS above the process' baseline (RSS after building the
model and data, before the first step), then the SPE / APE ratios.

With --lockstep STEPS, time only: one fresh process builds every variant's model and steps them in
turn, STEPS rounds after a warm-up round, and prints the median of each round's SPE / APE CPU-time
ratio. A machine whose speed drifts between processes (here by about 0.1 on a ratio) drifts far
less within one round; peak memory cannot be told apart in one process, so it is not printed.

    .venv/bin/python -m bench.spe_overhead --lockstep 9
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from bench.timing import (CONTRACTIONS, VOCAB, add_allocator_option, run_isolated, set_contraction, time_training,
                          training_step, use_allocator)
from model import ModelConfig, MusicPerformer
from model.config import CODE_DTYPES

VARIANTS = ("ape", "sine_spe", "conv_spe")


def worker(spec: dict) -> dict:
    use_allocator(spec["allocator"])
    if "lockstep" in spec:
        return lockstep_worker(spec)
    model, tokens, plain = build(spec, spec["pe"], spec.get("contraction"))
    return time_training(model, tokens, spec["steps"], plain)


def build(spec: dict, pe: str, contraction: str | None) -> tuple[MusicPerformer, torch.Tensor, bool]:
    """The benchmark's model for `pe`, its batch of tokens (B, N + 1) from a fixed seed, and whether
    it runs with spe's kernels off."""
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=VOCAB, n_layer=spec["layers"], n_head=8, d_model=spec["d_model"],
                      d_ff=4 * spec["d_model"], pe=pe, gated=True, share_pe=True,
                      attention=spec["attention"], max_len=spec["length"],
                      code_dtype=spec.get("code_dtype", "float16"))
    model = MusicPerformer(cfg).train()
    plain = set_contraction(model, contraction)
    return model, torch.randint(0, VOCAB, (spec["batch"], spec["length"] + 1)), plain


def lockstep_worker(spec: dict) -> dict:
    """Every variant's model in this process, stepped in turn: {variant: [(wall, CPU) per round]}
    after one warm-up round."""
    steps = {}
    for variant in spec["variants"]:
        pe, _, contraction = variant.partition("@")
        model, tokens, plain = build(spec, pe, contraction or spec["contraction"])
        steps[variant] = training_step(model, tokens, plain)
    times: dict[str, list] = {variant: [] for variant in steps}
    for round_ in range(spec["lockstep"] + 1):
        for variant, step in steps.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            step()
            if round_ > 0:
                times[variant].append((time.perf_counter() - start, time.process_time() - start_cpu))
    return times


def print_lockstep(times: dict, variants: list) -> None:
    """Medians of the lockstep rounds, and of each round's ratio to APE's step in the same round."""
    for variant in variants:
        wall, cpu = (statistics.median(t[i] for t in times[variant]) for i in (0, 1))
        print(f"  {variant:20s} step {wall:.3f} s wall, {cpu:.3f} s CPU")
    for variant in variants[1:]:
        ratios = [t[1] / a[1] for t, a in zip(times[variant], times["ape"])]
        print(f"  {variant} / ape: CPU {statistics.median(ratios):.3f} (median of {len(ratios)} rounds; "
              f"rounds {min(ratios):.3f}-{max(ratios):.3f})")


def _variant(text: str) -> str:
    """argparse type of --variants: PE or PE@CONTRACTION."""
    pe, at, contraction = text.partition("@")
    if pe not in VARIANTS or (at and contraction not in CONTRACTIONS):
        raise argparse.ArgumentTypeError(f"expected one of {VARIANTS}, optionally @ one of {CONTRACTIONS}, "
                                         f"got {text!r}")
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per process")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per variant")
    parser.add_argument("--attention", default="ft", choices=("ft", "torch"))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), type=_variant,
                        help="positional encodings to run (ape, the reference, is always run), each "
                             "optionally with its own contraction: sine_spe@plain, sine_spe@factorised")
    parser.add_argument("--contraction", choices=CONTRACTIONS,
                        help="how SPE applies its code (default: chosen per call; stored: the shared "
                             "code; plain: the same with spe's kernels off; factorised: sine only; "
                             "autograd: the per-layer tuple path, the reference)")
    parser.add_argument("--lockstep", type=int, default=0, metavar="STEPS",
                        help="time only: step every variant in turn in one process, STEPS rounds")
    parser.add_argument("--code-dtype", choices=CODE_DTYPES, default="float16",
                        help="ModelConfig.code_dtype: the precision SPE's shared code is stored in")
    add_allocator_option(parser)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return

    variants = ["ape"] + [v for v in dict.fromkeys(args.variants) if v != "ape"]
    if args.lockstep > 0:
        spec = {"lockstep": args.lockstep, "variants": variants, "layers": args.layers, "d_model": args.d_model,
                "length": args.length, "batch": args.batch, "attention": args.attention,
                "contraction": args.contraction, "allocator": args.allocator, "code_dtype": args.code_dtype}
        print(f"{args.layers} layers, d_model {args.d_model}, N {args.length}, batch {args.batch}, "
              f"attention {args.attention}, allocator {args.allocator}, code {args.code_dtype}, "
              f"{torch.get_num_threads()} threads, one process, {args.lockstep} lockstep rounds")
        print_lockstep(run_isolated(__spec__.name, spec), variants)
        return
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    for _ in range(args.repeats):
        for variant in variants:
            pe, _, contraction = variant.partition("@")
            spec = {"pe": pe, "layers": args.layers, "d_model": args.d_model, "length": args.length,
                    "batch": args.batch, "steps": args.steps, "attention": args.attention,
                    "contraction": contraction or args.contraction, "allocator": args.allocator,
                    "code_dtype": args.code_dtype}
            runs[variant].append(run_isolated(__spec__.name, spec))
    medians = {pe: {key: statistics.median(r[key] for r in rs) for key in rs[0]}
               for pe, rs in runs.items()}
    print(f"{args.layers} layers, d_model {args.d_model}, N {args.length}, batch {args.batch}, "
          f"attention {args.attention}, contraction {args.contraction or 'auto'}, allocator {args.allocator}, "
          f"code {args.code_dtype}, "
          f"{torch.get_num_threads()} threads, "
          f"medians of {args.repeats} processes x {args.steps} steps")
    for pe, m in medians.items():
        print(f"  {pe:20s} step {m['seconds']:.3f} s wall, {m['cpu_seconds']:.3f} s CPU (system "
              f"{m['system_seconds']:.2f} s, {m['page_faults'] / 1000:.0f}k page faults)   peak RSS "
              f"{m['peak_mb']:.0f} MiB, {m['extra_mb']:.0f} MiB above baseline")
    ape = medians["ape"]
    for pe in variants[1:]:
        ratios = {key: medians[pe][key] / ape[key] for key in ("seconds", "cpu_seconds", "peak_mb", "extra_mb")}
        print(f"  {pe} / ape: time {ratios['seconds']:.3f} (CPU {ratios['cpu_seconds']:.3f})   "
              f"peak RSS {ratios['peak_mb']:.3f} (above baseline {ratios['extra_mb']:.3f})")
        # each process against the APE process just before it: the spread a drifting machine gives
        paired = [r["cpu_seconds"] / a["cpu_seconds"] for r, a in zip(runs[pe], runs["ape"])]
        print(f"    CPU ratio per repeat: {' '.join(f'{x:.3f}' for x in paired)} "
              f"(median {statistics.median(paired):.3f})")


if __name__ == "__main__":
    main()
