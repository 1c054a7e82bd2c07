"""Quality along the piece: song length, every metric per 16-bar window, and bar repetition.

A model can hold its texture for 16 bars and drift after, or never repeat itself: whole-piece means
hide both. For one measured piece (the same cut as `evaluation.quality.measure`) this gives:

* ``bars``: its length in bars, to the bar of its last note;
* per window of WINDOW_BARS bars (bars 1-16, 17-32, ...; only windows the piece fills to their last
  bar), every metric of `evaluation.quality_metrics.METRICS` on the notes starting in the window, and
  ``tokens_per_bar`` (REMI tokens per bar in the window);
* ``repetition``: how much of the song's material comes back, a bar self-similarity measure. A bar's
  content is the set of its (onset within the bar, pitch) pairs; two bars' similarity is the Jaccard
  index of their sets (1: the same notes at the same places). For every bar with notes from bar
  REPEAT_LAG + 1 on, take its best similarity with any bar at least REPEAT_LAG bars earlier;
  ``repetition`` is their mean. Pop songs restate whole sections (a verse, a chorus) 8 or more bars
  later, note for note or nearly; a lag of at least 8 bars ignores the bar-to-bar sameness of an
  accompaniment pattern, which a piece that holds its texture but never restates a section also
  has. Transposed or varied restatements count partly. NaN below REPEAT_LAG + 1 bars.

Window targets are those of the whole-piece metrics, applied to each window against the real pieces'
same window (`window_target_met`: within one std of their mean; the empty-beat rate at most twice
theirs or EMPTY_BEAT_FLOOR, whichever is larger), and ``tokens_per_bar`` within one std.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from evaluation.quality_metrics import METRICS, NotePiece, piece_metrics

WINDOW_BARS = 16  # bars per window
REPEAT_LAG = 8  # the smallest distance in bars at which a bar's restatement counts
EMPTY_BEAT_FLOOR = 0.02  # the empty-beat rate a window may reach whatever the real pieces' rate
MIN_BAND = 5  # real pieces a window needs for its band to be drawn (fewer: a line through a few songs)
TABLE_WINDOWS = 4  # windows every table shows (bars 1-64), more where a model's pieces reach them
TOKENS_PER_BAR = "tokens_per_bar"
WINDOW_MEASURES = tuple(m.name for m in METRICS) + (TOKENS_PER_BAR,)
TITLES = {**{m.name: m.title for m in METRICS}, TOKENS_PER_BAR: "tokens per bar"}


@dataclass
class Along:
    bars: int  # length in bars, to the bar of the last note
    repetition: float  # mean best bar similarity at lags >= REPEAT_LAG (NaN when too short)
    windows: list[dict[str, float]] = field(default_factory=list)  # per filled window: WINDOW_MEASURES


def along(piece: NotePiece, bar_tokens: Sequence[int]) -> Along:
    """The measures of a piece whose bar lines start at 0; bar_tokens[b]: tokens of its bar b."""
    bars = len(piece.bars) - 1 if piece.num_notes else 0
    windows = []
    for first in range(0, bars - WINDOW_BARS + 1, WINDOW_BARS):
        window = bar_window(piece, first, WINDOW_BARS)
        tokens = bar_tokens[first:first + WINDOW_BARS]
        values = piece_metrics(window)
        values[TOKENS_PER_BAR] = float(np.mean(tokens)) if len(tokens) == WINDOW_BARS else np.nan
        windows.append(values)
    return Along(bars=bars, repetition=bar_repetition(piece), windows=windows)


def bar_window(piece: NotePiece, first: int, count: int) -> NotePiece:
    """The notes starting in bars first .. first + count - 1, shifted to start at 0, with those bars'
    lines (the notes' ends cut at the window's end)."""
    start, end = int(piece.bars[first]), int(piece.bars[first + count])
    keep = (piece.onsets >= start) & (piece.onsets < end)
    return NotePiece(piece.onsets[keep] - start, np.minimum(piece.ends[keep], end) - start,
                     piece.pitches[keep], piece.bars[first:first + count + 1] - start)


def bar_contents(piece: NotePiece) -> list[set[tuple[int, int]]]:
    """Per bar, the set of (onset within the bar, pitch) of the notes starting in it."""
    bar_of_note = np.searchsorted(piece.bars, piece.onsets, side="right") - 1  # (N,)
    contents: list[set[tuple[int, int]]] = [set() for _ in range(len(piece.bars) - 1)]
    for bar, onset, pitch in zip(bar_of_note.tolist(), piece.onsets.tolist(), piece.pitches.tolist()):
        contents[bar].add((onset - int(piece.bars[bar]), pitch))
    return contents


def bar_repetition(piece: NotePiece, lag: int = REPEAT_LAG) -> float:
    """`repetition` of the module docstring."""
    contents = bar_contents(piece)
    best = []
    for b in range(lag, len(contents)):
        if contents[b]:
            best.append(max((len(contents[b] & contents[a]) / len(contents[b] | contents[a])
                             for a in range(b - lag + 1)), default=0.0))
    return float(np.mean(best)) if best else np.nan


def bar_token_counts(bar_starts: Sequence[int], length: int, first_bar: int) -> list[int]:
    """Tokens of each bar from bar number `first_bar` on, given the indices where bars start in a
    sequence of `length` tokens (the last bar runs to the end)."""
    edges = list(bar_starts[first_bar:]) + [length]
    return [b - a for a, b in zip(edges, edges[1:])]


# ------------------------------------------------------------------------------- summaries
@dataclass
class WindowStats:
    mode: str  # unconditional or continuation
    source: str  # model label, or "real"
    measure: str  # one of WINDOW_MEASURES
    window: int  # 0: bars 1-16, 1: 17-32, ...
    mean: float
    std: float
    count: int  # pieces that fill the window and have a value


def window_stats(rows: Sequence[Any]) -> list[WindowStats]:
    """Mean, std and count of every measure per (mode, source, window) over rows that have `along`."""
    stats = []
    keys = dict.fromkeys((r.mode, r.source) for r in rows if r.along is not None)
    for mode, source in keys:
        chosen = [r.along for r in rows if (r.mode, r.source) == (mode, source) and r.along is not None]
        for window in range(max((len(a.windows) for a in chosen), default=0)):
            for measure in WINDOW_MEASURES:
                values = np.asarray([a.windows[window][measure] for a in chosen if len(a.windows) > window],
                                    dtype=np.float64)
                values = values[np.isfinite(values)]
                std = float(values.std(ddof=1)) if len(values) > 1 else (0.0 if len(values) else np.nan)
                stats.append(WindowStats(mode, source, measure, window,
                                         float(values.mean()) if len(values) else np.nan, std, len(values)))
    return stats


def window_target_met(measure: str, generated: float, real_mean: float, real_std: float) -> bool | None:
    """The window target of `measure` (module docstring); None when a side has no value."""
    if not (np.isfinite(generated) and np.isfinite(real_mean)):
        return None
    if measure == "empty_beat_rate":
        return generated <= max(2.0 * real_mean, EMPTY_BEAT_FLOOR)
    return abs(generated - real_mean) <= real_std


def window_label(window: int) -> str:
    return f"bars {window * WINDOW_BARS + 1}-{(window + 1) * WINDOW_BARS}"


def song_level(rows: Sequence[Any]) -> str:
    """Markdown table of song length (median, quartiles) and repetition (mean ± std, real range) per
    mode and source."""
    lines = ["| mode | source | pieces | length in bars: median (quartiles) | repetition: mean ± std (range) |",
             "|---|---|---:|---:|---:|"]
    for mode, source in dict.fromkeys((r.mode, r.source) for r in rows if r.along is not None):
        chosen = [r.along for r in rows if (r.mode, r.source) == (mode, source) and r.along is not None]
        bars = np.asarray([a.bars for a in chosen], dtype=np.float64)
        rep = np.asarray([a.repetition for a in chosen], dtype=np.float64)
        rep = rep[np.isfinite(rep)]
        q1, median, q3 = np.percentile(bars, [25, 50, 75]) if len(bars) else (np.nan,) * 3
        repetition = (f"{rep.mean():.3f} ± {rep.std(ddof=1) if len(rep) > 1 else 0.0:.3f} "
                      f"({rep.min():.3f}-{rep.max():.3f})") if len(rep) else "n/a"
        lines.append(f"| {mode} | {source} | {len(chosen)} | {median:.0f} ({q1:.0f}-{q3:.0f}) | {repetition} |")
    return "\n".join(lines) + "\n"


def window_markdown(stats: Sequence[WindowStats], real: str) -> str:
    """One table per mode and model: a row per measure, a column per window, cells
    "generated / real mean ± std", with **no** where the window target is not met."""
    index = {(s.mode, s.source, s.measure, s.window): s for s in stats}
    blocks = []
    for mode, source in dict.fromkeys((s.mode, s.source) for s in stats if s.source != real):
        reached = [s.window for s in stats if (s.mode, s.source) == (mode, source) and s.count]
        last = max(reached + [TABLE_WINDOWS - 1])
        windows = sorted({s.window for s in stats if s.mode == mode and s.window <= last})
        lines = [f"**{mode}**, {source} against {real} pieces, per window (generated / real mean ± std; "
                 f"n generated / real):", "",
                 "| measure | " + " | ".join(window_label(w) for w in windows) + " |",
                 "|---|" + "---:|" * len(windows)]
        for measure in WINDOW_MEASURES:
            cells = []
            for w in windows:
                gen, ref = index.get((mode, source, measure, w)), index.get((mode, real, measure, w))
                if gen is None or ref is None or not gen.count or not ref.count:
                    cells.append("n/a")
                    continue
                met = window_target_met(measure, gen.mean, ref.mean, ref.std)
                cells.append(f"{gen.mean:.3g} / {ref.mean:.3g} ± {ref.std:.2g} ({gen.count}/{ref.count})"
                             + ("" if met is not False else " **no**"))
            lines.append(f"| {TITLES[measure]} | " + " | ".join(cells) + " |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def write_along_outputs(rows: Sequence[Any], out_dir: Path, outputs: Any, real: str) -> str:
    """quality_windows.csv (per piece and window), quality_along.md and quality_along_<mode>.png;
    returns the markdown."""
    with outputs.temp(out_dir / "quality_windows.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["mode", "source", "piece", "bars", "repetition", "window", "first_bar", *WINDOW_MEASURES])
        for r in rows:
            if r.along is None:
                continue
            for w, values in enumerate(r.along.windows or [None]):
                cells = [""] * len(WINDOW_MEASURES) if values is None else [f"{values[m]:.6g}" for m in WINDOW_MEASURES]
                writer.writerow([r.mode, r.source, r.piece, r.along.bars, f"{r.along.repetition:.6g}",
                                 "" if values is None else w, "" if values is None else w * WINDOW_BARS + 1,
                                 *cells])
    stats = window_stats(rows)
    text = ("Song length and repetition (bar self-similarity at lags of 8 bars or more):\n\n"
            + song_level(rows) + "\n" + window_markdown(stats, real))
    outputs.temp(out_dir / "quality_along.md").write_text(text)
    for mode in dict.fromkeys(r.mode for r in rows if r.along is not None):
        plot_along([s for s in stats if s.mode == mode], real, mode,
                   outputs.temp(out_dir / f"quality_along_{mode}.png"))
    return text


def plot_along(stats: Sequence[WindowStats], real: str, mode: str, path: Path) -> None:
    """One panel per measure: each model's window means against bar position, over the real pieces'
    mean ± std band (where at least MIN_BAND real pieces fill the window)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = 4
    rows = -(-len(WINDOW_MEASURES) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4.0 * columns, 2.8 * rows), squeeze=False)
    sources = list(dict.fromkeys(s.source for s in stats if s.source != real))
    for axis, measure in zip(axes.flat, WINDOW_MEASURES):
        reference = sorted((s for s in stats if s.source == real and s.measure == measure and s.count >= MIN_BAND),
                           key=lambda s: s.window)
        if reference:
            x = [s.window * WINDOW_BARS + WINDOW_BARS / 2 + 0.5 for s in reference]
            mean = np.asarray([s.mean for s in reference])
            std = np.asarray([s.std for s in reference])
            axis.fill_between(x, mean - std, mean + std, color="0.85", label=f"{real} ± std")
            axis.plot(x, mean, color="0.4", linewidth=1.5)
        for i, source in enumerate(sources):
            chosen = sorted((s for s in stats if s.source == source and s.measure == measure and s.count),
                            key=lambda s: s.window)
            axis.plot([s.window * WINDOW_BARS + WINDOW_BARS / 2 + 0.5 for s in chosen], [s.mean for s in chosen],
                      marker="o", color=plt.get_cmap("tab10")(i % 10), label=source)
        axis.set_title(TITLES[measure], fontsize="medium")
        axis.set_xlabel("bar (window centre)", fontsize="small")
        if not reference:
            axis.text(0.5, 0.5, f"fewer than {MIN_BAND} real pieces fill a {WINDOW_BARS}-bar window",
                      ha="center", va="center",
                      transform=axis.transAxes, fontsize="small", color="0.4")
    for axis in list(axes.flat)[len(WINDOW_MEASURES):]:
        axis.axis("off")
    if axes.flat[0].get_legend_handles_labels()[0]:
        axes.flat[0].legend(fontsize="x-small")
    figure.suptitle(f"{mode}: quality along the piece, {WINDOW_BARS}-bar windows")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
