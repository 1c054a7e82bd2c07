"""How busy an unprompted piece's first bars are, opened as songs open or from a lone bar line.

    python -m bench.opening --checkpoint pop909_infill --corpus corpus/pop909

A training crop drawn from a song's middle starts at a bar line with nothing before it, so a piece
started from the bar line alone reads as a mid-song crop; every encoded song opens with the format's
fixed opening instead (`tokenizer.opening()`, REMI: `Bar TimeSig Beat_0 Tempo`), which the generation
request now steers an unprompted piece through (`generation.pieces.song_opening`). For each sampling
seed, in lockstep, the same request is decoded both ways (the lone bar line as prompt ids, which skip
the opening), every piece is written as MIDI and read back as the user gets it, and its first bars are
counted: tokens, onsets (Beat tokens) and notes per bar, against the held-out songs' first bars.

Prints a table, writes opening.md and opening.png (tokens per bar, bar by bar) in --out.
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

from bench import checked_corpus, save_figure  # noqa: E402
from generation.request import GenerationRequest  # noqa: E402
from tokenization import BaseTokenizer  # noqa: E402
from training.checkpoint import load_model  # noqa: E402

VARIANTS = ("lone bar line", "song opening")  # how an unprompted piece starts


@dataclass
class Counts:
    """Per piece: the first bars' token, onset and note counts, one entry per bar."""

    tokens: list[list[int]] = field(default_factory=list)
    onsets: list[list[int]] = field(default_factory=list)
    notes: list[list[int]] = field(default_factory=list)
    seed_means: list[float] = field(default_factory=list)  # tokens per bar, mean over one seed's pieces

    def add(self, tokenizer: BaseTokenizer, ids: Sequence[int], bars: int) -> float:
        """Count the first `bars` whole bars of `ids` (fewer when the piece has fewer); their mean tokens."""
        ids = np.asarray(ids)
        starts = tokenizer.bar_starts(ids.tolist())
        bounds = list(zip(starts, starts[1:]))[:bars]
        beats = np.isin(ids, tokenizer.vocab.by_type("Beat"))
        pitches = np.isin(ids, tokenizer.vocab.by_type("Note_Pitch"))
        self.tokens.append([b - a for a, b in bounds])
        self.onsets.append([int(beats[a:b].sum()) for a, b in bounds])
        self.notes.append([int(pitches[a:b].sum()) for a, b in bounds])
        return float(np.mean(self.tokens[-1])) if bounds else float("nan")

    def per_bar(self, bars: int) -> np.ndarray:
        """(bars,) mean tokens in each bar over the pieces that reach it."""
        return np.array([np.mean([t[i] for t in self.tokens if len(t) > i]) for i in range(bars)])

    def row(self, label: str) -> str:
        per_piece = np.array([np.mean(t) for t in self.tokens if t])
        onsets, notes = sum(map(sum, self.onsets)), sum(map(sum, self.notes))
        bars = sum(map(len, self.tokens))
        spread = (f"{np.std(self.seed_means):.1f} / {np.std(self.seed_means) / np.sqrt(len(self.seed_means)):.1f}"
                  if self.seed_means else "-")
        return (f"| {label} | {len(per_piece)} | {per_piece.mean():.1f} ± {per_piece.std():.1f} | {spread} | "
                f"{onsets / bars:.2f} | {notes / max(onsets, 1):.2f} |")


def written(tokenizer: BaseTokenizer, ids: Sequence[int], folder: Path) -> list[int]:
    """The piece as the user gets it: written as MIDI and read back."""
    path = folder / "piece.mid"
    tokenizer.write_midi(ids, path)
    return tokenizer.encode(path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default=None, help="run, checkpoint or shipped model (default: the default)")
    parser.add_argument("--corpus", default=None,
                        help="token corpus of the real songs (default: the model's data.root)")
    parser.add_argument("--split", default="test", help="split of the real songs (default: %(default)s)")
    parser.add_argument("--seeds", type=int, default=16, help="sampling seeds (default: %(default)s)")
    parser.add_argument("--first-seed", type=int, default=100, help="the first sampling seed (default: %(default)s)")
    parser.add_argument("--pieces", type=int, default=2, help="pieces per seed, one batch (default: %(default)s)")
    parser.add_argument("--tokens", type=int, default=1800, help="new tokens per piece (default: %(default)s)")
    parser.add_argument("--bars", type=int, default=16, help="first bars counted (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s)")
    parser.add_argument("--out", default="bench/results", help="folder of opening.md and opening.png")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    ckpt = load_model(args.checkpoint)
    tokenizer = ckpt.tokenizer
    if not tokenizer.opening():
        raise SystemExit(f"{type(tokenizer).__name__} fixes no opening: nothing to compare")
    real = Counts()
    for ids in checked_corpus(args.corpus, ckpt).pieces(args.split):
        real.add(tokenizer, [int(i) for i in ids], args.bars)
    counts = {variant: Counts() for variant in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in tqdm(range(args.first_seed, args.first_seed + args.seeds), desc="seeds", unit="seed"):
            for variant in VARIANTS:  # lockstep: both ways at every seed
                prompt = [tokenizer.start_id] if variant == VARIANTS[0] else None
                request = GenerationRequest(tokens=args.tokens, seed=seed, end=False, num_samples=args.pieces,
                                            prompt_ids=prompt)
                means = [counts[variant].add(tokenizer, written(tokenizer, r.tokens, Path(tmp)), args.bars)
                         for r in request.run(ckpt)]
                whole = [m for m in means if not np.isnan(m)]  # pieces with at least one whole bar
                if whole:
                    counts[variant].seed_means.append(float(np.mean(whole)))

    label = args.checkpoint or "the default model"
    text = (f"`python -m bench.opening --checkpoint {label} --seeds {args.seeds} --first-seed {args.first_seed} "
            f"--pieces {args.pieces} --tokens {args.tokens} --bars {args.bars}`: the first {args.bars} bars of "
            f"unprompted pieces, written as MIDI and read back, against the {args.split} songs' first bars.\n\n"
            "| start | pieces | tokens per bar (mean ± std over pieces) | std / s.e. over seeds | onsets per bar | "
            "notes per onset |\n|---|---:|---:|---:|---:|---:|\n"
            + "\n".join(counts[v].row(v) for v in VARIANTS) + "\n" + real.row(f"real songs ({args.split})") + "\n")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "opening.md").write_text(text)
    plot(counts, real, args.bars, out / "opening.png")
    print(text)
    return 0


def plot(counts: dict[str, Counts], real: Counts, bars: int, path: Path) -> None:
    """Tokens per bar, bar by bar: each start against the real songs (mean ± std)."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    x = np.arange(1, bars + 1)
    mean = real.per_bar(bars)
    std = np.array([np.std([t[i] for t in real.tokens if len(t) > i]) for i in range(bars)])
    ax.fill_between(x, mean - std, mean + std, color="0.85", label="real songs, ± 1 std")
    ax.plot(x, mean, color="0.3", label="real songs")
    for variant, style in zip(VARIANTS, ("--", "-")):
        ax.plot(x, counts[variant].per_bar(bars), style, marker="o", markersize=3, label=variant)
    ax.set(xlabel="bar", ylabel="tokens per bar", title="First bars of unprompted pieces")
    ax.legend(fontsize=8)
    save_figure(fig, path, dpi=120)


if __name__ == "__main__":
    raise SystemExit(main())
