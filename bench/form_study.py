"""What makes a returning section come back? A POP909 study at equal tokens, 2 seeds.

    python -m bench.form_study                       # train every variant, then measure
    python -m bench.form_study --steps 20 --seeds 0 --variants crops state   # a quick look

Every variant fine-tunes the shipped `pop909_whole` (6 layers, d_model 256, decayed state with
horizons up to 2,048 tokens) for --steps steps of 2 x 2,048 tokens, the same token budget, differing in:

- crops: independent 2,048-token crops starting at a random bar from an empty state, the ending
  drawn as often as a middle (data.end_crops): the recipe pop909_whole itself was trained with;
- state: state passing (data.state_passing): two streams read whole songs from their first token, in
  consecutive 2,048-token segments, each from the recurrent state the previous segment left
  (truncated backpropagation through the state): openings are learned from real openings only, and a
  song's later sections with its earlier ones in the state;
- state + memory head: the same, and one of the 8 heads of every layer never forgets
  (model.memory_heads=1), so that a section 50 bars back is still in the state.

Each run is then measured on held-out test songs whose human phrase labels fall on our bars:

1. memory: the teacher-forced NLL of a returning phrase's tokens, read after the song before it,
   against the same tokens read with the earlier phrases of its label cut out (evaluation.form
   memory_gain): the gain in nats per token is what remembering the first occurrence gives;
2. whole-song NLL (from the song's start, up to --max-len tokens) and the crops' validation loss;
3. unconditional pieces (--pieces per run, capped at --tokens): tokens per bar over bars 1-16 and
   17-64, bar repetition, length in bars (`spe-evaluate quality`).

form_study.md holds the table (mean over seeds, min-max), form_study.png the validation curves.
Runs are separate `spe-train` processes, one at a time; a finished run is reused and a killed one
resumes.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bench import save_figure  # noqa: E402
from bench.extrapolation import REPO, Run, slug, spread_table  # noqa: E402

logger = logging.getLogger("form_study")

BASE = "pop909_whole"  # the shipped model every variant starts from
CORPUS = "corpus/pop909_bars"  # POP909 with its bars aligned on the annotated downbeats (data.downbeats)
VARIANTS = {
    "crops": ["data.end_crops=true"],
    "state": ["data.state_passing=true", "data.end_crops=false"],
    "state + memory head": ["data.state_passing=true", "data.end_crops=false", "model.memory_heads=1"],
}
RECIPE = ["train.batch_size=2", "data.crop_len=2048", "train.lr=2e-4", "train.warmup_steps=10",
          "train.min_lr=1e-5", "train.eval_every=25", "train.eval_batches=20", "train.ckpt_every=25",
          "train.device=cpu", "train.keep_checkpoints=1"]
KEYS = ("memory_gain", "nll_song", "val_loss", "tokens_per_bar_1_16", "tokens_per_bar_17_64", "repetition",
        "bars")


def study_runs(args: argparse.Namespace) -> list[Run]:
    data = [f"data.source={args.pop909}", "data.kind=pop909", f"data.root={CORPUS}",
            f"data.downbeats={args.pop909.parent / 'pop909_annotations'}"]
    return [Run(label, seed, VARIANTS[label] + RECIPE + data + [f"train.seed={seed}"],
                args.out / f"{slug(label).replace('+', 'plus')}_s{seed}")
            for seed in args.seeds for label in args.variants]


def train(run: Run, steps: int) -> None:
    """Train one run in its own process (skipped when finished, resumed when killed)."""
    if (run.out / "finished").exists():
        logger.info("%s: already trained in %s", run.name, run.out)
        return
    cmd = [sys.executable, "-m", "apps.train", "--init-from", BASE, "--out", str(run.out), "--resume",
           "--max-steps", str(steps)]
    for item in run.overrides:
        cmd += ["--set", item]
    run.out.mkdir(parents=True, exist_ok=True)
    logger.info("training %s: %s", run.name, " ".join(cmd[2:]))
    start = time.perf_counter()
    with open(run.out / "stdout.log", "a") as log:
        proc = subprocess.run(cmd, cwd=REPO, env=dict(os.environ), stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise RuntimeError(f"training {run.name} failed (exit {proc.returncode}); see {run.out}/stdout.log")
    (run.out / "finished").write_text(f"{time.perf_counter() - start:.1f}\n")


def validation_curve(run: Run) -> list[tuple[int, float]]:
    with open(run.out / "metrics.csv", newline="") as handle:
        return [(int(r["step"]), float(r["val_loss"])) for r in csv.DictReader(handle)
                if r.get("val_loss") not in (None, "", "nan")]


def measure(run_dirs: list[tuple[str, int, Path]], args: argparse.Namespace) -> list[dict]:
    """The memory, NLL and generation measures of every run (cached per run in form_measures.json)."""
    rows = []
    for label, seed, path in run_dirs:
        cache = args.out / "measures" / f"{path.name}.json"
        if not cache.exists():
            cache.parent.mkdir(parents=True, exist_ok=True)
            cmd = [sys.executable, "-m", "apps.evaluate", "form", "--checkpoint", str(path), "--corpus", CORPUS,
                   "--out", str(args.out / "eval" / path.name), "--songs", str(args.songs),
                   "--max-len", str(args.max_len), "--pieces", str(args.pieces), "--tokens", str(args.tokens),
                   "--json", str(cache),
                   "--no-progress"]
            logger.info("measuring %s: %s", path, " ".join(cmd[2:]))
            subprocess.run(cmd, cwd=REPO, check=True)
        rows.append({"label": label, "seed": seed, **json.loads(cache.read_text())})
    return rows


def plot_curves(runs: list[Run], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    colours = {label: f"C{i}" for i, label in enumerate(VARIANTS)}
    for run in runs:
        curve = validation_curve(run)
        if curve:
            ax.plot(*zip(*curve), color=colours[run.label], ls="-" if run.seed == runs[0].seed else "--",
                    marker="o", ms=3, label=run.name)
    ax.set_xlabel("step (2 x 2,048 tokens)")
    ax.set_ylabel("validation loss (crops, nats per token)")
    ax.legend(fontsize=7)
    save_figure(fig, path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pop909", type=Path, default=REPO.parent / "shared" / "data" / "pop909",
                        help="the POP909 folder (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=120, help="training steps of every run (default: %(default)s)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="training seeds")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--songs", type=int, default=20, help="labelled test songs measured (default: %(default)s)")
    parser.add_argument("--max-len", type=int, default=8192, help="song NLL up to this token (default: %(default)s)")
    parser.add_argument("--pieces", type=int, default=3, help="generated pieces per run (default: %(default)s)")
    parser.add_argument("--tokens", type=int, default=8192, help="token cap of a piece (default: %(default)s)")
    parser.add_argument("--skip-train", action="store_true", help="measure the runs already trained")
    parser.add_argument("--train-only", action="store_true", help="train the runs, measure nothing")
    parser.add_argument("--out", type=Path, default=Path("runs/form_study"), help="run directories")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results", help="tracked results")
    args = parser.parse_args(argv)
    if not args.pop909.is_dir():
        parser.error(f"--pop909 {args.pop909} is not a folder (the study needs the POP909 songs)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    args.out, args.pop909 = args.out.resolve(), args.pop909.resolve()
    args.results.mkdir(parents=True, exist_ok=True)
    runs = study_runs(args)
    if not args.skip_train:
        for run in runs:
            train(run, args.steps)
    if args.train_only:
        return 0
    trained = [run for run in runs if (run.out / "finished").exists()]
    rows = measure([("pop909_whole (start)", 0, REPO / "pretrained" / BASE)]
                   + [(run.label, run.seed, run.out) for run in trained], args)
    for row, run in zip(rows[1:], trained):
        row["val_loss"] = validation_curve(run)[-1][1]
    rows[0]["val_loss"] = float("nan")
    plot_curves(trained, args.results / "form_study.png")
    text = (f"Each variant fine-tunes `{BASE}` for {args.steps} steps of 2 x 2,048 tokens "
            f"({args.steps * 4096 / 1e6:.2f} M tokens), seeds {', '.join(map(str, args.seeds))}; "
            f"measured on {args.songs} labelled test songs and {args.pieces} pieces per run "
            f"(cap {args.tokens} tokens). memory_gain: nats per token a returning phrase gains from its "
            f"first occurrence; nll_song: teacher-forced NLL from the song's start up to {args.max_len} "
            f"tokens; val_loss: the crops' validation loss at the end.\n\n"
            + spread_table(rows, list(KEYS), "variant"))
    (args.results / "form_study.md").write_text(text)
    with open(args.results / "form_study.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["label", "seed", *KEYS], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
