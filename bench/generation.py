"""Recurrent generation: per-token cost over the sequence, and speed-up over re-running the prefix.

A model in eval mode samples `--tokens` tokens one `step` at a time (batch 1, one fixed SPE code),
in lockstep with an APE model of the same size: at every position each model takes its step (which
one goes first alternates), so that the machine's drifts, which move single-thread step times by
up to 30-40% between runs here, hit both alike. Reported, medians over `--repeats` runs:

- per-token step time over the 128 tokens around `--early` and over the last 128 tokens, and their
  ratio (O(1) per token: ~1); windows of whole 128-position blocks, so that the SPE code evaluated
  once per block is paid for;
- SPE / APE step time at the end (last 128 tokens) and over the whole run after the first two blocks
  (the median over 128-token blocks of the per-block ratio);
- one full parallel forward pass over the whole prefix (what a model without recurrent state would
  pay for each new token), and its ratio to one recurrent step at the last token.

Both use the same number of threads (default 1).

    .venv/bin/python -m bench.generation
    .venv/bin/python -m bench.generation --pe conv_spe --tokens 3072 --layers 24 --d-model 512
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from bench.timing import VOCAB
from model import ModelConfig, MusicPerformer

WINDOW = 128  # steps per timing window (a whole block of SPE code evaluation: model.positional.CODE_BLOCK)


@torch.no_grad()
def generate_lockstep(models: dict[str, MusicPerformer], length: int, seed: int
                      ) -> dict[str, tuple[torch.Tensor, list[float], object]]:
    """Sample `length` tokens with every model, one position at a time for all of them; per model the
    tokens (1, length), the seconds of each step, and the positional noise."""
    runs = {}
    for name, model in models.items():
        generator = torch.Generator().manual_seed(seed)  # each model samples as if it ran alone
        noise = model.draw_positional_noise(length, generator)
        runs[name] = {"generator": generator, "noise": noise, "state": model.init_state(1, positional_noise=noise),
                      "token": torch.zeros(1, dtype=torch.long), "tokens": [], "seconds": []}
    order = list(models)
    for position in range(length):
        for name in (order if position % 2 == 0 else order[::-1]):
            run, model = runs[name], models[name]
            start = time.perf_counter()
            logits, run["state"] = model.step(run["token"], run["state"])
            run["token"] = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=run["generator"])[:, 0]
            run["seconds"].append(time.perf_counter() - start)
            run["tokens"].append(run["token"])
    return {name: (torch.stack(run["tokens"], dim=1), run["seconds"], run["noise"]) for name, run in runs.items()}


def block_ratio(numerator: list[float], denominator: list[float]) -> float:
    """Median over whole 128-step blocks (from the third on) of the ratio of the blocks' total times."""
    blocks = range(2 * WINDOW, len(numerator) - WINDOW + 1, WINDOW)
    return statistics.median(sum(numerator[b:b + WINDOW]) / sum(denominator[b:b + WINDOW]) for b in blocks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pe", default="sine_spe")
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=3072)
    parser.add_argument("--early", type=int, default=192, help="early position to compare with")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--attention", default="ft", choices=("ft", "torch"))
    parser.add_argument("--threads", type=int, default=1,
                        help="intra-op threads (steps are tiny ops: on shared cores more threads "
                             "mostly add synchronisation stalls)")
    args = parser.parse_args()
    if args.tokens < 3 * WINDOW:
        parser.error(f"--tokens must be at least {3 * WINDOW} (two blocks of warm-up and one measured)")

    torch.set_num_threads(args.threads)
    variants = [args.pe] + ([] if args.pe == "ape" else ["ape"])  # APE is the reference
    models = {}
    for pe in variants:
        torch.manual_seed(0)
        cfg = ModelConfig(vocab_size=VOCAB, n_layer=args.layers, n_head=8, d_model=args.d_model,
                          d_ff=4 * args.d_model, pe=pe, attention=args.attention, max_len=args.tokens)
        models[pe] = MusicPerformer(cfg).eval()
    early, late, full, whole = ({pe: [] for pe in variants} for _ in range(4))
    for repeat in range(args.repeats):
        runs = generate_lockstep(models, args.tokens, seed=repeat)
        for pe, (tokens, seconds, noise) in runs.items():
            early[pe].append(statistics.fmean(seconds[args.early - WINDOW // 2: args.early + WINDOW // 2]))
            late[pe].append(statistics.fmean(seconds[-WINDOW:]))
            whole[pe].append(block_ratio(seconds, runs["ape"][1]))
            with torch.no_grad():
                start = time.perf_counter()
                models[pe](tokens, positional_noise=noise)
                full[pe].append(time.perf_counter() - start)
    print(f"{args.layers} layers, d_model {args.d_model}, attention {models[args.pe].attention_kernel}, "
          f"{torch.get_num_threads()} threads, models stepped in lockstep, medians of {args.repeats} runs")
    step = {}
    for pe in variants:
        step_early, step_late, forward = (statistics.median(v[pe]) for v in (early, late, full))
        step[pe] = step_late
        print(f"  {pe}: per-token step time {1e3 * step_early:.2f} ms at token {args.early}, "
              f"{1e3 * step_late:.2f} ms at token {args.tokens}: ratio {step_late / step_early:.3f}")
        print(f"  {pe}: full forward over {args.tokens} tokens: {forward:.3f} s = "
              f"{forward / step_late:.0f}x one recurrent step")
    if args.pe != "ape":
        print(f"  {args.pe} / ape, recurrent step at token {args.tokens}: {step[args.pe] / step['ape']:.3f}; "
              f"over every 128-token block after the first two (median): {statistics.median(whole[args.pe]):.3f} "
              f"(runs: {', '.join(f'{r:.3f}' for r in whole[args.pe])})")


if __name__ == "__main__":
    main()
