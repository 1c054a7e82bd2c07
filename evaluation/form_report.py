"""`spe-evaluate form`: does a model's music have a form? Against held-out POP909 songs with human labels.

For one model and the held-out songs whose phrase labels fall on the corpus's bars
(evaluation.form.label_songs), this measures:

* the real songs: same-label and different-label phrase similarity (evaluation.form), bar
  repetition and tokens per bar along the song (evaluation.along);
* memory: what a returning phrase gains from its first occurrence, in nats per token
  (evaluation.form.memory_gain), and the songs' teacher-forced NLL, both up to `max_len` tokens;
* `pieces` unconditional pieces (one batch, capped at `tokens`): bar repetition, length in bars,
  tokens per bar in bars 1-16 and 17-64;
* `form_pieces` pieces generated with the forms of the first held-out songs (generation.form,
  `restate`): their same-label and different-label similarity, measured as the real songs' are.

Outputs: form.md (the tables), form.json (the figures), form_ssm.png (bar self-similarity of a real
song beside generated pieces, phrases on the axes) and generated/*.mid.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from evaluation.along import Along, along, bar_token_counts
from evaluation.form import (FormScore, LabelledSong, form_score, memory_gain, plot_self_similarity,
                             self_similarity, summary)
from evaluation.quality_metrics import from_midi
from generation.form import form_budget
from generation.outputs import AtomicOutputs
from generation.recall import KeyTokens
from generation.request import GenerationRequest
from tokenization.form import Phrase, form_text


@dataclass
class FormOptions:
    pieces: int  # unconditional pieces
    form_pieces: int  # pieces generated with the held-out songs' forms
    tokens: int  # token cap of an unconditional piece
    max_len: int  # tokens of a song read for the NLL and memory measures
    restate: float  # generation.form: probability that a returning bar restates its first occurrence's
    request: GenerationRequest  # top-p, temperature as asked (None: the model's); form and tokens set per piece
    seed: int  # seed of the noise and sampling
    progress: bool = True  # show progress bars


@dataclass
class Measured:
    name: str  # piece name
    along: Along  # bars, repetition, windows
    tokens_per_bar: list[int]  # tokens of each bar
    form: FormScore | None  # with a form: same / different
    matrix: np.ndarray  # bar self-similarity
    phrases: list[Phrase]  # its form (empty without one)
    shift: int  # the form's bar 0 in the piece


def measure_ids(tokenizer: Any, name: str, ids: Sequence[int], phrases: Sequence[Phrase] = (), shift: int = 0
                ) -> Measured:
    """A piece's measures, its bars counted from its first token's bar."""
    piece = from_midi(tokenizer.decode(list(ids)))
    counts = bar_token_counts(tokenizer.bar_starts(list(ids)), len(ids), 0)
    score = form_score(piece, phrases, shift) if phrases else None
    return Measured(name, along(piece, counts), counts, score, self_similarity(piece), list(phrases), shift)


def window_mean(counts: Sequence[int], first: int, last: int) -> float:
    """Mean tokens per bar over bars first .. last (1-based) that the piece has, NaN when it has fewer
    than 16 of them."""
    bars = counts[first - 1:last]
    return float(np.mean(bars)) if len(bars) >= 16 else math.nan


def evaluate_form(label: str, ckpt: Any, songs: Sequence[LabelledSong], placement: dict[str, int],
                  options: FormOptions, out_dir: Path) -> tuple[str, dict[str, Any]]:
    """Measure; write form.md, form.json, form_ssm.png and the generated MIDI files; return (table, figures)."""
    if not songs:
        raise ValueError("no held-out song has phrase labels on the corpus's bars")
    tokenizer, model = ckpt.tokenizer, ckpt.model
    real = [measure_ids(tokenizer, s.name, s.ids, s.phrases, s.shift) for s in songs]
    recall = options.request.sampling(ckpt.config.generate).recall  # the NLLs of what sampling draws from
    recall = None if recall is None else (recall, KeyTokens.of(tokenizer))
    memories = [memory_gain(model, s.ids[:options.max_len], tokenizer.bar_starts(s.ids[:options.max_len]),
                            s.phrases, s.shift, options.seed, recall)
                for s in tqdm(songs, desc=f"{label}: memory", unit="song", disable=not options.progress)]
    device = model.head.weight.device
    generator = torch.Generator(device=device).manual_seed(options.seed)
    with AtomicOutputs() as outputs:
        unconditional = []
        if options.pieces:
            request = replace(options.request, tokens=options.tokens, num_samples=options.pieces)
            results = request.run(ckpt, generator, options.progress)
            for i, result in enumerate(results):
                name = f"unconditional_{i:03d}"
                tokenizer.write_midi(result.tokens, outputs.temp(out_dir / "generated" / f"{name}.mid"))
                unconditional.append(measure_ids(tokenizer, name, result.tokens))
        with_form = []
        for song in tqdm(songs[:options.form_pieces], desc=f"{label}: with a form", unit="piece",
                         disable=not options.progress):
            request = replace(options.request, form=form_text(song.phrases), restate=options.restate,
                              seed=options.seed, tokens=form_budget(song.phrases, 0, None, 0))  # as --form asks
            result = request.run(ckpt, generator)[0]
            name = f"form_{song.name}"
            tokenizer.write_midi(result.tokens, outputs.temp(out_dir / "generated" / f"{name}.mid"))
            with_form.append(measure_ids(tokenizer, name, result.tokens, song.phrases, 0))
        panels = [(f"real song {real[0].name}: {form_text(real[0].phrases)}"[:60], real[0].matrix,
                   real[0].phrases, real[0].shift)]
        panels += [(f"{label}: with the form of {m.name[5:]}", m.matrix, m.phrases, 0) for m in with_form[:2]]
        panels += [(f"{label}: unconditional", m.matrix, [], 0) for m in unconditional[:1]]
        plot_self_similarity(panels, outputs.temp(out_dir / "form_ssm.png"))
        figures = figures_of(real, memories, unconditional, with_form, placement)
        text = markdown(label, figures, options, len(songs))
        outputs.temp(out_dir / "form.md").write_text(text)
        outputs.temp(out_dir / "form.json").write_text(json.dumps(figures, indent=1, allow_nan=True))
    return text, figures


def figures_of(real: list[Measured], memories: list, unconditional: list[Measured], with_form: list[Measured],
               placement: dict[str, int]) -> dict[str, Any]:
    def mean(values: list[float]) -> float:
        values = [v for v in values if not math.isnan(v)]
        return float(np.mean(values)) if values else math.nan

    def std(values: list[float]) -> float:
        values = [v for v in values if not math.isnan(v)]
        return float(np.std(values, ddof=1)) if len(values) > 1 else math.nan

    def pieces(group: list[Measured], prefix: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for key, first, last in (("1_16", 1, 16), ("17_64", 17, 64)):
            values = [window_mean(m.tokens_per_bar, first, last) for m in group]
            out[f"{prefix}tokens_per_bar_{key}"], out[f"{prefix}tokens_per_bar_{key}_std"] = mean(values), std(values)
        out[f"{prefix}repetition"] = mean([m.along.repetition for m in group])
        out[f"{prefix}repetition_std"] = std([m.along.repetition for m in group])
        out[f"{prefix}bars"] = float(np.median([m.along.bars for m in group])) if group else math.nan
        scores = [m.form for m in group if m.form is not None]
        for name, (m, s, n) in summary(scores).items() if scores else ():
            out[f"{prefix}{name}"], out[f"{prefix}{name}_std"], out[f"{prefix}{name}_n"] = m, s, n
        return out

    tokens = sum(m.tokens for m in memories)
    return {"placement": placement, **pieces(real, "real_"),
            "memory_gain": (sum(m.as_first - m.returning for m in memories) / tokens) if tokens else math.nan,
            "memory_tokens": tokens,
            "nll_song": sum(m.song_nll for m in memories) / max(1, sum(m.song_tokens for m in memories)),
            **pieces(unconditional, ""), **pieces(with_form, "form_")}


def cell(figures: dict[str, Any], key: str) -> str:
    value, spread = figures.get(key, math.nan), figures.get(f"{key}_std", math.nan)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.3f} ± {spread:.3f}" if not math.isnan(spread) else f"{value:.3f}"


def markdown(label: str, f: dict[str, Any], options: FormOptions, songs: int) -> str:
    p = f["placement"]
    rows = [("same-label phrase similarity", "same"), ("different-label phrase similarity", "different"),
            ("difference (same - different)", "gap"), ("bar repetition", "repetition"),
            ("tokens per bar, bars 1-16", "tokens_per_bar_1_16"),
            ("tokens per bar, bars 17-64", "tokens_per_bar_17_64"),
            ("length in bars (median)", "bars")]
    lines = [f"Held-out songs: {p['songs']}, with labels {p['with_labels']}, labels on our bars "
             f"{p['on_our_bars']} (measured: {songs}).\n",
             f"| measure | real songs | {label}: with their forms ({options.form_pieces}, restate "
             f"{options.restate:g}) | {label}: unconditional ({options.pieces}, cap {options.tokens}) |",
             "|---|---:|---:|---:|"]
    for title, key in rows:
        lines.append(f"| {title} | {cell(f, 'real_' + key)} | {cell(f, 'form_' + key)} | {cell(f, key)} |")
    lines.append(f"\nMemory: a returning phrase read after its first occurrence gains {f['memory_gain']:.4f} "
                 f"nats per token ({f['memory_tokens']} tokens) over the same phrase read with the earlier "
                 f"phrases of its label cut out; teacher-forced NLL of the songs (first {options.max_len} "
                 f"tokens): {f['nll_song']:.4f}.\n")
    return "\n".join(lines)
