"""Where a model ends a song: its probability of the end token along held-out songs.

    python -m bench.endings --checkpoint pop909_infill --checkpoint pop909_whole --corpus corpus/pop909

Sampling ends a piece only where the model gives the end token enough probability. Each held-out song
(the chosen split; songs that end with the end token) is read teacher-forced from its start, in one
seeded pass, and the model's probability of the end token as the next token is taken at every position:

* at the song's true end (after its last note): how well the model knows that the song ends there;
* summed over all the song's other positions: the ends a sampler would draw too early, were it to
  follow the song (a hazard; below 1 means the model seldom ends a song before its end);
* averaged over the song's last 8 bar lines, and over its other bar lines: whether the model expects
  the end more as the song nears it.

Prints a table of medians and means over the songs per checkpoint, and writes endings.md in --out.

`--fit` (one checkpoint) fits the sampler's end bias b (`generate.end_bias`: the end token's odds
times e**b at every position) by likelihood on the valid songs, and measures it on the test songs: the
log-likelihood of each song's end decisions (where it ends, and that it goes on everywhere before),
and the summed p(end) before the true end, with and without b. A recall mixture gives the end token
the model's own probability (`generation.recall.mix_logits`), so the fit holds with recall too.
`--write` stores b in the checkpoint's sampling defaults (meta.json), as `bench.recall --write` does.

`--pieces DIR` (one checkpoint) compares, with the checkpoint's own end bias, the summed p(end) per bar
over the MIDI files of DIR (e.g. an evaluation's generated pieces, as written) with the same over the
split's songs: whether the model expects an end as often in those pieces as in real songs.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from bench import checked_corpus
from data.corpus import TokenCorpus
from evaluation.form import teacher_forced_logits
from generation.pieces import strip_eos
from model import MusicPerformer
from training.checkpoint import load_model, set_generate_defaults

LAST_BARS = 8  # bar lines counted as the song's last ones
BIASES = np.round(np.arange(-2.0, 4.0001, 0.05), 2)  # end biases tried by the fit (log odds factors)


def end_probability(model: MusicPerformer, ids: Sequence[int], end: int, seed: int = 0) -> np.ndarray:
    """(len(ids) - 1,) the model's probability that the end token follows ids[:i + 1], teacher-forced
    in one pass with one positional noise drawn from `seed`."""
    logits = teacher_forced_logits(model, ids, seed)  # (L - 1, V)
    return torch.softmax(logits.double(), dim=-1)[:, end].cpu().numpy()  # (L - 1,)


@dataclass
class SongEnding:
    """p(end) of one song, as the module docstring defines them."""

    at_end: float  # at the true end
    hazard: float  # summed over every other position
    last_bars: float  # mean at the last LAST_BARS bar lines
    other_bars: float  # mean at the other bar lines (nan: none)


def song_ending(model: MusicPerformer, ids: Sequence[int], end: int, bar: int, seed: int = 0) -> SongEnding:
    """The `SongEnding` of a song `ids` that ends with the `end` token; `bar` is the bar-line token."""
    p = end_probability(model, ids, end, seed)  # (L - 1,): p[i] for the token after ids[i]
    following = np.asarray(ids[1:])
    bars = np.flatnonzero(following == bar)  # positions where a bar line comes next
    last, rest = bars[-LAST_BARS:], bars[:-LAST_BARS]
    return SongEnding(at_end=float(p[-1]), hazard=float(p[:-1].sum()), last_bars=float(p[last].mean()),
                      other_bars=float(p[rest].mean()) if len(rest) else float("nan"))


def biased(p: np.ndarray, bias: float) -> np.ndarray:
    """p(end) with its odds multiplied by e**bias (the other tokens keep their proportions)."""
    odds = p * np.exp(bias)
    return odds / (1.0 - p + odds)


def end_log_likelihood(songs: Sequence[np.ndarray], bias: float) -> float:
    """Mean over the songs (each its p(end) along it, the last at the true end) of the log-likelihood of
    the end decisions under `bias`: log p(end) at the end plus log(1 - p(end)) at every position before."""
    return float(np.mean([np.log(biased(p[-1:], bias)[0]) + np.log1p(-biased(p[:-1], bias)).sum()
                          for p in songs]))


def fit_end_bias(songs: Sequence[np.ndarray]) -> float:
    """The bias of BIASES with the highest `end_log_likelihood`."""
    return float(BIASES[int(np.argmax([end_log_likelihood(songs, b) for b in BIASES]))])


def fit_table(fit: Sequence[np.ndarray], measured: Sequence[np.ndarray], bias: float) -> str:
    """Markdown: the end decisions of the measured songs without and with the fitted bias."""
    lines = [f"End bias fitted on {len(fit)} valid songs: **{bias:+.2f}** (odds x {np.exp(bias):.2f}).", "",
             "| test songs | log-likelihood of the end decisions, per song | p(end) at the true end, median | "
             "summed p(end) before it, median (mean) |", "|---|---:|---:|---:|"]
    for label, b in (("no bias", 0.0), (f"bias {bias:+.2f}", bias)):
        at_end = [biased(p[-1:], b)[0] for p in measured]
        before = [biased(p[:-1], b).sum() for p in measured]
        lines.append(f"| {label} | {end_log_likelihood(measured, b):.3f} | {np.median(at_end):.4f} | "
                     f"{np.median(before):.2f} ({np.mean(before):.2f}) |")
    return "\n".join(lines) + "\n"


def table(rows: dict[str, list[SongEnding]]) -> str:
    """Markdown: per checkpoint, medians (and means) over its songs."""

    def cell(values: list[float]) -> str:
        known = [v for v in values if not np.isnan(v)]
        return f"{np.median(known):.4f} ({np.mean(known):.4f})" if known else "-"

    lines = ["| model | songs | p(end) at the true end | summed over the other positions | "
             f"mean at the last {LAST_BARS} bar lines | mean at the other bar lines |",
             "|---|---:|---:|---:|---:|---:|"]
    for label, songs in rows.items():
        lines.append(f"| {label} | {len(songs)} | {cell([s.at_end for s in songs])} | "
                     f"{cell([s.hazard for s in songs])} | {cell([s.last_bars for s in songs])} | "
                     f"{cell([s.other_bars for s in songs])} |")
    return "\n".join(lines) + "\n\nEach cell: the median over the songs (their mean).\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", action="append", required=True,
                        help="run, checkpoint or shipped model name (repeat to compare)")
    parser.add_argument("--corpus", default=None, help="token corpus (default: the first checkpoint's data.root)")
    parser.add_argument("--split", default="test", help="split read (default: %(default)s)")
    parser.add_argument("--songs", type=int, default=None, help="at most this many songs (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the positional noise")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default: %(default)s)")
    parser.add_argument("--out", default="bench/results", help="folder of endings.md")
    parser.add_argument("--fit", action="store_true", help="fit the end bias on the valid songs (one checkpoint)")
    parser.add_argument("--write", action="store_true", help="with --fit: store it in the checkpoint")
    parser.add_argument("--pieces", action="append", metavar="DIR",
                        help="MIDI files (searched recursively) to compare with the songs: p(end) per bar "
                             "(repeat for more folders)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.fit:
        return fit_main(args)
    if args.pieces:
        return pieces_main(args)
    if args.write:
        parser.error("--write stores a fitted bias: give --fit")

    rows: dict[str, list[SongEnding]] = {}
    corpus = None
    for name in args.checkpoint:
        ckpt = load_model(name)
        corpus = corpus or checked_corpus(args.corpus, ckpt)
        tokenizer = ckpt.tokenizer
        end, bar = tokenizer.eos_id, tokenizer.vocab["Bar_None"]
        songs = ending_songs(corpus, args.split, end, args.songs)
        ckpt.model.eval()
        rows[name] = [song_ending(ckpt.model, ids, end, bar, args.seed)
                      for ids in tqdm(songs, desc=name, unit="song")]
    text = (f"`python -m bench.endings {' '.join(f'--checkpoint {c}' for c in args.checkpoint)} --split "
            f"{args.split} --seed {args.seed}`: the end token's probability along the songs, teacher-forced.\n\n"
            + table(rows))
    publish(args.out, "endings.md", text)
    return 0


def publish(out: str, name: str, text: str) -> None:
    """Write `text` as `name` in the folder `out` (made if missing) and print it."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    print(text)


def ending_songs(corpus: TokenCorpus, split: str, end: int, limit: int | None) -> list[list[int]]:
    """The songs of `split` that end with the `end` token (at most `limit`); SystemExit when none does."""
    songs = [list(map(int, ids)) for ids in corpus.pieces(split) if len(ids) > 1 and int(ids[-1]) == end]
    if not songs:
        raise SystemExit(f"no song of the {split} split ends with the end token")
    return songs[:limit]


def end_per_bar(model: MusicPerformer, ids: Sequence[int], end: int, bias: float, bars: int, seed: int) -> float:
    """p(end) (with `bias`) summed over a piece without its end token, per bar of the piece."""
    return float(biased(end_probability(model, ids, end, seed), bias).sum() / max(bars, 1))


def pieces_main(args: argparse.Namespace) -> int:
    """--pieces: p(end) per bar over the MIDI files of a folder against the split's songs."""
    if len(args.checkpoint) != 1:
        raise SystemExit("--pieces takes one --checkpoint")
    ckpt = load_model(args.checkpoint[0])
    tokenizer, model, bias = ckpt.tokenizer, ckpt.model.eval(), ckpt.config.generate.end_bias
    groups = {}
    for folder in args.pieces:
        files = sorted(p for p in Path(folder).rglob("*") if p.suffix.lower() in (".mid", ".midi"))
        if not files:
            raise SystemExit(f"--pieces {folder}: no MIDI files")
        groups[folder] = [strip_eos(tokenizer.encode(p), tokenizer.eos_id) for p in files]
    corpus = checked_corpus(args.corpus, ckpt)
    groups[f"{args.split} songs"] = [s[:-1] for s in ending_songs(corpus, args.split, tokenizer.eos_id, args.songs)]
    folders = " ".join(f"--pieces {folder}" for folder in args.pieces)
    lines = [f"`python -m bench.endings --checkpoint {args.checkpoint[0]} {folders} --split "
             f"{args.split} --seed {args.seed}`: p(end) summed along each piece (its end token left out), per "
             f"bar, with the end bias {bias:+g}.", "", "| pieces | count | per bar, median | mean |",
             "|---|---:|---:|---:|"]
    for label, pieces in groups.items():
        rates = [end_per_bar(model, ids, tokenizer.eos_id, bias, len(tokenizer.bar_starts(ids)), args.seed)
                 for ids in tqdm(pieces, desc=label, unit="piece")]
        lines.append(f"| {label} | {len(rates)} | {np.median(rates):.4f} | {np.mean(rates):.4f} |")
    text = "\n".join(lines) + "\n"
    publish(args.out, "end_per_bar.md", text)
    return 0


def fit_main(args: argparse.Namespace) -> int:
    """--fit: the end bias on the valid songs, measured on --split's."""
    if len(args.checkpoint) != 1:
        raise SystemExit("--fit takes one --checkpoint")
    ckpt = load_model(args.checkpoint[0])
    corpus = checked_corpus(args.corpus, ckpt)
    end = ckpt.tokenizer.eos_id
    ckpt.model.eval()
    probs = {split: [end_probability(ckpt.model, ids, end, args.seed)
                     for ids in tqdm(ending_songs(corpus, split, end, args.songs), desc=split, unit="song")]
             for split in ("valid", args.split)}
    bias = fit_end_bias(probs["valid"])
    text = (f"`python -m bench.endings --checkpoint {args.checkpoint[0]} --fit --split {args.split} --seed "
            f"{args.seed}`: the sampler's end bias, fitted by likelihood.\n\n" + fit_table(probs["valid"],
                                                                                        probs[args.split], bias))
    publish(args.out, "end_bias.md", text)
    if args.write:
        folder = set_generate_defaults(ckpt.path, end_bias=bias)
        print(f"wrote generate.end_bias={bias:g} into {folder}/meta.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
