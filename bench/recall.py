"""Fit and measure recall: the copy cache mixed into a model's next-token distribution (generation.recall).

    python -m bench.recall --checkpoint pop909_infill --write      # fit on valid, measure on test, store

The model reads every song of the fit split (valid) and of the measured split (test) once, teacher-
forced from its start (one seeded forward pass, as `evaluate.py form` reads songs); the copy cache is
traced along each song. Per recall order, the weight that minimises the fit split's NLL is chosen
(`generation.recall.fit_weights`); the measured split, never seen by the fit, gives:

* per order: the share of tokens whose longest earlier key has that order, the fitted weight, and the
  NLL (nats per token) of those tokens without and with recall;
* the NLL of all tokens, and along the song (tokens 0-1k, 1-2k, 2-4k, 4k-), without and with recall;
* recall_along.png: both NLLs along the song, averaged over the songs that reach each position.

`--timing N` only times sampling instead: N new tokens from nothing with the checkpoint's sampling
defaults, without its recall, and plain (no recall, no end schedule, no token bias or nucleus exemption:
the model's bare step), the three decoders writing 32 tokens in turn (lockstep), for --rounds rounds on
one thread (same seed, so all draw the same noise); prints the time per token of each and the ratios.

`--write` stores the weights, orders and lag in the checkpoint's sampling defaults (meta.json:
generate.recall_weights, recall_orders, recall_min_lag), so that every front door samples with them.
Writes recall.md in --out and prints it.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from bench import checked_corpus, save_figure
from evaluation.form import token_nll
from generation.recall import MIN_LAG, ORDERS, KeyTokens, Trace, concat, fit_weights, mixture_nll, trace
from generation.request import GenerationRequest
from training.checkpoint import load_model, set_generate_defaults

WINDOWS = ((0, 1000), (1000, 2000), (2000, 4000), (4000, None))  # token ranges of the along table
SMOOTH = 256  # tokens per point of the plot


def traces(model: torch.nn.Module, pieces: Sequence[np.ndarray], orders: Sequence[int], keys: KeyTokens,
           min_lag: int, seed: int, desc: str) -> list[Trace]:
    """One `Trace` per piece: the model's probability of each next token and the copy cache's."""
    out = []
    for ids in tqdm(pieces, desc=desc, unit="song"):
        ids = [int(t) for t in ids]
        p_model = np.exp(-token_nll(model, ids, seed))  # (L - 1,)
        out.append(trace(ids, p_model, orders, keys, min_lag))
    return out


def report(measured: list[Trace], weights: Sequence[float], orders: Sequence[int], title: str) -> str:
    """The markdown tables of the module docstring."""
    every = concat(measured)
    plain, mixed = -np.log(every.p_model), mixture_nll(every, weights)
    lines = [title, "", "| longest earlier key (kept tokens) | share of tokens | weight | NLL plain | NLL recall |",
             "|---|---:|---:|---:|---:|"]
    for index, order in enumerate(orders):
        at = every.order == index
        if at.any():
            lines.append(f"| {order} | {at.mean():.3f} | {weights[index]:.2f} | {plain[at].mean():.3f} | "
                         f"{mixed[at].mean():.3f} |")
    none = every.order < 0
    lines.append(f"| none | {none.mean():.3f} | - | {plain[none].mean():.3f} | {mixed[none].mean():.3f} |")
    lines.append(f"| **all** | 1 | | **{plain.mean():.3f}** | **{mixed.mean():.3f}** |")
    lines += ["", "| tokens of the song | songs | NLL plain | NLL recall |", "|---|---:|---:|---:|"]
    for low, high in WINDOWS:
        parts = [(t.p_model[low:high], mixture_nll(t, weights)[low:high]) for t in measured if len(t.p_model) > low]
        if not parts:
            continue
        p = -np.log(np.concatenate([a for a, _ in parts]))
        m = np.concatenate([b for _, b in parts])
        name = f"{low}-{high}" if high is not None else f"{low}-"
        lines.append(f"| {name} | {len(parts)} | {p.mean():.3f} | {m.mean():.3f} |")
    return "\n".join(lines) + "\n"


def plot(measured: list[Trace], weights: Sequence[float], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    longest = max(len(t.p_model) for t in measured)
    points = math.ceil(longest / SMOOTH)
    sums = np.zeros((2, points))
    counts = np.zeros(points)
    for t in measured:
        for row, nll in enumerate((-np.log(t.p_model), mixture_nll(t, weights))):
            for k in range(math.ceil(len(nll) / SMOOTH)):
                sums[row, k] += nll[k * SMOOTH:(k + 1) * SMOOTH].mean()
        counts[:math.ceil(len(t.p_model) / SMOOTH)] += 1
    enough = counts >= 3  # points averaged over at least 3 songs
    x = (np.arange(points) + 0.5) * SMOOTH
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for row, label in enumerate(("model alone", "model + recall")):
        ax.plot(x[enough], sums[row, enough] / counts[enough], label=label)
    ax.set_xlabel("token position in the song")
    ax.set_ylabel(f"NLL (nats/token, mean of {SMOOTH})")
    ax.set_title(f"held-out songs ({len(measured)}): what recall saves along the song", fontsize=10)
    ax.legend()
    save_figure(fig, path)


LOCKSTEP = 32  # tokens each decoder writes in turn when timed in lockstep


def timing(ckpt, tokens: int, rounds: int, seed: int) -> str:
    """Seconds per generated token plain, without recall and with the checkpoint's defaults: in each
    round, the three decoders of one request (same seed) write LOCKSTEP tokens in turn, so the machine's
    drift falls on all alike; medians of the rounds' times and ratios."""
    labels = ("plain (no recall, end schedule or token bias)", "defaults without recall", "defaults")
    rows = []
    for _ in tqdm(range(rounds), desc="timing", unit="round"):
        decoders = []
        for recall in (False, False, True):
            request = GenerationRequest(tokens=tokens, seed=seed, end=False, recall=recall)
            plan = request.plan(ckpt, request.check())
            if not decoders:
                plan = replace(plan, sampling=replace(plan.sampling, end_bias=0.0, end_ramp=0.0, token_bias=(),
                                                      nucleus_exempt=()))
            decoders.append(plan.decoder(ckpt.model, ckpt.model.head.weight.device))
        for _ in range(tokens // LOCKSTEP):
            for decoder in decoders:
                decoder.run(LOCKSTEP)
        rows.append([d.seconds / (len(d.tokens[0]) - d.prompt_len) for d in decoders])
    times = np.median(np.array(rows), axis=0)  # (3,)
    ratios = np.median(np.array(rows) / np.array(rows)[:, :1], axis=0)  # (3,) against plain
    lines = "".join(f"| {label} | {1e3 * t:.2f} | {r:.3f} |\n" for label, t, r in zip(labels, times, ratios))
    return (f"| sampling {tokens} tokens in lockstep ({LOCKSTEP} at a time), {rounds} rounds, 1 thread | "
            f"ms per token, median | against plain (median of the rounds') |\n|---|---:|---:|\n{lines}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="run, checkpoint or shipped model name")
    parser.add_argument("--corpus", default=None, help="token corpus (default: the checkpoint's data.root)")
    parser.add_argument("--fit-split", default="valid", help="split the weights are fitted on (default: valid)")
    parser.add_argument("--split", default="test", help="split measured (default: test)")
    parser.add_argument("--songs", type=int, default=None, help="at most this many songs per split (default: all)")
    parser.add_argument("--orders", default=",".join(map(str, ORDERS)),
                        help="key lengths, increasing (default: %(default)s)")
    parser.add_argument("--min-lag", type=int, default=MIN_LAG,
                        help="tokens between a position and the earliest it copies from (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the positional noise")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default: %(default)s)")
    parser.add_argument("--out", default="bench/results", help="folder of recall.md and recall_along.png")
    parser.add_argument("--write", action="store_true", help="store the fitted weights in the checkpoint")
    parser.add_argument("--timing", type=int, default=0, metavar="N",
                        help="only time sampling N tokens with and without the checkpoint's recall")
    parser.add_argument("--rounds", type=int, default=3, help="lockstep timing rounds (default: %(default)s)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    orders = tuple(int(o) for o in args.orders.split(","))
    ckpt = load_model(args.checkpoint)
    if args.timing:
        torch.set_num_threads(1)
        print(timing(ckpt, args.timing, args.rounds, args.seed), end="")
        return 0
    corpus = checked_corpus(args.corpus, ckpt)
    keys = KeyTokens.of(ckpt.tokenizer)
    fit = traces(ckpt.model, corpus.pieces(args.fit_split)[:args.songs], orders, keys, args.min_lag, args.seed,
                 args.fit_split)
    weights = fit_weights(concat(fit), len(orders))
    measured = traces(ckpt.model, corpus.pieces(args.split)[:args.songs], orders, keys, args.min_lag, args.seed,
                      args.split)
    title = (f"Recall on {args.checkpoint}: weights fitted on {len(fit)} {args.fit_split} songs, measured on "
             f"{len(measured)} {args.split} songs of {corpus.root} (orders {','.join(map(str, orders))}, "
             f"lag >= {args.min_lag} tokens).")
    text = report(measured, weights, orders, title)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "recall.md").write_text(text)
    plot(measured, weights, out / "recall_along.png")
    print(text)
    print(f"weights: {','.join(f'{w:g}' for w in weights)}")
    if args.write:
        folder = set_generate_defaults(ckpt.path, recall_weights=weights, recall_orders=orders,
                                       recall_min_lag=args.min_lag)
        print(f"wrote generate.recall_weights, recall_orders and recall_min_lag into {folder}/meta.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
