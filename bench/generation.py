"""Recurrent generation: per-token cost over the sequence, and speed-up over re-running the prefix.

A model in eval mode samples `--tokens` tokens one `step` at a time (batch 1, one fixed SPE code).
Reported, as means over windows of 128 steps (so that the SPE code evaluated once per block of
128 positions is paid for) and medians over `--repeats` runs:

- per-token time over tokens 128-255 and over the last 128 tokens, and their ratio (O(1) per token: ~1);
- the time of one full parallel forward pass over the whole prefix (what a model without recurrent
  state would pay for each new token), and its ratio to one recurrent step at the last token;
- the same for an APE model of the same size (interleaved runs), and the step-time ratio to it.

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
def generate_timed(model: MusicPerformer, length: int, generator: torch.Generator
                   ) -> tuple[torch.Tensor, list[float], object]:
    """Sample `length` tokens; return them (1, length), the seconds of each step, and the positional
    noise."""
    noise = model.draw_positional_noise(length, generator)
    state = model.init_state(1, positional_noise=noise)
    token = torch.zeros(1, dtype=torch.long)
    tokens, seconds = [], []
    for _ in range(length):
        start = time.perf_counter()
        logits, state = model.step(token, state)
        token = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)[:, 0]
        seconds.append(time.perf_counter() - start)
        tokens.append(token)
    return torch.stack(tokens, dim=1), seconds, noise


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

    torch.set_num_threads(args.threads)
    variants = [args.pe] + ([] if args.pe == "ape" else ["ape"])  # APE is the reference
    models = {}
    for pe in variants:
        torch.manual_seed(0)
        cfg = ModelConfig(vocab_size=VOCAB, n_layer=args.layers, n_head=8, d_model=args.d_model,
                          d_ff=4 * args.d_model, pe=pe, attention=args.attention, max_len=args.tokens)
        models[pe] = MusicPerformer(cfg).eval()
    generator = torch.Generator().manual_seed(0)
    early, late, full = ({pe: [] for pe in variants} for _ in range(3))
    for _ in range(args.repeats):  # the variants interleaved, so that drifts hit both
        for pe, model in models.items():
            tokens, seconds, noise = generate_timed(model, args.tokens, generator)
            early[pe].append(statistics.fmean(seconds[args.early - WINDOW // 2: args.early + WINDOW // 2]))
            late[pe].append(statistics.fmean(seconds[-WINDOW:]))
            with torch.no_grad():
                start = time.perf_counter()
                model(tokens, positional_noise=noise)
                full[pe].append(time.perf_counter() - start)
    print(f"{args.layers} layers, d_model {args.d_model}, attention {models[args.pe].attention_kernel}, "
          f"{torch.get_num_threads()} threads, medians of {args.repeats} runs")
    step = {}
    for pe in variants:
        step_early, step_late, forward = (statistics.median(v[pe]) for v in (early, late, full))
        step[pe] = step_late
        print(f"  {pe}: per-token step time {1e3 * step_early:.2f} ms at token {args.early}, "
              f"{1e3 * step_late:.2f} ms at token {args.tokens}: ratio {step_late / step_early:.3f}")
        print(f"  {pe}: full forward over {args.tokens} tokens: {forward:.3f} s = "
              f"{forward / step_late:.0f}x one recurrent step")
    if args.pe != "ape":
        print(f"  {args.pe} / ape, recurrent step at token {args.tokens}: {step[args.pe] / step['ape']:.3f}")


if __name__ == "__main__":
    main()
