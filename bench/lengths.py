"""How long the sampler's songs run, and the end schedule that gives them the length of real songs.

    python -m bench.lengths --checkpoint pop909_infill --corpus corpus/pop909 --ramp --write

`bench.endings --fit` fits the end bias by the likelihood of real songs' end decisions; but the model
expects an end less often in its own pieces than in real songs (`bench.endings --pieces`), so its
unprompted songs still run long. This fits the End token's bias, and a ramp per bar, on what the sampler
writes instead:

1. unprompted pieces are sampled as `generate.py` samples them (the song's opening, recall, the
   checkpoint's temperature and nucleus), `--pieces` per seed, with the End token forbidden, to --tokens;
2. each piece is read again teacher-forced, its copy cache traced and its grammar followed, and at every
   position where the grammar allows the end, the sampler's probability of End (recall mixed in, the
   bias added, temperature, nucleus: `generation.sampling.sampling_probabilities`) is computed for every
   end bias of a grid;
3. under a schedule (bias b plus ramp r per bar line so far: b_t = b + r * bars_t), a piece ends after its
   token t with probability h_t(b_t) * prod_{s<t} (1 - h_s(b_s)), else it runs to the token cap (the
   length `evaluate.py quality` counts then). Sampled with End forbidden, the pieces follow the
   sampler's law given that no end came yet, so each schedule's law of lengths is read off the same
   pieces, with no sampling noise between schedules (the teacher-forced pass draws its own positional
   noise, as `bench.endings` does);
4. the fitted schedule is the grid's under whose law the --fit-split songs' lengths (bars, leading silent
   bars dropped) are likeliest: an end bias alone, or with --ramp a bias and a ramp (`generate.end_ramp`,
   log odds added per bar line so far, so that ends grow likelier as the song grows, as real songs' do).
   The --split songs' lengths are the held-out check. `--write` stores the schedule in the checkpoint.

Prints a table, writes lengths.md and lengths.png (the laws of lengths against the songs') in --out;
`--save FILE` keeps the pieces' hazards (about 8 MB a piece), `--reuse FILE` reads them back instead of
sampling again (a refit takes seconds).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from bench import checked_corpus, save_figure
from bench.endings import publish
from evaluation.form import teacher_forced_logits
from evaluation.quality import drop_leading_silence
from generation.recall import KeyTokens, Recall
from generation.request import GenerationRequest
from generation.sampling import (SamplingConfig, nucleus_top_p, sampling_probabilities, shaped_logits,
                                 token_bias_vector, token_types)
from training.checkpoint import load_model, set_generate_defaults

BIASES = np.round(np.arange(-4.0, 6.0001, 0.05), 2)  # end biases of the grid (log odds, before temperature)
RAMPS = np.round(np.arange(0.0, 0.1001, 0.0025), 4)  # end ramps tried by --ramp (log odds per bar line)
SMOOTH_BARS = 3  # the law is smoothed over +- this many bars when it scores songs' lengths
FLOOR = 1e-4  # the smoothed law's least probability of a length


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
    token_bias = token_bias_vector(tokenizer, sampling.token_bias)  # (V,) or None
    top_p = nucleus_top_p(tokenizer, sampling)  # float, or (V,) with exempt tokens
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
        row = shaped_logits(logits[i][None], sampling, eos, None if recall is None else [recall],
                            token_bias=token_bias).double()  # (1, V): the grid's biases replace the End's
        rows = row.repeat(len(BIASES), 1)  # (K, V)
        rows[:, eos] += bias
        mask = torch.from_numpy(allowed)[None].expand_as(rows)  # (K, V)
        p = sampling_probabilities(rows, top_p, sampling.temperature, mask, types)[:, eos]  # (K,)
        bars.append(int(np.searchsorted(starts, i, side="right")))
        hazard.append(p.numpy())
    return PieceHazard(np.asarray(bars, dtype=int), np.asarray(hazard).reshape(-1, len(BIASES)), len(starts))


@dataclass(frozen=True)
class Schedule:
    """What the End token's logit gets: `bias`, plus `ramp` per bar line so far (generate.end_bias, end_ramp)."""

    bias: float
    ramp: float = 0.0

    def __str__(self) -> str:
        return f"{self.bias:+g}" + (f" {self.ramp:+g}/bar" if self.ramp else "")


def scheduled_hazard(piece: PieceHazard, schedule: Schedule) -> np.ndarray:
    """(P,) the piece's hazard at each position under `schedule`: the grid's bias nearest to the scheduled
    one (clipped to the grid)."""
    step = BIASES[1] - BIASES[0]
    wanted = schedule.bias + schedule.ramp * piece.bars  # (P,)
    k = np.clip(np.rint((wanted - BIASES[0]) / step).astype(int), 0, len(BIASES) - 1)
    return piece.hazard[np.arange(len(k)), k]


def length_law(pieces: Sequence[PieceHazard], schedule: Schedule, top: int) -> np.ndarray:
    """(top + 1,) the law of lengths in bars under `schedule`: the pieces' laws averaged."""
    law = np.zeros(top + 1)
    for piece in pieces:
        h = scheduled_hazard(piece, schedule)  # (P,)
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


def length_log_likelihood(law: np.ndarray, lengths: np.ndarray) -> float:
    """Mean log-probability of the songs' lengths under `law`, smoothed over +-SMOOTH_BARS bars (a law read
    off a dozen pieces is spiky) and floored at FLOOR."""
    kernel = np.ones(2 * SMOOTH_BARS + 1) / (2 * SMOOTH_BARS + 1)
    smooth = np.maximum(np.convolve(law, kernel, mode="same"), FLOOR)
    return float(np.mean(np.log(smooth[np.minimum(lengths, len(law) - 1)])))


def fit_schedule(pieces: Sequence[PieceHazard], lengths: np.ndarray, top: int, ramp: bool) -> Schedule:
    """The schedule of the grid (bias on BIASES; with `ramp`, ramp on RAMPS, else 0) under whose law the
    songs' lengths are likeliest."""
    candidates = [Schedule(float(b), float(r)) for b in BIASES for r in (RAMPS if ramp else (0.0,))]
    scores = [length_log_likelihood(length_law(pieces, c, top), lengths) for c in tqdm(
        candidates, desc="fitting", unit="schedule", leave=False)]
    return candidates[int(np.argmax(scores))]


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
    parser.add_argument("--ramp", action="store_true",
                        help="fit an end ramp (log odds per bar line) beside the bias, not the bias alone")
    parser.add_argument("--write", action="store_true", help="store the fitted bias (and ramp) in the checkpoint")
    parser.add_argument("--save", metavar="NPZ", default=None, help="write the pieces' hazards to this file")
    parser.add_argument("--reuse", metavar="NPZ", default=None,
                        help="read the pieces' hazards from a --save file (same checkpoint and settings) "
                             "instead of sampling them again")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    ckpt = load_model(args.checkpoint)
    ckpt.model.eval()
    corpus = checked_corpus(args.corpus, ckpt)
    real = {split: song_bars(ckpt, corpus, split) for split in (args.fit_split, args.split)}
    if args.reuse:
        pieces = load_hazards(Path(args.reuse))
    else:
        pieces = sample_hazards(ckpt, args.tokens, args.seeds, args.pieces)
    if args.save:
        save_hazards(pieces, Path(args.save))
    top = max(max(p.full_bars for p in pieces), int(max(r.max() for r in real.values()))) + 1
    shipped = Schedule(ckpt.config.generate.end_bias, ckpt.config.generate.end_ramp)
    fitted = fit_schedule(pieces, real[args.fit_split], top, ramp=False)
    rows = {"no bias": Schedule(0.0), "the checkpoint's": shipped, "fitted, a bias alone": fitted}
    if args.ramp:
        fitted = rows["fitted, bias and ramp"] = fit_schedule(pieces, real[args.fit_split], top, ramp=True)
    publish(args.out, "lengths.md", table(args, pieces, real, rows, top))
    plot(pieces, real, rows, top, Path(args.out) / "lengths.png")
    if args.write:
        folder = set_generate_defaults(ckpt.path, end_bias=fitted.bias, end_ramp=fitted.ramp)
        print(f"wrote generate.end_bias={fitted.bias:g}, end_ramp={fitted.ramp:g} into {folder}/meta.json")
    return 0


def sample_hazards(ckpt, tokens: int, seeds: Sequence[int], per_seed: int) -> list[PieceHazard]:
    """Steps 1-2 of the module docstring: `per_seed` pieces per seed, sampled and read back."""
    pieces = []
    for seed in seeds:
        request = GenerationRequest(tokens=tokens, num_samples=per_seed, seed=seed, end=False)
        results = request.run(ckpt, progress=True)
        plan = GenerationRequest(tokens=tokens, seed=seed).plan(ckpt, request.check())  # End allowed
        for result in tqdm(results, desc=f"seed {seed}: reading the pieces", unit="piece"):
            pieces.append(sampler_hazard(ckpt, plan.sampling, plan.steer, result.tokens, result.prompt_len, seed))
    return pieces


def save_hazards(pieces: Sequence[PieceHazard], path: Path) -> None:
    """The pieces' hazards in one npz (arrays per piece, and the bias grid they were computed on)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {"biases": BIASES, "full_bars": np.asarray([p.full_bars for p in pieces])}
    for i, piece in enumerate(pieces):
        arrays[f"bars_{i}"], arrays[f"hazard_{i}"] = piece.bars, piece.hazard
    np.savez_compressed(path, **arrays)


def load_hazards(path: Path) -> list[PieceHazard]:
    """The pieces `save_hazards` wrote (SystemExit when missing or on another bias grid)."""
    if not path.is_file():
        raise SystemExit(f"--reuse: no {path}; sample the pieces once with --save {path}")
    with np.load(path) as data:
        if not np.array_equal(data["biases"], BIASES):
            raise SystemExit(f"--reuse: {path} holds hazards on another bias grid; run without --reuse")
        return [PieceHazard(data[f"bars_{i}"], data[f"hazard_{i}"], int(full))
                for i, full in enumerate(data["full_bars"])]


def table(args: argparse.Namespace, pieces: Sequence[PieceHazard], real: dict[str, np.ndarray],
          rows: dict[str, Schedule], top: int) -> str:
    """Markdown: the songs' lengths, and the pieces' law of lengths under each schedule of `rows`."""
    seeds = " ".join(map(str, args.seeds))
    fit, held = real[args.fit_split], real[args.split]
    lines = [f"`python -m bench.lengths --checkpoint {args.checkpoint} --tokens {args.tokens} --seeds {seeds} "
             f"--pieces {args.pieces}{' --ramp' if args.ramp else ''}`: {len(pieces)} unprompted pieces sampled "
             f"with End forbidden, their law of lengths in bars under each end schedule (bias, ramp per bar "
             f"line). Fitted by the likelihood of the {len(fit)} {args.fit_split} songs' lengths: "
             f"**{rows[list(rows)[-1]]}**.", "",
             f"| | median bars | quartiles | ended before bar 32 | ended before the cap | {args.split} songs' "
             f"lengths: log-likelihood |", "|---|---:|---:|---:|---:|---:|"]
    for split, bars in real.items():
        q1, q2, q3 = np.percentile(bars, [25, 50, 75])
        lines.append(f"| {split} songs ({len(bars)}) | {q2:.0f} | {q1:.0f}-{q3:.0f} | "
                     f"{100 * np.mean(bars < 32):.0f}% | | |")
    for label, schedule in rows.items():
        law = length_law(pieces, schedule, top)
        capped = float(np.mean([np.prod(1.0 - scheduled_hazard(p, schedule)) for p in pieces]))
        lines.append(f"| pieces, {label} ({schedule}) | {quantile(law, 0.5)} | {quantile(law, 0.25)}-"
                     f"{quantile(law, 0.75)} | {100 * law[:32].sum():.0f}% | {100 * (1 - capped):.0f}% | "
                     f"{length_log_likelihood(law, held):.3f} |")
    return "\n".join(lines) + "\n"


def plot(pieces: Sequence[PieceHazard], real: dict[str, np.ndarray], rows: dict[str, Schedule], top: int,
         path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.arange(top + 1)
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for split, bars in real.items():
        ax.step(np.sort(bars), np.arange(1, len(bars) + 1) / len(bars), where="post", label=f"{split} songs")
    for label, schedule in rows.items():
        ax.plot(x, np.cumsum(length_law(pieces, schedule, top)), label=f"pieces, {label} ({schedule})")
    ax.axhline(0.5, color="grey", lw=0.6, ls=":")
    ax.set_xlabel("length (bars)")
    ax.set_ylabel("share of songs this long or shorter")
    ax.set_title(f"{len(pieces)} unprompted pieces: their lengths under the end schedule", fontsize=10)
    ax.legend(fontsize=8)
    save_figure(fig, path)


if __name__ == "__main__":
    raise SystemExit(main())
