"""Generation quality measured against real music: `spe-evaluate quality` (metrics: evaluation.quality_metrics).

Two modes, each comparing generated pieces with real ones measured the same way:

* unconditional: pieces sampled from the start token (`tokens` new tokens each), beside the first
  1 + `tokens` tokens of each real piece; both measured from the bar of their first note (silent
  opening bars, common in POP909 files aligned to recordings, are dropped from real pieces first);
* continuation: the first `prompt_bars` bars of real pieces prompt the model; only what comes after
  the prompt (from the first bar line after it) is measured, beside the real pieces' own continuations
  (their next `tokens` tokens after the same prompt).

Real pieces are the held-out split of the checkpoint's corpus or any folder of MIDI files (tokenised with
the checkpoint's tokenizer), so that both sides are on the same grid; `full_real` measures the whole
real pieces instead of the same number of tokens. Generation is recurrent and grammar-constrained
(generation.request, as spe-generate asks); one torch.Generator seeded once drives every draw, so a run is reproducible.
"""

from __future__ import annotations

import csv
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from generation.outputs import AtomicOutputs
from generation.pieces import first_bars, piece_ids, next_bar_time, start_ids, strip_eos
from evaluation.along import Along, along, bar_token_counts, write_along_outputs
from evaluation.quality_metrics import METRICS, SUB_BEATS_PER_QUARTER, from_midi, piece_metrics
from generation.request import GenerationRequest
from tokenization import BaseTokenizer, TokenizationError, midi_files

logger = logging.getLogger(__name__)

MODES = ("unconditional", "continuation")
REAL = "real"  # the source name of real pieces in rows and tables


@dataclass
class QualityOptions:
    modes: tuple[str, ...]  # subset of MODES
    pieces: int  # generated pieces per model and mode
    tokens: int  # new tokens per generated piece
    prompt_bars: int  # bars of a real piece used as a continuation prompt
    request: GenerationRequest  # top-p, temperature, nucleus as asked (None: the model's); prompt, tokens per piece
    seed: int  # seed of the sampling generator
    full_real: bool = False  # measure whole real pieces (default: as many tokens as the generated ones)
    progress: bool = True  # show progress bars


@dataclass
class RealPiece:
    name: str  # file or corpus name
    ids: list[int]  # token ids, EOS removed


@dataclass
class QualityRow:
    mode: str  # unconditional or continuation
    source: str  # model label, or "real"
    piece: str  # generated piece name, or the real piece's name
    values: dict[str, float]  # metric name -> value (NaN when undefined, e.g. no notes)
    along: Along | None = None  # the same part measured along its bars


# ------------------------------------------------------------------------------ real pieces
def real_pieces_from_ids(pieces: Sequence[np.ndarray], names: Sequence[str], tokenizer: BaseTokenizer,
                         count: int, seed: int) -> list[RealPiece]:
    """Up to `count` corpus pieces (a seeded random choice when there are more), EOS removed."""
    chosen = choose(len(pieces), count, seed)
    return [RealPiece(names[i], drop_leading_silence(tokenizer, strip_eos(pieces[i], tokenizer.eos_id)))
            for i in chosen]


def real_pieces_from_folder(folder: Path, tokenizer: BaseTokenizer, count: int, seed: int,
                            progress: bool) -> list[RealPiece]:
    """Up to `count` MIDI files below `folder` (a seeded random choice), tokenised; bad files skipped."""
    if not folder.is_dir():
        raise ValueError(f"--real: no such folder: {folder}")
    files = midi_files(folder)
    if not files:
        raise ValueError(f"--real: no MIDI files below {folder}")
    pieces = []
    for index in tqdm(choose(len(files), count, seed), desc=f"tokenising {folder.name}", unit="file",
                      disable=not progress):
        path = files[index]
        try:
            ids = drop_leading_silence(tokenizer, piece_ids(tokenizer, path))
        except TokenizationError as error:
            logger.warning("skipped %s: %s", path, error)
            continue
        pieces.append(RealPiece(path.relative_to(folder).with_suffix("").as_posix(), ids))
    if not pieces:
        raise ValueError(f"--real: none of the chosen MIDI files below {folder} could be tokenised")
    logger.info("%d real pieces from %s (%d MIDI files)", len(pieces), folder, len(files))
    return pieces


def drop_leading_silence(tokenizer: BaseTokenizer, ids: list[int]) -> list[int]:
    """The ids from the bar of the first note on (many POP909 files open with silent bars aligned to
    the recording), with the meter and tempo in force there. Unchanged when the first bar has a note."""
    vocab = tokenizer.vocab
    pitches, meters, tempos = (set(vocab.by_type(kind)) for kind in ("Note_Pitch", "TimeSig", "Tempo"))
    first = next((i for i, token in enumerate(ids) if token in pitches), None)
    starts = tokenizer.bar_starts(ids)
    if first is None or not starts:
        return ids
    bar = starts[int(np.searchsorted(starts, first, side="right")) - 1]
    if bar == starts[0]:
        return ids
    body = ids[bar + 1:]
    meter = [body.pop(0)] if body[0] in meters else [t for t in ids[:bar] if t in meters][-1:]
    tempo = [t for t in ids[:bar] if t in tempos][-1:]
    beat0 = vocab["Beat_0"]
    if tempo and not (len(body) > 1 and body[0] == beat0 and body[1] in tempos):
        body = [beat0, *tempo, *(body[1:] if body[0] == beat0 else body)]
    return [ids[bar], *meter, *body]


def choose(total: int, count: int, seed: int) -> list[int]:
    """Sorted indices of `count` of `total` items chosen at random with `seed` (all when fewer)."""
    if total <= count:
        return list(range(total))
    return sorted(np.random.default_rng(seed).choice(total, size=count, replace=False).tolist())


# ------------------------------------------------------------------------------ measuring
def prompt_of(tokenizer: BaseTokenizer, piece: RealPiece, bars: int) -> list[int] | None:
    """The ids of the first `bars` bars of a piece (None when it has no bar after them)."""
    return first_bars(tokenizer, piece.ids, bars)


def continuation_start(tokenizer: BaseTokenizer, prompt: Sequence[int]) -> int:
    """Sub-beat (of the metrics' grid) of the first bar line after the prompt (from the grammar state)."""
    return round(next_bar_time(tokenizer, prompt) * SUB_BEATS_PER_QUARTER)


def measure(tokenizer: BaseTokenizer, ids: Sequence[int], cut: int | None = None) -> dict[str, float]:
    """Metrics of the decoded ids from sub-beat `cut` (a bar line) on; without a cut, from the bar of
    the first note on (as the real pieces, see drop_leading_silence)."""
    return measure_piece(tokenizer, ids, cut)[0]


def measure_piece(tokenizer: BaseTokenizer, ids: Sequence[int], cut: int | None = None
                  ) -> tuple[dict[str, float], Along]:
    """`measure`, and the same part of the piece measured along its bars (evaluation.along)."""
    piece = from_midi(tokenizer.decode(list(ids)))
    if cut is None:
        bar = int(np.searchsorted(piece.bars, piece.onsets.min(), side="right")) - 1 if piece.num_notes else 0
    else:
        bar = int(np.searchsorted(piece.bars, cut, side="left"))
    part = piece.after(int(piece.bars[bar])) if bar else piece.trimmed()
    bar_tokens = bar_token_counts(tokenizer.bar_starts(list(ids)), len(ids), bar)
    return piece_metrics(part), along(part, bar_tokens)


def measure_real(tokenizer: BaseTokenizer, pieces: Sequence[RealPiece], options: QualityOptions, start_len: int
                 ) -> list[QualityRow]:
    """Rows of the real pieces for every mode (cut like the generated pieces unless full_real)."""
    rows = []
    for mode in options.modes:
        for piece in tqdm(pieces, desc=f"real pieces ({mode})", unit="piece", disable=not options.progress):
            if mode == "unconditional":
                ids = piece.ids if options.full_real else piece.ids[:start_len + options.tokens]
                rows.append(QualityRow(mode, REAL, piece.name, *measure_piece(tokenizer, ids)))
                continue
            prompt = prompt_of(tokenizer, piece, options.prompt_bars)
            if prompt is None:
                continue
            ids = piece.ids if options.full_real else piece.ids[:len(prompt) + options.tokens]
            measured = measure_piece(tokenizer, ids, continuation_start(tokenizer, prompt))
            rows.append(QualityRow(mode, REAL, piece.name, *measured))
    return rows


def generate_and_measure(label: str, ckpt: Any, real: Sequence[RealPiece], options: QualityOptions,
                         start: list[int], midi_dir: Path, outputs: AtomicOutputs) -> list[QualityRow]:
    """Generate `options.pieces` pieces per mode, write them as MIDI, and measure them."""
    tokenizer, model = ckpt.tokenizer, ckpt.model
    generator = torch.Generator(device=model.head.weight.device).manual_seed(options.seed)
    rows = []
    for mode in options.modes:
        if mode == "unconditional":
            jobs = [(f"unconditional_{i:03d}", start, None) for i in range(options.pieces)]
        else:
            jobs = []
            for piece in real:
                prompt = prompt_of(tokenizer, piece, options.prompt_bars)
                if prompt is not None and len(jobs) < options.pieces:
                    name = f"continuation_{len(jobs):03d}_{piece.name.replace('/', '_')}"
                    jobs.append((name, prompt, continuation_start(tokenizer, prompt)))
            if not jobs:
                raise ValueError(f"no real piece has more than {options.prompt_bars} bars to prompt with")
        for name, prompt, cut in tqdm(jobs, desc=f"{label}: {mode}", unit="piece",
                                      disable=not options.progress):
            request = replace(options.request, tokens=options.tokens, prompt_ids=None if prompt is start else prompt)
            result = request.run(ckpt, generator)[0]
            tokenizer.write_midi(result.tokens, outputs.temp(midi_dir / f"{name}.mid"))
            rows.append(QualityRow(mode, label, name, *measure_piece(tokenizer, result.tokens, cut)))
    return rows


def read_generated(folder: Path, tokenizer: BaseTokenizer) -> list[tuple[str, list[int]]]:
    """(name, ids) of the unconditional pieces in `folder`: token files (.txt, one token per line, as
    spe-generate writes them) that open with the format's start tokens. ValueError on anything else."""
    if not folder.is_dir():
        raise ValueError(f"--generated {folder}: not a folder")
    files = sorted(folder.glob("*.txt"))
    if not files:
        raise ValueError(f"--generated {folder}: no token files (.txt)")
    start = start_ids(tokenizer)
    pieces = []
    for path in files:
        try:
            ids = tokenizer.strings_to_ids(line for line in path.read_text().split() if line)
        except (KeyError, ValueError) as error:
            raise ValueError(f"--generated {path}: not a {type(tokenizer).__name__} token file ({error})") from None
        if ids[:len(start)] != start:
            raise ValueError(f"--generated {path}: does not open with the start token (not unconditional)")
        pieces.append((path.stem, ids))
    return pieces


def first_tokens(tokenizer: BaseTokenizer, ids: Sequence[int], count: int) -> list[int]:
    """At most the first `count` ids, cut after the last whole event (as a generation of `count`
    tokens ends) and without an end-of-sequence token."""
    ids = strip_eos(ids[:count], tokenizer.eos_id)
    grammar, complete = tokenizer.constraint_state(), 0
    for position, token in enumerate(ids):
        grammar.advance(token)
        if grammar.allowed()[tokenizer.eos_id]:
            complete = position + 1
    return list(ids[:complete])


def measure_generated(label: str, tokenizer: BaseTokenizer, pieces: Sequence[tuple[str, list[int]]],
                      options: QualityOptions, start_len: int) -> list[QualityRow]:
    """Rows of pieces generated elsewhere, each cut to its first `options.tokens` new tokens."""
    rows = []
    for name, ids in tqdm(pieces, desc=f"{label}: measuring", unit="piece", disable=not options.progress):
        rows.append(QualityRow("unconditional", label, name,
                               *measure_piece(tokenizer, first_tokens(tokenizer, ids, start_len + options.tokens))))
    return rows


def evaluate_quality(models: Sequence[tuple[str, Any]], options: Sequence[QualityOptions],
                     real: Sequence[RealPiece], reference: str, out_dir: Path,
                     generated: Sequence[tuple[str, list[tuple[str, list[int]]]]] = ()) -> str:
    """Measure the real pieces and every model's generations; write the outputs; return the tables.

    models: (label, training.checkpoint.Checkpoint), all with the same vocabulary; options: one per model
    (they differ only in sampling); reference: the real pieces' origin, in words. With `generated`,
    (label, read_generated's pieces) made elsewhere, nothing is generated: those pieces are measured,
    and the first model only gives the tokenizer.
    """
    if not real:
        raise ValueError("no real pieces to compare with")
    tokenizer = models[0][1].tokenizer
    first = options[0]
    start = start_ids(tokenizer)
    with AtomicOutputs() as outputs:
        rows = measure_real(tokenizer, real, first, len(start))
        if generated:
            for label, pieces in generated:
                rows += measure_generated(label, tokenizer, pieces, first, len(start))
        else:
            for (label, ckpt), option in zip(models, options):
                rows += generate_and_measure(label, ckpt, real, option, start,
                                             out_dir / "generated" / label.replace("/", "_"), outputs)
        length = "whole pieces" if first.full_real else "cut to the same number of tokens"
        chosen = [o.request.sampling(ckpt.config.generate) for (_, ckpt), o in zip(models, options)]
        sampling = ", ".join(f"{label}: top_p {s.top_p:g}, temperature {s.temperature:g}"
                             for (label, _), s in zip(models, chosen))
        notes = {
            "unconditional": f"{first.pieces} pieces of {first.tokens} new tokens from the start token "
                             f"vs {reference} ({length}); {sampling}, seed {first.seed}.",
            "continuation": f"continuations ({first.tokens} new tokens) of the first {first.prompt_bars} "
                            f"bars of real pieces, measured after the prompt, vs the real continuations "
                            f"of {reference} ({length}); {sampling}, seed {first.seed}.",
        }
        if generated:
            counts = ", ".join(f"{label}: {len(pieces)}" for label, pieces in generated)
            notes["unconditional"] = (f"pieces generated elsewhere ({counts}), cut to their first "
                                      f"{first.tokens} new tokens, vs {reference} ({length}).")
        return write_quality_outputs(rows, out_dir, notes, outputs)


# -------------------------------------------------------------------------------- summaries
@dataclass
class Comparison:
    mode: str  # unconditional or continuation
    model: str  # model label
    metric: Any  # evaluation.quality_metrics.Metric
    generated: tuple[float, float, int]  # mean, standard deviation, pieces with a value
    real: tuple[float, float, int]  # the same for the real pieces
    met: bool | None  # whether the target is met (None: undefined)


def statistics(values: Sequence[float]) -> tuple[float, float, int]:
    """(mean, sample standard deviation, count) of the finite values."""
    array = np.asarray([v for v in values if np.isfinite(v)], dtype=np.float64)
    if not len(array):
        return np.nan, np.nan, 0
    return float(array.mean()), float(array.std(ddof=1)) if len(array) > 1 else 0.0, len(array)


def target_met(target: str, generated: float, real_mean: float, real_std: float) -> bool | None:
    """within_std: |generated - real mean| <= real std; at_most_twice: generated <= 2 x real mean."""
    if not (np.isfinite(generated) and np.isfinite(real_mean)):
        return None
    if target == "at_most_twice":
        return generated <= 2.0 * real_mean
    return abs(generated - real_mean) <= real_std


def compare(rows: Sequence[QualityRow]) -> list[Comparison]:
    """One Comparison per mode, model and metric."""
    comparisons = []
    for mode in MODES:
        models = list(dict.fromkeys(r.source for r in rows if r.mode == mode and r.source != REAL))
        real_rows = [r for r in rows if r.mode == mode and r.source == REAL]
        for model in models:
            generated_rows = [r for r in rows if r.mode == mode and r.source == model]
            for metric in METRICS:
                generated = statistics([r.values[metric.name] for r in generated_rows])
                real = statistics([r.values[metric.name] for r in real_rows])
                met = target_met(metric.target, generated[0], real[0], real[1])
                comparisons.append(Comparison(mode, model, metric, generated, real, met))
    return comparisons


def markdown(comparisons: Sequence[Comparison], notes: dict[str, str]) -> str:
    """One markdown table per mode and model; `notes[mode]` is printed above each."""
    blocks = []
    for mode, model in dict.fromkeys((c.mode, c.model) for c in comparisons):
        chosen = [c for c in comparisons if (c.mode, c.model) == (mode, model)]
        lines = [f"**{mode}**, {model}: {notes.get(mode, '')}".rstrip(), "",
                 "| metric | generated | real | target | met |", "|---|---:|---:|---|---|"]
        for c in chosen:
            target = ("<= 2 x real mean" if c.metric.target == "at_most_twice" else "within 1 std of real")
            met = {True: "yes", False: "**no**", None: "n/a"}[c.met]
            lines.append(f"| {c.metric.title} | {cell(c.generated)} | {cell(c.real)} | {target} | {met} |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def cell(stats: tuple[float, float, int]) -> str:
    mean, std, count = stats
    return "n/a" if not count else f"{mean:.3f} ± {std:.3f} (n={count})"


def write_quality_outputs(rows: Sequence[QualityRow], out_dir: Path, notes: dict[str, str],
                          outputs: AtomicOutputs) -> str:
    """quality.csv (per piece), quality_summary.csv, quality.md and quality_<metric>.png, and the
    measures along the piece (evaluation.along: quality_windows.csv, quality_along.md and .png)."""
    comparisons = compare(rows)
    table = markdown(comparisons, notes)
    with outputs.temp(out_dir / "quality.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["mode", "source", "piece", *(m.name for m in METRICS)])
        for r in rows:
            writer.writerow([r.mode, r.source, r.piece, *(f"{r.values[m.name]:.6g}" for m in METRICS)])
    with outputs.temp(out_dir / "quality_summary.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["mode", "model", "metric", "generated_mean", "generated_std", "generated_n",
                         "real_mean", "real_std", "real_n", "target", "met"])
        for c in comparisons:
            writer.writerow([c.mode, c.model, c.metric.name, *(f"{v:.6g}" for v in c.generated[:2]),
                             c.generated[2], *(f"{v:.6g}" for v in c.real[:2]), c.real[2], c.metric.target,
                             "" if c.met is None else str(c.met).lower()])
    outputs.temp(out_dir / "quality.md").write_text(table)
    for metric in METRICS:
        plot_metric(rows, metric, outputs.temp(out_dir / f"quality_{metric.name}.png"))
    return table + "\n" + write_along_outputs(rows, out_dir, outputs, REAL)


def plot_metric(rows: Sequence[QualityRow], metric: Any, path: Path) -> None:
    """Box plot of one metric: per mode, one box per model and one for the real pieces."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = [m for m in MODES if any(r.mode == m for r in rows)]
    sources = list(dict.fromkeys([r.source for r in rows if r.source != REAL] + [REAL]))
    width = 0.8 / len(sources)
    figure, axis = plt.subplots(figsize=(2.2 + 2.4 * len(modes) * len(sources) / 2, 4.0))
    for s, source in enumerate(sources):
        color = "0.6" if source == REAL else plt.get_cmap("tab10")(s % 10)
        data = [[v for r in rows if (r.mode, r.source) == (mode, source)
                 for v in [r.values[metric.name]] if np.isfinite(v)] for mode in modes]
        positions = [m + (s - (len(sources) - 1) / 2) * width for m in range(len(modes))]
        kept = [(p, d) for p, d in zip(positions, data) if d]
        if kept:
            boxes = axis.boxplot([d for _, d in kept], positions=[p for p, _ in kept], widths=width * 0.85,
                                 patch_artist=True, showmeans=True)
            for patch in boxes["boxes"]:
                patch.set_facecolor(color)
        axis.plot([], [], color=color, linewidth=6, label=source)
    axis.set_xticks(range(len(modes)), modes)
    axis.set_title(f"{metric.title} [{metric.source}]")
    axis.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
