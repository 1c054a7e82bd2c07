"""Validation loss against training step for several runs: a plot, and a table.

Reads each run directory's metrics.csv (written by train.py); a run stopped early is compared with the
others up to its last validation. Used to choose the pop model's size and crop length from measured
validation loss (pretrained/pop909/README.md).

    python -m bench.val_curves runs/pop909_sine runs/pop909_ape --labels "sineSPE gated" APE \
        --out bench/results/pop909_runs
Writes OUT.png, OUT.csv (step, one column per run) and OUT.md (the table at every 500th step and at
each run's last validation; - where a run has none).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

from bench import save_figure  # noqa: E402

TABLE_EVERY = 500  # steps between the rows of the markdown table (and each run's last validation)


def read_validation(run: Path) -> dict[int, float]:
    """{step: validation loss} of a run directory's metrics.csv."""
    path = run / "metrics.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{run} has no metrics.csv (not a train.py run directory)")
    with open(path) as f:
        return {int(row["step"]): float(row["val_loss"]) for row in csv.DictReader(f) if row["val_loss"]}


def write_results(curves: dict[str, dict[int, float]], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    steps = sorted(set().union(*curves.values()))
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["step", *curves])
        writer.writerows([step, *(curve.get(step, "") for curve in curves.values())] for step in steps)
    last = {max(curve) for curve in curves.values() if curve}
    rows = [s for s in steps if s % TABLE_EVERY == 0 or s in last]
    lines = ["| step | " + " | ".join(curves) + " |", "|---:|" + "---:|" * len(curves)]
    lines += [f"| {s:,} | " + " | ".join(f"{curve[s]:.3f}" if s in curve else "-" for curve in curves.values())
              + " |" for s in rows]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, curve in curves.items():
        ax.plot(list(curve), list(curve.values()), marker=".", label=label)
    ax.set_xlabel("training step")
    ax.set_ylabel("validation loss (nats per token)")
    ax.grid(alpha=0.3)
    ax.legend()
    save_figure(fig, out.with_suffix(".png"), dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories")
    parser.add_argument("--labels", nargs="+", default=None, help="one name per run (default: folder names)")
    parser.add_argument("--out", type=Path, required=True, help="output path without suffix")
    args = parser.parse_args(argv)
    labels = args.labels or [run.name for run in args.runs]
    if len(labels) != len(args.runs):
        parser.error(f"{len(args.runs)} runs but {len(labels)} labels")
    curves = {label: read_validation(run) for label, run in zip(labels, args.runs)}
    write_results(curves, args.out)
    print(args.out.with_suffix(".md").read_text(), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
