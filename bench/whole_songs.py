"""What keeps a linear transformer's music and NLL steady far beyond its trained length? A POP909 study.

    python -m bench.whole_songs                                    # the study, results into bench/results/
    python -m bench.whole_songs --steps 100 --seeds 0 --models APE "sineSPE gated"   # a quick look

Small Performers (configs/demo.yaml: 4 layers, 4 heads, d_model 192) are trained on POP909 crops of
--crop tokens (default 512), with the same token budget, data order and seed, differing only in their
positional encoding and in whether the attention state decays:

- APE, RoPE and gated sineSPE as they are: every head of the causal linear attention sums over the
  whole past, so its normaliser and its mix of near and far keys keep changing with the position, and
  beyond the crop they reach values training never showed;
- "+ decay" (`model.decay_horizon` = the crop): the heads forget with horizons spaced geometrically
  from 32 tokens to the crop, as RetNet's multi-scale retention (Sun et al., 2023) and the decays of
  Gated Linear Attention and Toeplitz Neural Networks do, the models reported flat far beyond their
  training length. Once a position is past the longest horizon the attention's statistics no longer
  depend on it, and every horizon fits in a training crop.

Each model is then measured two ways, on held-out test songs:

1. teacher-forced NLL per position up to --max-len (default 8x the crop), averaged over the songs
   that all reach it (`spe-evaluate nll --full-length`): whole_songs_nll.{csv,png} and the table;
2. --pieces unconditional pieces of --tokens tokens each (default 8x the crop), measured along the
   piece (`spe-evaluate quality`): tokens per bar, pitch-class entropy, polyphony and empty beats per
   16-bar window against the real songs', song length and bar repetition: whole_songs_windows.{csv,png}.

whole_songs.md gathers both tables (mean over seeds, with the min-max). Runs are separate `spe-train`
processes (up to --jobs at once, one torch thread each); a finished run is reused when the study is
started again, and a killed one resumes.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import statistics
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bench import save_figure  # noqa: E402
from bench.extrapolation import REPO, Run, evaluate, pop909_data, slug, spread_table, train_all  # noqa: E402

logger = logging.getLogger("whole_songs")

# label -> config overrides on top of configs/demo.yaml; {crop} is the training crop length
VARIANTS = {
    "APE": ["model.pe=ape"],
    "RoPE": ["model.pe=rope"],
    "sineSPE gated": ["model.pe=sine_spe", "model.gated=true"],
    "sineSPE gated + decay": ["model.pe=sine_spe", "model.gated=true", "model.decay_horizon={crop}"],
    "RoPE + decay": ["model.pe=rope", "model.decay_horizon={crop}"],
}
NLL_KEYS = ("nll_0_1x", "nll_1_2x", "nll_2_4x", "nll_4_8x", "ratio")
WINDOW_KEYS = ("tokens_per_bar", "pitch_class_entropy", "polyphony", "empty_beat_rate")
SONG_KEYS = ("bars", "repetition")
REAL = "real"


def study_runs(args: argparse.Namespace) -> list[Run]:
    data = pop909_data(args.pop909) + [f"data.crop_len={args.crop}",
                                       f"train.batch_size={args.batch}", "train.eval_batches=8",
                                       f"train.ckpt_every={min(100, args.steps)}"]
    return [Run(label, seed, [o.format(crop=args.crop) for o in VARIANTS[label]] + data,
                args.out / f"{slug(label).replace('+', 'plus')}_s{seed}")
            for seed in args.seeds for label in args.models]


def nll_part(runs: list[Run], args: argparse.Namespace) -> str:
    eval_dir = args.out / "eval_nll"
    evaluate("nll", runs, eval_dir, ["--max-len", str(args.max_len), "--split", "test", "--full-length",
                                     "--max-pieces", str(args.nll_pieces), "--seed", "0"])
    (args.results / "whole_songs_nll.csv").write_bytes((eval_dir / "nll.csv").read_bytes())
    (args.results / "whole_songs_nll.png").write_bytes((eval_dir / "nll.png").read_bytes())
    summaries = json.loads((eval_dir / "nll_summary.json").read_text())
    rows = [{"label": run.label, **{k: s[k] for k in NLL_KEYS}} for run, s in zip(runs, summaries)]
    pieces = summaries[0]["pieces"]
    return (f"Teacher-forced NLL (nats per token) on the {pieces} held-out test songs that all reach "
            f"{args.max_len} tokens, by position in multiples of the {args.crop}-token crop; ratio = "
            f"beyond / within the crop.\n\n" + spread_table(rows, list(NLL_KEYS), "model"))


def window_rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "quality_windows.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def quality_part(runs: list[Run], args: argparse.Namespace) -> str:
    """Generate and measure each run's pieces along the piece; gather every run's windows."""
    gathered: list[dict[str, str]] = []
    for run in runs:
        out = args.out / "eval_quality" / run.out.name
        if not (out / "quality_windows.csv").exists():
            evaluate("quality", [run], out, ["--mode", "unconditional", "--pieces", str(args.pieces),
                                             "--tokens", str(args.tokens), "--real-pieces", str(args.real_pieces),
                                             "--full-real", "--seed", "11"])
        for row in window_rows(out):
            if row["source"] == REAL and runs.index(run) > 0:
                continue  # the real songs are the same for every run: keep one copy
            gathered.append({**row, "label": REAL if row["source"] == REAL else run.label,
                             "seed": "" if row["source"] == REAL else str(run.seed)})
    with open(args.results / "whole_songs_windows.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(gathered[0]))
        writer.writeheader()
        writer.writerows(gathered)
    labels = [REAL] + list(dict.fromkeys(r.label for r in runs))
    plot_windows(gathered, labels, args.results / "whole_songs_windows.png")
    return windows_markdown(gathered, labels, args)


def window_means(rows: list[dict[str, str]], label: str, key: str) -> dict[int, list[float]]:
    """Per window index, the values of `key` over the label's pieces."""
    values: dict[int, list[float]] = {}
    for row in rows:
        if row["label"] == label and row["window"] != "" and row[key] not in ("", "nan"):
            values.setdefault(int(row["window"]), []).append(float(row[key]))
    return values


def song_values(rows: list[dict[str, str]], label: str, key: str) -> list[float]:
    """One value per piece (its first row), NaNs left out."""
    seen, values = set(), []
    for row in rows:
        ident = (row["seed"], row["piece"])
        if row["label"] == label and ident not in seen:
            seen.add(ident)
            if row[key] not in ("", "nan"):
                values.append(float(row[key]))
    return values


def windows_markdown(rows: list[dict[str, str]], labels: list[str], args: argparse.Namespace) -> str:
    lines = [f"Unconditional pieces ({args.pieces} per run, capped at {args.tokens} tokens) against "
             f"{args.real_pieces} held-out real songs: per 16-bar window, mean over pieces (pieces "
             f"reaching it in brackets); song length (median bars) and bar repetition (mean).\n",
             "| model | " + " | ".join(SONG_KEYS) + " | window | " + " | ".join(WINDOW_KEYS) + " |",
             "|---|---:|---:|---|" + "---:|" * len(WINDOW_KEYS)]
    for label in labels:
        bars = song_values(rows, label, "bars")
        repetition = song_values(rows, label, "repetition")
        song = [f"{statistics.median(bars):.0f}" if bars else "-",
                f"{statistics.mean(repetition):.3f}" if repetition else "-"]
        by_key = {key: window_means(rows, label, key) for key in WINDOW_KEYS}
        for window in range(4):
            cells = []
            for key in WINDOW_KEYS:
                values = by_key[key].get(window, [])
                cells.append(f"{statistics.mean(values):.3g} ({len(values)})" if values else "-")
            first = f"{window * 16 + 1}-{window * 16 + 16}"
            lines.append(f"| {label if window == 0 else ''} | {' | '.join(song) if window == 0 else ' | '} "
                         f"| {first} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_windows(rows: list[dict[str, str]], labels: list[str], path: Path) -> None:
    fig, axes = plt.subplots(1, len(WINDOW_KEYS), figsize=(4.2 * len(WINDOW_KEYS), 3.6))
    for ax, key in zip(axes, WINDOW_KEYS):
        for label in labels:
            values = window_means(rows, label, key)
            windows = sorted(w for w in values if len(values[w]) >= 2)
            if not windows:
                continue
            centres = [w * 16 + 8.5 for w in windows]
            means = [statistics.mean(values[w]) for w in windows]
            if label == REAL:
                stds = [statistics.stdev(values[w]) for w in windows]
                ax.fill_between(centres, [m - s for m, s in zip(means, stds)],
                                [m + s for m, s in zip(means, stds)], color="0.85", label="real ± std")
                ax.plot(centres, means, color="0.4", lw=2)
            else:
                ax.plot(centres, means, marker="o", lw=1.2, label=label)
        ax.set_title(key.replace("_", " "))
        ax.set_xlabel("bar (window centre)")
    axes[0].legend(fontsize=7)
    save_figure(fig, path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pop909", type=Path, default=REPO.parent / "shared" / "data" / "pop909",
                        help="the POP909 folder (default: %(default)s)")
    parser.add_argument("--crop", type=int, default=512, help="training crop length (default: %(default)s)")
    parser.add_argument("--batch", type=int, default=8, help="crops per step (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=400, help="training steps of every model (default: %(default)s)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="training seeds")
    parser.add_argument("--models", nargs="+", default=list(VARIANTS), choices=list(VARIANTS),
                        help="the variants compared")
    parser.add_argument("--jobs", type=int, default=2, help="training processes at once")
    parser.add_argument("--max-len", type=int, default=None, help="NLL up to this position (default: 8x the crop)")
    parser.add_argument("--nll-pieces", type=int, default=40, help="test songs for the NLL (default: %(default)s)")
    parser.add_argument("--pieces", type=int, default=4, help="generated pieces per run (default: %(default)s)")
    parser.add_argument("--tokens", type=int, default=None, help="token cap of a piece (default: 8x the crop)")
    parser.add_argument("--real-pieces", type=int, default=40, help="real songs compared (default: %(default)s)")
    parser.add_argument("--skip-quality", action="store_true", help="only the NLL part")
    parser.add_argument("--out", type=Path, default=Path("runs/whole_songs"), help="run directories")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results", help="tracked results")
    args = parser.parse_args(argv)
    if not args.pop909.is_dir():
        parser.error(f"--pop909 {args.pop909} is not a folder (the study needs the POP909 songs)")
    args.max_len = args.max_len or 8 * args.crop
    args.tokens = args.tokens or 8 * args.crop
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    args.out = args.out.resolve()
    args.results.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    runs = study_runs(args)
    train_all(runs, args.steps, args.jobs)
    text = (f"Trained {args.steps} steps of {args.batch} x {args.crop} tokens each "
            f"({args.steps * args.batch * args.crop / 1e6:.2f}M tokens; configs/demo.yaml on POP909), "
            f"seeds {', '.join(map(str, args.seeds))}.\n\n" + nll_part(runs, args))
    if not args.skip_quality:
        text += "\n" + quality_part(runs, args)
    (args.results / "whole_songs.md").write_text(text)
    print(text)
    logger.info("study finished in %.0f min", (time.perf_counter() - start) / 60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
