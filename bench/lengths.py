"""How long the sampler's songs run, and the end bias that gives them the length of real songs.

    python -m bench.lengths --checkpoint pop909_infill --corpus corpus/pop909 --write

`bench.endings --fit` fits the end bias by the likelihood of real songs' end decisions; but the model
expects an end less often in its own pieces than in real songs (`bench.endings --pieces`), so its
unprompted songs still run long. This fits the bias on what the sampler writes instead:

1. unprompted pieces are sampled as `generate.py` samples them (the song's opening, recall, the
   checkpoint's temperature and nucleus), `--pieces` per seed, with the End token forbidden, to --tokens;
2. each piece is read again teacher-forced, its copy cache traced and its grammar followed, and at every
   position where the grammar allows the end, the sampler's probability of End (recall mixed in, the
   bias added, temperature, nucleus: `generation.sampling.sampling_probabilities`) is computed for every
   end bias of a grid;
3. under bias b, a piece ends after its token t with probability h_t(b) * prod_{s<t} (1 - h_s(b)), else it
   runs to the token cap (the length `evaluate.py quality` counts then). Sampled with End forbidden, the
   pieces follow the sampler's law given that no end came yet, so each bias's law of lengths is read off
   the same pieces, with no sampling noise between biases (the teacher-forced pass draws its own
   positional noise, as `bench.endings` does);
4. the fitted bias is the grid's bias at which half of the pieces' length law lies at or below the
   median length of the --fit-split songs (bars, leading silent bars dropped); the --split songs are
   the held-out check. `--write` stores it as the checkpoint's `generate.end_bias`.

Prints a table, writes lengths.md and lengths.png (the laws of lengths against the songs') in --out.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from bench.endings import publish
from data import load_corpus
from evaluation.form import teacher_forced_logits
from evaluation.quality import drop_leading_silence
from generation.recall import KeyTokens, Recall, mix_logits
from generation.request import GenerationRequest
from generation.sampling import SamplingConfig, sampling_probabilities, token_types
from training.checkpoint import load_model, set_generate_defaults

BIASES = np.round(np.arange(-1.0, 5.0001, 0.05), 2)  # end biases of the grid (log odds, before temperature)


@dataclass
class PieceHazard:
    """One sampled piece: where it could have ended, and how likely under each bias."""

    bars: np.ndarray  # (P,) the piece's length in bars had it ended at each such position
    hazard: np.ndarray  # (P, len(BIASES)) the sampler's probability of End there, per bias
    full_bars: int  # its length in bars at the token cap


def sampler_hazard(ckpt, sampling: SamplingConfig, steer, ids: Sequence[int], prompt_len: int,
                   seed: int) -> PieceHazard:
    """The `PieceHazard` of a piece `ids` (its first `prompt_len` tokens the prompt), read teacher-forced."""
    tokenizer, eos = ckpt.tokenizer, ckpt.tokenizer.eos_id
    ids = [int(t) for t in ids]
    logits = teacher_forced_logits(ckpt.model, ids, seed).double()  # (L - 1, V): logits[i] precede ids[i + 1]
    grammar = tokenizer.constraint_state(sampling.hold_bars) if sampling.constrained else None
    recall = None
    if sampling.recall is not None:
        recall = Recall(sampling.recall.orders, KeyTokens.of(tokenizer), sampling.recall.min_lag)
    types = token_types(tokenizer) if sampling.nucleus == "type" else None
    bias = torch.as_tensor(BIASES, dtype=torch.float64)  # (K,)
    starts = np.asarray(tokenizer.bar_starts(ids))
    bars, hazard = [], []
    for i, token in enumerate(ids[:-1]):
        if grammar is not None:
            grammar.advance(token)
        if recall is not None:
            recall.append(token)
        if i + 1 < prompt_len:
            continue
        allowed = np.asarray(grammar.allowed(), dtype=bool) if grammar is not None else np.ones(len(logits[i]), bool)
        if steer is not None:
            allowed = steer(ids[:i + 1], allowed)
        if not allowed[eos]:
            continue
        row = logits[i][None]  # (1, V)
        if recall is not None:
            row = mix_logits(row, [recall], sampling.recall.weights).double()  # (1, V) log-probs
        rows = row.repeat(len(BIASES), 1)  # (K, V)
        rows[:, eos] += bias
        mask = torch.from_numpy(allowed)[None].expand_as(rows)  # (K, V)
        p = sampling_probabilities(rows, sampling.top_p, sampling.temperature, mask, types)[:, eos]  # (K,)
        bars.append(int(np.searchsorted(starts, i, side="right")))
        hazard.append(p.numpy())
    return PieceHazard(np.asarray(bars, dtype=int), np.asarray(hazard).reshape(-1, len(BIASES)), len(starts))


def length_law(pieces: Sequence[PieceHazard], k: int, top: int) -> np.ndarray:
    """(top + 1,) the law of lengths in bars under bias index k: the pieces' laws averaged."""
    law = np.zeros(top + 1)
    for piece in pieces:
        h = piece.hazard[:, k]
        alive = np.concatenate([[1.0], np.cumprod(1.0 - h)])  # survival before each position, then at the cap
        np.add.at(law, np.minimum(piece.bars, top), h * alive[:-1])
        law[min(piece.full_bars, top)] += alive[-1]
    return law / len(pieces)


def quantile(law: np.ndarray, q: float) -> int:
    """The smallest length whose cumulative probability reaches q."""
    return int(np.searchsorted(np.cumsum(law), q - 1e-12))


def song_bars(ckpt, corpus, split: str) -> np.ndarray:
    """The split's song lengths in bars, leading silent bars dropped (as `evaluate.py quality` reads them)."""
    tokenizer = ckpt.tokenizer
    return np.asarray([len(tokenizer.bar_starts(drop_leading_silence(tokenizer, [int(t) for t in ids])))
                       for ids in corpus.pieces(split)])


def fit_bias(pieces: Sequence[PieceHazard], target: float, top: int) -> int:
    """The grid index whose law puts a probability closest to 1/2 at or below `target` bars."""
    below = [np.cumsum(length_law(pieces, k, top))[int(target)] for k in range(len(BIASES))]
    return int(np.argmin(np.abs(np.asarray(below) - 0.5)))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="run, checkpoint or shipped model name")
    parser.add_argument("--corpus", default=None, help="token corpus (default: the checkpoint's data.root)")
    parser.add_argument("--fit-split", default="valid", help="songs whose median length is fitted (default: valid)")
    parser.add_argument("--split", default="test", help="held-out songs shown beside (default: test)")
    parser.add_argument("--tokens", type=int, default=12000, help="token cap of a piece (default: %(default)s)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[101, 102], help="sampling seeds (default: 101 102)")
    parser.add_argument("--pieces", type=int, default=6, help="pieces per seed, one batch (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s)")
    parser.add_argument("--out", default="bench/results", help="folder of lengths.md and lengths.png")
    parser.add_argument("--write", action="store_true", help="store the fitted bias in the checkpoint")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    ckpt = load_model(args.checkpoint)
    ckpt.model.eval()
    corpus = load_corpus(Path(args.corpus or ckpt.config.data.root))
    real = {split: song_bars(ckpt, corpus, split) for split in (args.fit_split, args.split)}
    shipped = ckpt.config.generate.end_bias
    pieces: list[PieceHazard] = []
    for seed in args.seeds:
        request = GenerationRequest(tokens=args.tokens, num_samples=args.pieces, seed=seed, end=False)
        results = request.run(ckpt, progress=True)
        plan = GenerationRequest(tokens=args.tokens, seed=seed).plan(ckpt, request.check())  # End allowed
        for result in tqdm(results, desc=f"seed {seed}: reading the pieces", unit="piece"):
            pieces.append(sampler_hazard(ckpt, plan.sampling, plan.steer, result.tokens, result.prompt_len, seed))
    top = max(max(p.full_bars for p in pieces), int(max(r.max() for r in real.values()))) + 1
    target = float(np.median(real[args.fit_split]))
    fitted = float(BIASES[fit_bias(pieces, target, top)])
    text = table(args, pieces, real, shipped, fitted, top)
    out = Path(args.out)
    publish(args.out, "lengths.md", text)
    plot(pieces, real, {f"end bias {shipped:+g} (the checkpoint's)": shipped, f"end bias {fitted:+g} (fitted)": fitted},
         top, out / "lengths.png")
    if args.write:
        folder = set_generate_defaults(ckpt.path, end_bias=fitted)
        print(f"wrote generate.end_bias={fitted:g} into {folder}/meta.json")
    return 0


def table(args: argparse.Namespace, pieces: Sequence[PieceHazard], real: dict[str, np.ndarray], shipped: float,
          fitted: float, top: int) -> str:
    """Markdown: the songs' lengths, and the pieces' law of lengths under a few biases."""
    seeds = " ".join(map(str, args.seeds))
    lines = [f"`python -m bench.lengths --checkpoint {args.checkpoint} --tokens {args.tokens} --seeds {seeds} "
             f"--pieces {args.pieces}`: {len(pieces)} unprompted pieces sampled with End forbidden, their "
             f"law of lengths in bars under each end bias. Fitted bias: **{fitted:+g}** (the checkpoint's: "
             f"{shipped:+g}).", "", "| | median bars | quartiles | ended before the cap |", "|---|---:|---:|---:|"]
    for split, bars in real.items():
        q1, q2, q3 = np.percentile(bars, [25, 50, 75])
        lines.append(f"| {split} songs ({len(bars)}) | {q2:.0f} | {q1:.0f}-{q3:.0f} | |")
    for label, b in (("no bias", 0.0), ("the checkpoint's bias", shipped), ("fitted bias", fitted)):
        k = int(np.argmin(np.abs(BIASES - b)))
        law = length_law(pieces, k, top)
        ended = 1.0 - float(np.mean([np.prod(1.0 - p.hazard[:, k]) for p in pieces]))
        lines.append(f"| pieces, {label} ({b:+g}) | {quantile(law, 0.5)} | {quantile(law, 0.25)}-"
                     f"{quantile(law, 0.75)} | {100 * ended:.0f}% |")
    return "\n".join(lines) + "\n"


def plot(pieces: Sequence[PieceHazard], real: dict[str, np.ndarray], biases: dict[str, float], top: int,
         path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.arange(top + 1)
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for split, bars in real.items():
        ax.step(np.sort(bars), np.arange(1, len(bars) + 1) / len(bars), where="post", label=f"{split} songs")
    for label, b in biases.items():
        ax.plot(x, np.cumsum(length_law(pieces, int(np.argmin(np.abs(BIASES - b))), top)), label=f"pieces, {label}")
    ax.axhline(0.5, color="grey", lw=0.6, ls=":")
    ax.set_xlabel("length (bars)")
    ax.set_ylabel("share of songs this long or shorter")
    ax.set_title(f"{len(pieces)} unprompted pieces: their lengths under the end bias", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
