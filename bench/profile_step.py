"""torch.profiler summary of one training step (forward, backward, Adam): where the time goes.

    .venv/bin/python -m bench.profile_step --pe sine_spe
    .venv/bin/python -m bench.profile_step --pe ape --layers 6 --d-model 512 --batch 4 --length 1024

Prints the operators with the most self CPU time (after one warm-up step), and the step's total.
"""

from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

from bench.timing import CONTRACTIONS, VOCAB, add_allocator_option, set_contraction, training_step, use_allocator
from model import ModelConfig, MusicPerformer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pe", default="sine_spe")
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--contraction", choices=CONTRACTIONS)
    parser.add_argument("--rows", type=int, default=15, help="operators to list")
    add_allocator_option(parser)
    args = parser.parse_args()
    use_allocator(args.allocator)

    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=VOCAB, n_layer=args.layers, n_head=8, d_model=args.d_model,
                      d_ff=4 * args.d_model, pe=args.pe, max_len=args.length)
    model = MusicPerformer(cfg).train()
    plain = set_contraction(model, args.contraction)
    step = training_step(model, torch.randint(0, VOCAB, (args.batch, args.length + 1)), plain)
    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    averages = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in averages) / 1e6
    print(f"{args.pe}, {args.layers} layers, d_model {args.d_model}, N {args.length}, batch "
          f"{args.batch}: {total:.2f} s self CPU time in one step ({torch.get_num_threads()} threads)")
    print(averages.table(sort_by="self_cpu_time_total", row_limit=args.rows, max_name_column_width=40))


if __name__ == "__main__":
    main()
