"""Style consistency of groove continuations (paper Fig. 5; Cífka et al. style similarities).

For each held-out piece: its first bars are the prompt, the model continues it (recurrently, grammar
constrained) up to a total length in tokens, the continuation is cut into 4 quarters of equal duration
and each quarter is compared with the whole reference piece by the two style similarities of
`groove.metrics` (onset-duration and time-pitch profiles, cosine similarity).

The held-out pieces are a corpus split, or any folder of real band MIDI (`band_pieces`): each file's
roles are found by the tokenizer's rules (`groove.roles`), and a file without drums, bass or an
accompaniment, or not in 4/4, is skipped with its reason.
"""

from __future__ import annotations

import csv
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from generation.outputs import AtomicOutputs
from generation.own_file import new_notes
from generation.pieces import first_bars, next_bar_time
from generation.request import GenerationRequest
from groove.roles import TRACKS, band_problem
from tokenization import BaseTokenizer, PieceNote, TokenizationError, load_midi, midi_files

logger = logging.getLogger(__name__)
REAL_LABEL = "real continuation"  # label of the rows scored by the pieces' own continuations


@dataclass
class SimilarityRow:
    model: str  # label of the checkpoint
    piece: str  # name of the held-out piece that gave the prompt
    metric: str  # onset_duration or time_pitch
    quarter: int  # 1..4: which quarter of the continuation
    similarity: float  # cosine similarity of the quarter's style profile to the reference's


@dataclass
class Continued:
    """What one continuation did besides its style: its length and its held notes."""

    model: str  # label of the checkpoint (or REAL_LABEL)
    piece: str  # name of the held-out piece that gave the prompt
    new_tokens: int  # tokens after the prompt
    asked: int  # tokens asked after the prompt
    ended: bool  # it ended (End token) before the length asked
    notes: int  # notes that start after the prompt
    long_notes: int  # of them, those held longer than LONG_BARS bars (drones)
    restruck: int  # of them, those re-struck into a drone over LONG_BARS bars (`restruck_drones`)
    # per pitched role: onsets of the new notes (on a beat, on an off-beat eighth, elsewhere)
    onsets: dict[str, tuple[int, int, int]] = field(default_factory=dict)


LONG_BARS = 2  # a note held longer than this many 4/4 bars counts as a drone
PITCHED = tuple(role for role in TRACKS if role != "drums")  # the roles the style profiles read


def restruck_drones(notes: Sequence[PieceNote]) -> int:
    """How many notes belong to a drone that is re-struck rather than held: a chain of at least two notes
    of one pitch on one track, each after a note of a bar or more and starting before or as it ends (no
    rest), lasting longer than LONG_BARS 4/4 bars. A hold limit closes a note, not the chain a sampler
    restarts at once; repeated short notes (a pumping bass) never chain, and a single long note is a
    `long_notes` drone instead."""
    by_key: dict[tuple[str, int], list[PieceNote]] = {}
    for note in notes:
        by_key.setdefault((note.track, note.pitch), []).append(note)
    count = 0
    for chain in by_key.values():
        chain.sort(key=lambda n: n.start)
        start, end, last, members = chain[0].start, chain[0].end, chain[0], 1
        for note in chain[1:] + [None]:  # times in beats of 4/4 bars
            if note is not None and note.start <= end + 1e-6 and last.end - last.start >= 4 - 1e-6:
                end, last, members = max(end, note.end), note, members + 1
                continue
            if members > 1 and end - start > 4 * LONG_BARS + 1e-6:
                count += members
            if note is not None:
                start, end, last, members = note.start, note.end, note, 1
    return count


def onset_places(starts: Sequence[float]) -> tuple[int, int, int]:
    """How many onsets (in beats) fall on a beat, on the off-beat eighth, and elsewhere."""
    frac = np.mod(np.asarray(starts, dtype=np.float64), 1.0)  # (N,) place inside the beat
    on_beat = int(np.sum(np.isclose(frac, 0.0, atol=1e-6) | np.isclose(frac, 1.0, atol=1e-6)))
    off_eighth = int(np.sum(np.isclose(frac, 0.5, atol=1e-6)))
    return on_beat, off_eighth, len(frac) - on_beat - off_eighth


@dataclass
class GrooveOptions:
    tokens: int = 1024  # length of each piece: prompt + continuation, in tokens
    prompt_bars: int = 2  # bars of the held-out piece that prompt the continuation
    seed: int = 0  # seed of the positional noise and of sampling
    # top-p, temperature, end policy and hold limit as asked (None: the model's, as spe-generate samples);
    # the prompt and the tokens are set per piece
    request: GenerationRequest = field(default_factory=GenerationRequest)
    progress: bool = True  # show a progress bar
    roles: bool = False  # also score each role alone ("time_pitch:bass", ...: where a gap to the songs sits)


def evaluate_groove(label: str, ckpt: Any, pieces: Sequence[np.ndarray], names: Sequence[str],
                    options: GrooveOptions, continued: list[Continued] | None = None) -> list[SimilarityRow]:
    """Similarity rows of one model over the held-out pieces (pieces too short are skipped); with
    `continued`, each continuation's length and held notes are appended to it."""
    tokenizer, model = ckpt.tokenizer, ckpt.model
    generator = torch.Generator(device=model.head.weight.device).manual_seed(options.seed)

    def continue_prompt(prompt: list[int], ids: list[int]) -> list[int]:
        request = replace(options.request, prompt_ids=prompt, tokens=options.tokens - len(prompt))
        return request.run(ckpt, generator)[0].tokens

    return _similarity_rows(label, tokenizer, pieces, names, options, continue_prompt, continued)


def real_continuation_rows(tokenizer: BaseTokenizer, pieces: Sequence[np.ndarray], names: Sequence[str],
                           options: GrooveOptions, label: str = REAL_LABEL,
                           continued: list[Continued] | None = None) -> list[SimilarityRow]:
    """The rows that each piece's own continuation (its next tokens after the prompt) scores: the ceiling a
    model's continuations are read against, since a quarter is never the whole piece."""
    return _similarity_rows(label, tokenizer, pieces, names, options, lambda prompt, ids: ids[:options.tokens],
                            continued)


def _similarity_rows(label: str, tokenizer: BaseTokenizer, pieces: Sequence[np.ndarray], names: Sequence[str],
                     options: GrooveOptions, continue_prompt: Callable[[list[int], list[int]], list[int]],
                     continued: list[Continued] | None = None) -> list[SimilarityRow]:
    """Rows of `continue_prompt(prompt, ids) -> tokens` over the pieces with more than the prompt's bars."""
    rows = []
    for piece, name in tqdm(list(zip(pieces, names)), desc=f"continuing ({label})", unit="piece",
                            disable=not options.progress):
        ids = [int(i) for i in piece]
        prompt = first_bars(tokenizer, ids, options.prompt_bars)
        if prompt is None or len(prompt) >= options.tokens:
            logger.info("skipped %s: fewer than %d bars within %d tokens", name, options.prompt_bars + 1,
                        options.tokens)
            continue
        tokens = continue_prompt(prompt, ids)
        if continued is not None:
            continued.append(continuation_of(label, name, tokenizer, tokens, len(prompt), options.tokens))
        for metric, values in score_continuation(tokenizer, tokens, len(prompt), ids, options.roles).items():
            rows += [SimilarityRow(label, name, metric, q + 1, float(v)) for q, v in enumerate(values)]
    if not rows:
        raise ValueError(f"no held-out piece has more than {options.prompt_bars} bars within "
                         f"{options.tokens} tokens")
    return rows


@dataclass
class Skipped:
    file: str  # path of the file, relative to the folder
    reason: str  # why it was not used


def band_pieces(folder: Path, tokenizer: BaseTokenizer) -> tuple[list[np.ndarray], list[str], list[Skipped]]:
    """The ids and names of the band MIDI files below `folder` that have all three roles, and the
    files skipped with their reasons."""
    pieces, names, skipped = [], [], []
    for path in midi_files(folder):
        name = str(path.relative_to(folder))
        try:
            midi = load_midi(path)
        except TokenizationError as error:
            skipped.append(Skipped(name, error.reason))
            continue
        problem = band_problem(midi, name)
        if problem:
            skipped.append(Skipped(name, problem))
        else:
            pieces.append(np.asarray(tokenizer.encode(midi), dtype=np.int64))
            names.append(name)
    for item in skipped:
        logger.info("skipped %s: %s", item.file, item.reason)
    return pieces, names, skipped


def score_continuation(tokenizer: BaseTokenizer, tokens: Sequence[int], prompt_len: int, reference: Sequence[int],
                       roles: bool = False) -> dict[str, np.ndarray]:
    """{metric: (4,) similarities} of the part of `tokens` after the prompt to the whole reference (the
    pitched roles together, as the metrics define them); with `roles`, also each role alone, drums
    included, as "metric:role"."""
    from groove.metrics import METRICS, continuation_similarity

    scored = [(metric, None) for metric in METRICS] + [(metric, role) for metric in METRICS for role in TRACKS
                                                          if roles]
    keys = [metric if role is None else f"{metric}:{role}" for metric, role in scored]
    music = tokenizer.decode(tokens)
    start = prompt_end_tick(tokenizer, tokens[:prompt_len], music.resolution)  # the continuation starts there
    if not any(n.time >= start for t in music.tracks for n in t.notes):
        logger.info("a continuation has no notes; its similarities are 0")
        return {key: np.zeros(4) for key in keys}
    piece = tokenizer.decode(reference)
    return {key: continuation_similarity(music, piece, metric, None if role is None else [role], start=start)
            for key, (metric, role) in zip(keys, scored)}


def prompt_end_tick(tokenizer: BaseTokenizer, prompt: Sequence[int], ticks_per_beat: int) -> int:
    """The tick where the bar after the prompt (cut at a bar start) begins, read from the grammar state."""
    return int(next_bar_time(tokenizer, prompt) * ticks_per_beat)


def quarter_stats(rows: Sequence[SimilarityRow]) -> list[tuple[str, str, int, float, float, int]]:
    """(model, metric, quarter, mean, std, pieces) for every model, metric and quarter."""
    stats = []
    for model, metric in sorted({(r.model, r.metric) for r in rows}):
        for quarter in range(1, 5):
            values = [r.similarity for r in rows if (r.model, r.metric, r.quarter) == (model, metric, quarter)]
            stats.append((model, metric, quarter, float(np.mean(values)), float(np.std(values)), len(values)))
    return stats


def continuation_of(label: str, name: str, tokenizer: BaseTokenizer, tokens: list[int], prompt_len: int,
                    total: int) -> Continued:
    """The length and held notes of one continuation (`tokens`: the prompt's, then the new ones)."""
    notes = new_notes(tokenizer.notes(tokens[:prompt_len]), tokenizer.notes(tokens))
    # in beats of 4/4 bars; a note closed exactly at the bound is not one
    long_notes = sum(n.end - n.start > 4 * LONG_BARS + 1e-6 for n in notes)
    ended = bool(tokens) and tokens[-1] == tokenizer.eos_id and len(tokens) < total
    onsets = {role: onset_places([n.start for n in notes if n.track == role]) for role in PITCHED}
    return Continued(label, name, len(tokens) - prompt_len, total - prompt_len, ended, len(notes), long_notes,
                     restruck_drones(notes), onsets)


def continued_markdown(continued: Sequence[Continued]) -> str:
    """Per model: the continuations that ran to the length asked (none ended early; the decoder drops
    the tokens of an event left unfinished at the budget), their length, and the share of drones."""
    lines = ["| model | pieces | ran to the length asked | new tokens (mean of asked) "
             f"| notes held over {LONG_BARS} bars | notes re-struck over {LONG_BARS} bars without a rest |",
             "|---|---:|---:|---:|---:|---:|"]
    for model in dict.fromkeys(c.model for c in continued):
        mine = [c for c in continued if c.model == model]
        ran = sum(not c.ended for c in mine)
        share = np.mean([c.new_tokens / max(1, c.asked) for c in mine])
        notes, long_notes = sum(c.notes for c in mine), sum(c.long_notes for c in mine)
        restruck = sum(c.restruck for c in mine)
        lines.append(f"| {model} | {len(mine)} | {ran} ({ran / len(mine):.0%}) | {share:.0%} "
                     f"| {long_notes} of {notes} ({long_notes / max(1, notes):.1%}) "
                     f"| {restruck} ({restruck / max(1, notes):.1%}) |")
    return "\n".join(lines) + "\n\n" + rhythm_markdown(continued)


def rhythm_markdown(continued: Sequence[Continued]) -> str:
    """Per model and pitched role: the share of the new notes' onsets on a beat and on the off-beat eighth
    (how syncopated the continuations are, against the songs' own)."""
    lines = ["| model | " + " | ".join(f"{role}: on a beat | {role}: off-beat eighth" for role in PITCHED) + " |",
             "|---|" + "---:|---:|" * len(PITCHED)]
    for model in dict.fromkeys(c.model for c in continued):
        counts = {role: np.sum([c.onsets.get(role, (0, 0, 0)) for c in continued if c.model == model], axis=0)
                  for role in PITCHED}
        cells = [f"{n / max(1, total.sum()):.0%}" for total in counts.values() for n in total[:2]]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def summary_markdown(rows: Sequence[SimilarityRow], skipped: Sequence[Skipped] = ()) -> str:
    """Mean (and standard deviation) similarity per model, metric and quarter; the files skipped."""
    lines = ["| model | metric | quarter 1 | quarter 2 | quarter 3 | quarter 4 | pieces |",
             "|---|---|---:|---:|---:|---:|---:|"]
    stats = quarter_stats(rows)
    for first in range(0, len(stats), 4):
        model, metric, _, _, _, count = stats[first]
        cells = [f"{mean:.3f} ± {std:.3f}" for _, _, _, mean, std, _ in stats[first:first + 4]]
        lines.append(f"| {model} | {metric} | " + " | ".join(cells) + f" | {count} |")
    if skipped:
        lines += ["", f"{len(skipped)} file(s) skipped:", ""] + [f"- {s.file}: {s.reason}" for s in skipped]
    return "\n".join(lines) + "\n"


def write_groove_outputs(rows: Sequence[SimilarityRow], out_dir: Path, skipped: Sequence[Skipped] = (),
                         continued: Sequence[Continued] = ()) -> str:
    """groove_similarity.csv (per piece), groove.csv (model, metric, quarter, mean, std, pieces), .png
    and .md (with the lengths and drones of `continued`, and the skipped files); returns the markdown
    summary."""
    table = summary_markdown(rows, skipped)
    if continued:
        table += "\n" + continued_markdown(continued)
    with AtomicOutputs() as outputs:
        with outputs.temp(out_dir / "groove_similarity.csv").open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["model", "piece", "metric", "quarter", "similarity"])
            for r in rows:
                writer.writerow([r.model, r.piece, r.metric, r.quarter, f"{r.similarity:.6f}"])
        with outputs.temp(out_dir / "groove.csv").open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["model", "metric", "quarter", "mean", "std", "pieces"])
            for model, metric, quarter, mean, std, count in quarter_stats(rows):
                writer.writerow([model, metric, quarter, f"{mean:.6f}", f"{std:.6f}", count])
        plot_boxes(rows, outputs.temp(out_dir / "groove_similarity.png"))
        outputs.temp(out_dir / "groove_similarity.md").write_text(table)
    return table


def plot_boxes(rows: Sequence[SimilarityRow], path: Path) -> None:
    """One panel per metric: per quarter, one box per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = sorted({r.metric for r in rows})
    models = list(dict.fromkeys(r.model for r in rows))
    width = 0.8 / len(models)
    figure, axes = plt.subplots(1, len(metrics), figsize=(5.0 * len(metrics), 4.0), squeeze=False)
    for axis, metric in zip(axes[0], metrics):
        for m, model in enumerate(models):
            data = [[r.similarity for r in rows if (r.model, r.metric, r.quarter) == (model, metric, q)]
                    for q in range(1, 5)]
            positions = [q + (m - (len(models) - 1) / 2) * width for q in range(1, 5)]
            boxes = axis.boxplot(data, positions=positions, widths=width * 0.9, patch_artist=True)
            for patch in boxes["boxes"]:
                patch.set_facecolor(plt.get_cmap("tab10")(m % 10))
            axis.plot([], [], color=plt.get_cmap("tab10")(m % 10), linewidth=6, label=model)
        axis.set_xticks(range(1, 5), [f"Q{q}" for q in range(1, 5)])
        axis.set_ylim(-0.02, 1.02)
        axis.set_title(metric.replace("_", "-") + " similarity")
        axis.set_xlabel("quarter of the continuation")
        axis.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
