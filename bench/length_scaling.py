"""Training cost per token as the sequence grows, at a fixed number of tokens per batch.

For each length N the batch holds `--tokens` / N sequences, so every step sees the same number of
tokens; a linear-complexity model should cost the same per token at every N. A minimal causal
softmax transformer (same blocks, PyTorch's scaled_dot_product_attention, sinusoidal APE) is
measured alongside for contrast. Every (model, N) runs in a fresh subprocess.

    .venv/bin/python -m bench.length_scaling
    .venv/bin/python -m bench.length_scaling --lengths 1024 4096 16384 --pe ape --skip-softmax
"""

from __future__ import annotations

import argparse
import json
import math
import statistics

import torch
import torch.nn as nn
import torch.nn.functional as F

from bench.timing import (CONTRACTIONS, VOCAB, add_allocator_option, run_isolated, set_contraction, time_training,
                          use_allocator)
from model import ModelConfig, MusicPerformer, token_loss
from model.positional import sinusoids


class SoftmaxBlock(nn.Module):
    """Pre-LN block with exact causal softmax attention."""

    def __init__(self, d_model: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.ln_attn, self.ln_mlp = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv, self.proj = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                 nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        q, k, v = self.qkv(self.ln_attn(x)).view(B, N, 3, self.n_head, C // self.n_head).unbind(2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=True)  # (B, H, N, D)
        x = x + self.proj(y.transpose(1, 2).reshape(B, N, C))
        return x + self.mlp(self.ln_mlp(x))


class SoftmaxTransformer(nn.Module):
    """Minimal causal softmax transformer language model (the quadratic baseline)."""

    def __init__(self, layers: int, d_model: int, n_head: int = 8) -> None:
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, d_model)
        self.blocks = nn.ModuleList([SoftmaxBlock(d_model, n_head) for _ in range(layers)])
        self.ln_f, self.head = nn.LayerNorm(d_model), nn.Linear(d_model, VOCAB, bias=False)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """MusicPerformer's interface: (B, N) ids -> (B, N, V) logits, and the loss given targets."""
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.embedding(tokens) * math.sqrt(self.embedding.embedding_dim)
        x = x + sinusoids(positions, self.embedding.embedding_dim).to(x.dtype)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))  # (B, N, V)
        return logits, None if targets is None else token_loss(logits, targets)


def worker(spec: dict) -> dict:
    use_allocator(spec["allocator"])
    torch.manual_seed(0)
    if spec["model"] == "softmax":
        model = SoftmaxTransformer(spec["layers"], spec["d_model"])
    else:
        cfg = ModelConfig(vocab_size=VOCAB, n_layer=spec["layers"], n_head=8,
                          d_model=spec["d_model"], d_ff=4 * spec["d_model"], pe=spec["pe"],
                          attention=spec["attention"], max_len=spec["length"])
        model = MusicPerformer(cfg)
    plain = set_contraction(model, spec.get("contraction"))
    tokens = torch.randint(0, VOCAB, (spec["tokens"] // spec["length"], spec["length"] + 1))
    return time_training(model.train(), tokens, spec["steps"], plain)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pe", default="sine_spe")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=16384, help="tokens per batch")
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 16384])
    parser.add_argument("--steps", type=int, default=2, help="timed steps per process")
    parser.add_argument("--repeats", type=int, default=2, help="fresh processes per point")
    parser.add_argument("--attention", default="ft", choices=("ft", "torch"))
    parser.add_argument("--contraction", choices=CONTRACTIONS,
                        help="how SPE applies its code (default: chosen per call; see bench/README)")
    parser.add_argument("--skip-softmax", action="store_true")
    add_allocator_option(parser)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    for length in args.lengths:
        if args.tokens % length:
            parser.error(f"--tokens ({args.tokens}) must be a multiple of every length ({length})")

    models = ["performer"] + ([] if args.skip_softmax else ["softmax"])
    results: dict[tuple[str, int], list[dict]] = {(m, n): [] for m in models for n in args.lengths}
    for _ in range(args.repeats):
        for key in results:
            spec = {"model": key[0], "length": key[1], "pe": args.pe, "layers": args.layers,
                    "d_model": args.d_model, "tokens": args.tokens, "steps": args.steps,
                    "attention": args.attention, "contraction": args.contraction,
                    "allocator": args.allocator}
            results[key].append(run_isolated(__spec__.name, spec))
    print(f"{args.layers} layers, d_model {args.d_model}, {args.tokens} tokens per batch, performer "
          f"pe {args.pe} attention {args.attention}, contraction {args.contraction or 'auto'}, "
          f"allocator {args.allocator}, "
          f"{torch.get_num_threads()} threads, medians of "
          f"{args.repeats} processes x {args.steps} steps")
    shortest, longest = min(args.lengths), max(args.lengths)
    for name in models:
        per_token = {}
        for length in args.lengths:
            runs = results[(name, length)]
            wall = statistics.median(r["seconds"] for r in runs) / args.tokens
            cpu = statistics.median(r["cpu_seconds"] for r in runs) / args.tokens
            peak = statistics.median(r["peak_mb"] for r in runs)
            per_token[length] = (wall, cpu)
            print(f"  {name:9s} N {length:6d}: {1e6 * wall:8.1f} us/token wall, {1e6 * cpu:8.1f} "
                  f"us/token CPU, peak RSS {peak:.0f} MiB")
        wall_ratio = per_token[longest][0] / per_token[shortest][0]
        cpu_ratio = per_token[longest][1] / per_token[shortest][1]
        print(f"  {name}: time per token N {longest} / N {shortest} = {wall_ratio:.3f} "
              f"(CPU {cpu_ratio:.3f})")


if __name__ == "__main__":
    main()
