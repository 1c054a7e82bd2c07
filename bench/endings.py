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
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from data import load_corpus
from model import MusicPerformer
from training.checkpoint import load_model

LAST_BARS = 8  # bar lines counted as the song's last ones


@torch.no_grad()
def end_probability(model: MusicPerformer, ids: Sequence[int], end: int, seed: int = 0) -> np.ndarray:
    """(len(ids) - 1,) the model's probability that the end token follows ids[:i + 1], teacher-forced
    in one pass with one positional noise drawn from `seed`."""
    device = model.head.weight.device
    tokens = torch.as_tensor(list(ids), dtype=torch.long, device=device)[None]  # (1, L)
    noise = model.draw_positional_noise(tokens.shape[1], generator=torch.Generator().manual_seed(seed))
    logits, _ = model(tokens[:, :-1], positional_noise=noise)  # (1, L - 1, V)
    return torch.softmax(logits[0].double(), dim=-1)[:, end].cpu().numpy()  # (L - 1,)


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
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    rows: dict[str, list[SongEnding]] = {}
    corpus = None
    for name in args.checkpoint:
        ckpt = load_model(name)
        corpus = corpus or load_corpus(Path(args.corpus or ckpt.config.data.root))
        tokenizer = ckpt.tokenizer
        end, bar = tokenizer.eos_id, tokenizer.vocab["Bar_None"]
        songs = [list(map(int, ids)) for ids in corpus.pieces(args.split) if len(ids) > 1 and int(ids[-1]) == end]
        if not songs:
            raise SystemExit(f"no song of the {args.split} split ends with the end token")
        songs = songs[:args.songs]
        ckpt.model.eval()
        rows[name] = [song_ending(ckpt.model, ids, end, bar, args.seed)
                      for ids in tqdm(songs, desc=name, unit="song")]
    text = (f"`python -m bench.endings {' '.join(f'--checkpoint {c}' for c in args.checkpoint)} --split "
            f"{args.split} --seed {args.seed}`: the end token's probability along the songs, teacher-forced.\n\n"
            + table(rows))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "endings.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
