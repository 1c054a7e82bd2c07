"""Does SPE extrapolate beyond the trained length? The paper's Fig. 3 / Table 6 / Fig. 5 at CPU scale.

    python -m bench.extrapolation                       # the whole study, results into bench/results/
    python -m bench.extrapolation --steps 300 --seeds 0 --jobs 2 --skip-groove   # a quicker look
    python -m bench.extrapolation --pop909 ../shared/data/pop909 --steps 800 --seeds 0 1   # on POP909

Part 1 (pop-piano style, REMI, default music21 corpus): trains, with the same budget, data order and
seed, small Performers (configs/demo.yaml: 4 layers, d_model 256, crops of 256 tokens) that differ only
in their positional encoding: APE, gated sineSPE, gated convSPE, ungated sineSPE and rotary (RoPE, our
addition beyond the paper). Then `spe-evaluate nll` measures the per-position NLL with teacher forcing
on held-out pieces up to 4x the trained length and writes, into --results:
extrapolation.csv (model, position, mean NLL, count), extrapolation.png (the curves) and
extrapolation.md (mean NLL within / beyond the trained length and their ratio, with the spread over
seeds).

With --pop909 FOLDER, part 1 runs on POP909 instead (songs split by song, REMI with TimeSig
tokens), APE against gated sineSPE only, and the NLL is averaged over the held-out test songs that
all reach 4x the trained length (`spe-evaluate nll --full-length`), so every position bin averages the
same songs; results go to extrapolation_pop909.{csv,png,md}, with the NLL at 1x, 1-2x and 2-4x the
trained length. Part 2 is then skipped.

Part 2 (groove continuation, the paper's Fig. 5): APE, gated sineSPE and gated convSPE on a band corpus,
then `spe-evaluate groove`: 2-bar prompts from held-out pieces continued to 1024 tokens, style similarity
of each quarter of the continuation to the whole piece. ``--groove-corpus mma`` (the headline): POP909's
chord charts rendered by MMA in 30 grooves (`data.groove_mma`, needs `mma` or a rendered corpus/groove_mma/
midi), crops of 512 tokens as in the paper -> groove_mma_continuation.{csv,png,md}. ``--groove-corpus trio``:
the offline stand-in of `groove.trio` (Bach chorales arranged for bass, synthetic drums and one
accompaniment track), crops of 256 -> groove_continuation.{csv,png,md}.

Every run is a separate `spe-train` process (up to --jobs at once, one torch thread each), so a
finished run is reused when the study is started again (its checkpoint is found in --out).
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from training.config import load_config
from data.build import prepare_corpus
from data.groove_mma import DEFAULT_ANNOTATIONS

logger = logging.getLogger("extrapolation")

REPO = Path(__file__).resolve().parent.parent

# positional encodings compared (label -> config overrides on top of configs/demo.yaml)
REMI_VARIANTS = {
    "APE": ["model.pe=ape"],
    "sineSPE gated": ["model.pe=sine_spe", "model.gated=true"],
    "convSPE gated": ["model.pe=conv_spe", "model.gated=true"],
    "sineSPE": ["model.pe=sine_spe", "model.gated=false"],
    "RoPE": ["model.pe=rope"],
}
GROOVE_VARIANTS = {k: REMI_VARIANTS[k] for k in ("APE", "sineSPE gated", "convSPE gated")}
POP_VARIANTS = {k: REMI_VARIANTS[k] for k in ("APE", "sineSPE gated")}
GROOVE_COMMON = ["data.format=groove", "data.transpose=5", "model.num_sines=8", "train.redraw_prob=0.0",
                 "train.redraw_every=40", "generate.temperature=0.6", "generate.top_p=1.0"]
GROOVE_CORPORA = {  # --groove-corpus -> (config overrides, stem of the result files)
    "trio": (["data.kind=trio", "data.root=corpus/trio", "data.max_pieces=200"], "groove_continuation"),
    "mma": (["data.kind=groove_mma", "data.root=corpus/groove_mma", "data.crop_len=512"],
            "groove_mma_continuation"),
}



@dataclass
class Run:
    label: str  # positional encoding, as in the tables
    seed: int  # training seed (data order, initialisation, SPE draws)
    overrides: list[str]  # config overrides of this run
    out: Path  # run directory

    @property
    def name(self) -> str:
        return f"{self.label} (seed {self.seed})"


def slug(label: str) -> str:
    return label.lower().replace(" ", "_")


def train(run: Run, steps: int, threads: int) -> float:
    """Train one run in its own process (skipped when already finished); returns the wall time."""
    if (run.out / "checkpoints" / "latest").exists() and (run.out / "finished").exists():
        logger.info("%s: already trained in %s", run.name, run.out)
        return 0.0
    cmd = [sys.executable, "-m", "apps.train", "--config", "demo", "--out", str(run.out), "--resume",
           "--max-steps", str(steps), "--set", f"train.seed={run.seed}"]
    for item in run.overrides:
        cmd += ["--set", item]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    run.out.mkdir(parents=True, exist_ok=True)
    logger.info("training %s: %s", run.name, " ".join(cmd[2:]))
    start = time.perf_counter()
    with open(run.out / "stdout.log", "w") as log:
        proc = subprocess.run(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"training {run.name} failed (exit {proc.returncode}); see {run.out}/stdout.log")
    (run.out / "finished").write_text(f"{seconds:.1f}\n")
    logger.info("%s trained in %.0f s", run.name, seconds)
    return seconds


def build_corpus_once(run: Run) -> None:
    """Build the run's corpus here, before parallel training processes would race to build it."""
    prepare_corpus(load_config("demo", run.overrides).data)


def train_all(runs: list[Run], steps: int, jobs: int) -> None:
    build_corpus_once(runs[0])
    threads = max(1, (os.cpu_count() or 1) // jobs)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(lambda r: train(r, steps, threads), runs))


def evaluate(command: str, runs: list[Run], out: Path, extra: list[str]) -> None:
    cmd = [sys.executable, "-m", "apps.evaluate", command, "--out", str(out), "--no-progress", *extra]
    for run in runs:
        cmd += ["--checkpoint", str(run.out), "--label", run.name]
    logger.info("evaluating: %s", " ".join(cmd[2:]))
    subprocess.run(cmd, cwd=REPO, check=True)


def spread_table(rows: list[dict], keys: list[str], header: str) -> str:
    """Markdown table of the mean over seeds of each key, with min-max when there are several seeds."""
    by_label: dict[str, list[dict]] = {}
    for row in rows:
        by_label.setdefault(row["label"], []).append(row)
    lines = [f"| {header} | seeds | " + " | ".join(keys) + " |", "|---|---|" + "---|" * len(keys)]
    for label, group in by_label.items():
        cells = []
        for key in keys:
            values = [float(r[key]) for r in group]
            cell = f"{statistics.mean(values):.3f}"
            if len(values) > 1:
                cell += f" ({min(values):.3f}-{max(values):.3f})"
            cells.append(cell)
        lines.append(f"| {label} | {len(group)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def pop909_data(source: Path) -> list[str]:
    """Config overrides that train on POP909 (corpus built once in runs/, beside the study's runs)."""
    return ["data.kind=pop909", f"data.source={source.resolve()}", "data.time_signatures=true",
            f"data.root={(REPO / 'corpus' / 'pop909').resolve()}"]


def remi_study(args: argparse.Namespace) -> None:
    pop = args.pop909 is not None
    variants, data, name = (POP_VARIANTS, pop909_data(args.pop909), "pop909") if pop \
        else (REMI_VARIANTS, [], "remi")
    runs = [Run(label, seed, overrides + data, args.out / name / f"{slug(label)}_s{seed}")
            for seed in args.seeds for label, overrides in variants.items() if label in args.models]
    train_all(runs, args.steps, args.jobs)
    eval_dir = args.out / name / "eval"
    evaluate("nll", runs, eval_dir, ["--max-len", str(args.max_len), "--split", "test"]
             + (["--full-length"] if pop else [])
             + (["--max-pieces", str(args.max_pieces)] if args.max_pieces else []))
    stem = "extrapolation_pop909" if pop else "extrapolation"
    shutil.copyfile(eval_dir / "nll.csv", args.results / f"{stem}.csv")
    shutil.copyfile(eval_dir / "nll.png", args.results / f"{stem}.png")
    summaries = json.loads((eval_dir / "nll_summary.json").read_text())
    rows = []
    for run, summary in zip(runs, summaries):
        rows.append({"label": run.label, "seed": run.seed, **summary})
    keys = [k for k in ("nll_within", "nll_beyond", "ratio", "nll_1_2x", "nll_2_4x")
            if summaries[0].get(k) is not None]
    table = spread_table(rows, keys, "positional encoding")
    pieces = {s["pieces"] for s in summaries if "pieces" in s}
    held_out = (f"the {pieces.pop()} held-out test songs that all reach {args.max_len} tokens" if pop and pieces
                else f"held-out pieces up to {args.max_len} tokens")
    note = (f"Trained {args.steps} steps on crops of 256 tokens (configs/demo.yaml"
            + (", POP909" if pop else "") + f"); NLL on {held_out}; seeds {', '.join(map(str, args.seeds))}.\n\n")
    (args.results / f"{stem}.md").write_text(note + table)
    print(note + table)


def groove_study(args: argparse.Namespace) -> None:
    corpus, stem = GROOVE_CORPORA[args.groove_corpus]
    data = GROOVE_COMMON + corpus
    if args.groove_corpus == "mma":
        data = data + [f"data.source={args.annotations.resolve()}"]
    name = "groove" if args.groove_corpus == "trio" else f"groove_{args.groove_corpus}"
    runs = [Run(label, seed, overrides + data, args.out / name / f"{slug(label)}_s{seed}")
            for seed in args.seeds for label, overrides in GROOVE_VARIANTS.items() if label in args.models]
    if not runs:
        return
    train_all(runs, args.steps, args.jobs)
    eval_dir = args.out / name / "eval"
    evaluate("groove", runs, eval_dir, ["--max-pieces", str(args.groove_pieces), "--tokens", "1024"])
    for suffix in ("csv", "png", "md"):
        shutil.copyfile(eval_dir / f"groove_similarity.{suffix}", args.results / f"{stem}.{suffix}")
    with open(eval_dir / "groove_similarity.csv") as handle:
        print(f"groove continuation: {sum(1 for _ in csv.reader(handle)) - 1} rows written")
    print((eval_dir / "groove_similarity.md").read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1500, help="training steps of every model")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="training seeds")
    parser.add_argument("--models", nargs="+", default=list(REMI_VARIANTS), choices=list(REMI_VARIANTS),
                        help="positional encodings to compare")
    parser.add_argument("--jobs", type=int, default=2, help="training processes at once")
    parser.add_argument("--max-len", type=int, default=1024, help="evaluate NLL up to this position")
    parser.add_argument("--max-pieces", type=int, default=None, help="held-out pieces for the NLL")
    parser.add_argument("--groove-pieces", type=int, default=12, help="held-out pieces prompted (groove)")
    parser.add_argument("--skip-groove", action="store_true", help="only the REMI extrapolation study")
    parser.add_argument("--skip-remi", action="store_true", help="only the groove continuation study")
    parser.add_argument("--groove-corpus", choices=sorted(GROOVE_CORPORA), default="mma",
                        help="part 2's band corpus: MMA renderings of POP909's charts, or the offline trio")
    parser.add_argument("--annotations", type=Path, default=DEFAULT_ANNOTATIONS,
                        help="POP909 annotations folder (--groove-corpus mma)")
    parser.add_argument("--pop909", type=Path, default=None, metavar="FOLDER",
                        help="run part 1 on the POP909 songs of FOLDER (APE vs gated sineSPE), skip part 2")
    parser.add_argument("--out", type=Path, default=Path("runs/extrapolation"), help="run directories")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results", help="tracked results")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    args.out = args.out.resolve()
    args.results.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    if not args.skip_remi:
        remi_study(args)
    if not args.skip_groove and args.pop909 is None:
        groove_study(args)
    logger.info("study finished in %.0f min", (time.perf_counter() - start) / 60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
