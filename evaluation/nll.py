"""Per-position validation NLL with teacher forcing (paper Fig. 3 / Table 6), for one or more models.

Each held-out piece is read up to `max_len` tokens (shorter pieces up to their length) in one
parallel forward pass with ONE positional noise drawn for that piece. The NLL of predicting token
n + 1 from tokens 0 .. n (the model's loss, per position) is accumulated at position n, with the
number of pieces that reach it, so the curve shows how the model behaves within and beyond the
trained length (extrapolation).
"""

from __future__ import annotations

import csv
import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from generation.outputs import AtomicOutputs
from model import MusicPerformer

logger = logging.getLogger(__name__)


# position bands in multiples of the trained length: (name, from, to)
BANDS = (("0_1x", 0.0, 1.0), ("1_2x", 1.0, 2.0), ("2_4x", 2.0, 4.0), ("4_8x", 4.0, 8.0))


@dataclass
class NLLCurve:
    label: str  # model name in tables and plots
    trained_len: int  # training crop length of the model (tokens)
    sums: np.ndarray  # (max_len,) float64: summed NLL (nats) at each position
    counts: np.ndarray  # (max_len,) int64: number of pieces reaching each position

    @property
    def mean(self) -> np.ndarray:
        """(max_len,) mean NLL per position (NaN where no piece reaches)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.counts > 0, self.sums / np.maximum(self.counts, 1), np.nan)

    def summary(self) -> dict[str, Any]:
        """Token-weighted mean NLL within and beyond the trained length, and beyond / within."""
        cut = min(self.trained_len, len(self.sums))
        within_tokens, beyond_tokens = int(self.counts[:cut].sum()), int(self.counts[cut:].sum())
        within = float(self.sums[:cut].sum() / within_tokens) if within_tokens else math.nan
        beyond = float(self.sums[cut:].sum() / beyond_tokens) if beyond_tokens else math.nan
        return {"model": self.label, "trained_len": self.trained_len, "pieces": int(self.counts[0]),
                "nll_within": within,
                "nll_beyond": beyond,
                "ratio": beyond / within if within_tokens and beyond_tokens else math.nan,
                "tokens_within": within_tokens, "tokens_beyond": beyond_tokens,
                **{f"nll_{name}": self.band_mean(low, high) for name, low, high in BANDS}}

    def band_mean(self, low: float, high: float) -> float:
        """Token-weighted mean NLL over positions [low, high) x the trained length (NaN if none)."""
        start, stop = int(low * self.trained_len), min(int(high * self.trained_len), len(self.sums))
        tokens = int(self.counts[start:stop].sum()) if start < stop else 0
        return float(self.sums[start:stop].sum() / tokens) if tokens else math.nan


@torch.no_grad()
def position_nll(model: MusicPerformer, pieces: Sequence[np.ndarray], max_len: int,
                 generator: torch.Generator | None = None, progress: bool = False
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(sums, counts), each (max_len,): NLL summed over pieces at each position, and coverage."""
    model.eval()
    device = model.head.weight.device
    sums = np.zeros(max_len, dtype=np.float64)
    counts = np.zeros(max_len, dtype=np.int64)
    for piece in tqdm(pieces, desc="teacher forcing", unit="piece", disable=not progress):
        length = min(len(piece) - 1, max_len)
        if length < 1:
            continue
        ids = torch.as_tensor(np.asarray(piece[:length + 1], dtype=np.int64), device=device)  # (n+1,)
        noise = model.draw_positional_noise(length, generator=generator, formed=False)
        _, nll = model(ids[None, :-1], ids[None, 1:], positional_noise=noise, reduction="none")  # (1, n)
        sums[:length] += nll[0].double().cpu().numpy()
        counts[:length] += 1
    return sums, counts


def usable_length(model: MusicPerformer, max_len: int, label: str) -> int:
    """max_len, or the model's max_positions when smaller (e.g. learned APE; positions beyond it are
    left empty)."""
    limit = model.max_positions
    if limit is not None and limit < max_len:
        logger.warning("%s: pe=%s knows %d positions; its curve stops there", label, model.cfg.pe, limit)
        return limit
    return max_len


def evaluate_nll(models: Sequence[tuple[str, Any]], pieces: Sequence[np.ndarray], max_len: int,
                 seed: int, progress: bool = False) -> list[NLLCurve]:
    """One NLLCurve per (label, checkpoint), all on the same pieces with the same code seed."""
    curves = []
    for label, ckpt in models:
        limit = usable_length(ckpt.model, max_len, label)
        generator = torch.Generator(device=ckpt.model.head.weight.device).manual_seed(seed)
        sums, counts = position_nll(ckpt.model, pieces, limit, generator, progress)
        sums = np.pad(sums, (0, max_len - limit))
        counts = np.pad(counts, (0, max_len - limit))
        curves.append(NLLCurve(label=label, trained_len=ckpt.config.data.crop_len, sums=sums, counts=counts))
    return curves


def summary_markdown(curves: Sequence[NLLCurve]) -> str:
    """The within / beyond table as markdown, with the bands of BANDS (0-1x, 1-2x, 2-4x the trained
    length)."""
    bands = " | ".join(f"NLL {name.replace('_', '-')}" for name, _, _ in BANDS)
    lines = ["| model | trained length | NLL within | NLL beyond | beyond / within | tokens within "
             f"| tokens beyond | {bands} |",
             "|---|---:|---:|---:|---:|---:|---:|" + "---:|" * len(BANDS)]
    for curve in curves:
        s = curve.summary()
        band_cells = " | ".join(f"{s[f'nll_{name}']:.4f}" for name, _, _ in BANDS)
        lines.append(f"| {s['model']} | {s['trained_len']} | {s['nll_within']:.4f} | {s['nll_beyond']:.4f} "
                     f"| {s['ratio']:.4f} | {s['tokens_within']} | {s['tokens_beyond']} | {band_cells} |")
    return "\n".join(lines) + "\n"


def write_nll_outputs(curves: Sequence[NLLCurve], out_dir: Path, smooth: int) -> str:
    """nll.csv, nll.png, nll_summary.md and nll_summary.json in out_dir; returns the markdown table."""
    table = summary_markdown(curves)
    with AtomicOutputs() as outputs:
        with outputs.temp(out_dir / "nll.csv").open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["model", "position", "mean_nll", "count"])
            for curve in curves:
                for position, (mean, count) in enumerate(zip(curve.mean, curve.counts)):
                    writer.writerow([curve.label, position, "" if count == 0 else f"{mean:.6f}", int(count)])
        plot_curves(curves, outputs.temp(out_dir / "nll.png"), smooth)
        outputs.temp(out_dir / "nll_summary.md").write_text(table)
        summaries = [_json_safe(curve.summary()) for curve in curves]
        outputs.temp(out_dir / "nll_summary.json").write_text(json.dumps(summaries, indent=1) + "\n")
    return table


def _json_safe(values: dict[str, Any]) -> dict[str, Any]:
    """NaN -> None (JSON has no NaN)."""
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in values.items()}


def moving_average(values: np.ndarray, window: int) -> np.ndarray:
    """Centred moving average ignoring NaNs (window clipped to the length)."""
    window = max(1, min(window, len(values)))
    valid = ~np.isnan(values)
    kernel = np.ones(window)
    total = np.convolve(np.where(valid, values, 0.0), kernel, mode="same")
    count = np.convolve(valid.astype(np.float64), kernel, mode="same")
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(valid & (count > 0), total / np.maximum(count, 1), np.nan)


def plot_curves(curves: Sequence[NLLCurve], path: Path, smooth: int) -> None:
    """NLL per position (thin: raw, thick: moving average), trained lengths as dashed lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(9.0, 4.5))
    for index, curve in enumerate(curves):
        colour = plt.get_cmap("tab10")(index % 10)
        positions = np.arange(len(curve.sums))
        axes.plot(positions, curve.mean, color=colour, alpha=0.25, linewidth=0.5)
        axes.plot(positions, moving_average(curve.mean, smooth), color=colour, linewidth=1.5,
                  label=curve.label)
    for trained in sorted({curve.trained_len for curve in curves}):
        axes.axvline(trained, color="black", linestyle="--", linewidth=1.0)
        axes.text(trained, 1.0, f" trained length {trained}", transform=axes.get_xaxis_transform(),
                  va="top", fontsize="small")
    axes.set_xlabel("position (tokens)")
    axes.set_ylabel(f"NLL (nats), moving average over {smooth}")
    axes.legend(loc="upper left")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
