"""How busy the sampler's bars are under a token bias, and the bias that gives them real songs' chords.

    python -m bench.density --checkpoint pop909_infill --corpus corpus/pop909

Read teacher-forced on real songs, the model is calibrated on how many notes start together (after a
note, another at the same onset); in its own pieces the bars grow busier than real pop's. A logit bias
on a token type (`generate.token_bias`; here the prefix `Note_Pitch`: every note's pitch, so that
another note at an onset is a little less likely) is a sampling-time handle on that. For each seed, in
lockstep, the same unprompted request is decoded under every bias of --biases (End forbidden, so every
piece reaches its first bars), each piece is written as MIDI and read back as the user gets it, and its
first --bars bars are counted (tokens, onsets, notes per bar: `bench.opening.Counts`), against the
--fit-split and --split songs' first bars (leading silent bars dropped). The fitted bias is the one of
the grid whose pieces have the --fit-split songs' notes per onset; `--write` stores it in the checkpoint.

Prints a table, writes density.md and density.png (tokens and notes per onset against the bias) in --out.
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from bench import checked_corpus, save_figure
from bench.endings import publish
from bench.opening import Counts, written
from evaluation.quality import drop_leading_silence
from generation.request import GenerationRequest
from training.checkpoint import load_model, set_generate_defaults


def notes_per_onset(counts: Counts) -> float:
    """Notes over onsets, pooled over every counted bar."""
    return sum(map(sum, counts.notes)) / max(sum(map(sum, counts.onsets)), 1)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default=None, help="run, checkpoint or shipped model (default: the default)")
    parser.add_argument("--corpus", default=None,
                        help="token corpus of the real songs (default: the model's data.root)")
    parser.add_argument("--fit-split", default="valid", help="songs whose notes per onset are fitted (default: valid)")
    parser.add_argument("--split", default="test", help="held-out songs shown beside (default: test)")
    parser.add_argument("--prefix", default="Note_Pitch", help="token-name prefix biased (default: %(default)s)")
    parser.add_argument("--biases", type=float, nargs="+", default=[-0.3, -0.2, -0.15, -0.1, 0.0],
                        help="biases tried (default: -0.3 -0.2 -0.15 -0.1 0)")
    parser.add_argument("--seeds", type=int, default=4, help="sampling seeds (default: %(default)s)")
    parser.add_argument("--first-seed", type=int, default=300, help="the first sampling seed (default: %(default)s)")
    parser.add_argument("--pieces", type=int, default=6, help="pieces per seed, one batch (default: %(default)s)")
    parser.add_argument("--tokens", type=int, default=1800, help="new tokens per piece (default: %(default)s)")
    parser.add_argument("--bars", type=int, default=16, help="first bars counted (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s)")
    parser.add_argument("--out", default="bench/results", help="folder of density.md and density.png")
    parser.add_argument("--write", action="store_true", help="store the fitted bias in the checkpoint")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    ckpt = load_model(args.checkpoint)
    tokenizer, plain = ckpt.tokenizer, ckpt.config
    corpus = checked_corpus(args.corpus, ckpt)
    real = {split: Counts() for split in (args.fit_split, args.split)}
    for split, counts in real.items():
        for ids in corpus.pieces(split):
            counts.add(tokenizer, drop_leading_silence(tokenizer, [int(i) for i in ids]), args.bars)
    others = tuple(pair for pair in plain.generate.token_bias if pair[0] != args.prefix)
    counts = {bias: Counts() for bias in args.biases}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in tqdm(range(args.first_seed, args.first_seed + args.seeds), desc="seeds", unit="seed"):
            for bias in args.biases:  # lockstep: every bias at every seed
                pairs = others + (((args.prefix, bias),) if bias else ())
                ckpt.config = replace(plain, generate=replace(plain.generate, token_bias=pairs))
                request = GenerationRequest(tokens=args.tokens, seed=seed, end=False, num_samples=args.pieces)
                means = [counts[bias].add(tokenizer, written(tokenizer, r.tokens, Path(tmp)), args.bars)
                         for r in request.run(ckpt)]
                whole = [m for m in means if not np.isnan(m)]  # pieces with at least one whole bar
                if whole:
                    counts[bias].seed_means.append(float(np.mean(whole)))
    ckpt.config = plain
    target = notes_per_onset(real[args.fit_split])
    fitted = min(args.biases, key=lambda b: abs(notes_per_onset(counts[b]) - target))
    label = args.checkpoint or "the default model"
    biases = " ".join(f"{b:g}" for b in args.biases)
    text = (f"`python -m bench.density --checkpoint {label} --prefix {args.prefix} --biases {biases} --seeds "
            f"{args.seeds} --first-seed {args.first_seed} --pieces {args.pieces} --tokens {args.tokens} --bars "
            f"{args.bars}`: the first {args.bars} bars of unprompted pieces under a bias on `{args.prefix}` tokens, "
            f"written as MIDI and read back. Fitted to the {args.fit_split} songs' notes per onset: **{fitted:+g}**."
            "\n\n| pieces | count | tokens per bar (mean ± std over pieces) | std / s.e. over seeds | onsets per bar "
            "| notes per onset |\n|---|---:|---:|---:|---:|---:|\n"
            + "\n".join(counts[b].row(f"bias {b:+g}") for b in args.biases) + "\n"
            + "\n".join(c.row(f"real songs ({split})") for split, c in real.items()) + "\n")
    publish(args.out, "density.md", text)
    plot(counts, real, Path(args.out) / "density.png")
    if args.write:
        pairs = others + (((args.prefix, fitted),) if fitted else ())
        folder = set_generate_defaults(ckpt.path, token_bias=pairs)
        print(f"wrote generate.token_bias={pairs} into {folder}/meta.json")
    return 0


def plot(counts: dict[float, Counts], real: dict[str, Counts], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    biases = sorted(counts)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    measures = (("tokens per bar", lambda c: float(np.mean([np.mean(t) for t in c.tokens if t]))),
                ("notes per onset", notes_per_onset))
    for ax, (name, measure) in zip(axes, measures):
        ax.plot(biases, [measure(counts[b]) for b in biases], "o-", label="pieces")
        for split, c in real.items():
            ax.axhline(measure(c), ls="--", lw=1, label=f"{split} songs", color="C1" if split == "valid" else "C2")
        ax.set_xlabel("bias")
        ax.set_title(name, fontsize=10)
        ax.legend(fontsize=8)
    save_figure(fig, path)


if __name__ == "__main__":
    raise SystemExit(main())
