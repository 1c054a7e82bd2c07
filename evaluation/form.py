"""Song form: do a piece's sections come back?

Bars are compared by content, as in `evaluation.along`: a bar's content is the set of (onset within the
bar, pitch) of the notes starting in it, and two bars' similarity is the Jaccard index of their sets.

Given a form (tokenization.form) placed on a piece's bars (its bar 0 at the piece's bar ``shift``), for
every pair of phrases p before q and every bar offset b within both, the similarity of bar b of p with
bar b of q counts as *same-label* when p and q have the same label and as *different-label* otherwise.
A piece's ``same`` and ``different`` are the means of its pairs; ``gap = same - different``. Real pop
songs restate their sections (POP909: same 0.51, different 0.11), not note for note.

``self_similarity`` gives the whole matrix of bar similarities, and `plot_self_similarity` draws it
with the phrases marked on the axes.

``memory_gain`` asks whether a model remembers its sections: the teacher-forced NLL of a returning
phrase's tokens read after the whole song before it, against the NLL of the same tokens read after the
song with the earlier phrases of its label cut out (so that the phrase is, to the model, a first
occurrence). The difference, per token, is what memory of the earlier phrases gives.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from evaluation.along import bar_contents
from evaluation.quality_metrics import NotePiece
from generation.recall import KeyTokens, RecallConfig, recall_nll
from model import MusicPerformer, token_loss
from tokenization.form import Phrase, first_occurrences


@dataclass
class FormScore:
    same: float  # mean similarity of corresponding bars of same-label phrases (NaN: no such pair)
    different: float  # the same over phrases with different labels
    same_pairs: int  # bar pairs behind `same`
    different_pairs: int  # bar pairs behind `different`

    @property
    def gap(self) -> float:
        return self.same - self.different


def jaccard(a: set, b: set) -> float:
    """|a & b| / |a | b|, and 0 for two empty bars' sets (nothing restated)."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def self_similarity(piece: NotePiece) -> np.ndarray:
    """(B, B) Jaccard similarities of the piece's bars."""
    contents = bar_contents(piece)
    count = len(contents)
    matrix = np.eye(count)
    for i in range(count):
        for j in range(i + 1, count):
            matrix[i, j] = matrix[j, i] = jaccard(contents[i], contents[j])
    return matrix


def form_score(piece: NotePiece, phrases: Sequence[Phrase], shift: int = 0) -> FormScore:
    """Same-label and different-label phrase similarity of a piece whose form's bar 0 is its bar
    `shift` (bars outside the piece, or with no note in either, are left out)."""
    contents = bar_contents(piece)
    same: list[float] = []
    different: list[float] = []
    for i, p in enumerate(phrases):
        for q in phrases[i + 1:]:
            for b in range(min(p.bars, q.bars)):
                x, y = p.first + b + shift, q.first + b + shift
                if not (0 <= x < len(contents) and 0 <= y < len(contents)):
                    continue
                if not (contents[x] or contents[y]):
                    continue
                (same if p.label == q.label else different).append(jaccard(contents[x], contents[y]))
    return FormScore(float(np.mean(same)) if same else math.nan,
                     float(np.mean(different)) if different else math.nan, len(same), len(different))


def summary(scores: Sequence[FormScore]) -> dict[str, tuple[float, float, int]]:
    """Mean, std and count over pieces of same, different and gap (pieces with a NaN left out)."""
    out = {}
    for name in ("same", "different", "gap"):
        values = np.asarray([getattr(s, name) for s in scores], dtype=np.float64)
        values = values[np.isfinite(values)]
        out[name] = (float(values.mean()) if len(values) else math.nan,
                     float(values.std(ddof=1)) if len(values) > 1 else 0.0, len(values))
    return out


def plot_self_similarity(panels: Sequence[tuple[str, np.ndarray, Sequence[Phrase], int]], path: Path) -> None:
    """Side by side, each panel's bar self-similarity matrix (title, matrix, phrases, shift), with
    the phrases' labels and boundaries drawn on both axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.4), squeeze=False)
    for ax, (title, matrix, phrases, shift) in zip(axes[0], panels):
        ax.imshow(matrix, cmap="magma", vmin=0.0, vmax=1.0, origin="upper", interpolation="nearest")
        ticks, names = [], []
        for phrase in phrases:
            start = phrase.first + shift
            if start >= len(matrix):
                break
            ax.axhline(start - 0.5, color="cyan", lw=0.6)
            ax.axvline(start - 0.5, color="cyan", lw=0.6)
            ticks.append(start + phrase.bars / 2 - 0.5)
            names.append(phrase.label)
        ax.set_xticks(ticks, names, fontsize=7)
        ax.set_yticks(ticks, names, fontsize=7)
        ax.set_xlim(-0.5, len(matrix) - 0.5)
        ax.set_ylim(len(matrix) - 0.5, -0.5)
        ax.set_title(title, fontsize=9)
    fig.suptitle("bar self-similarity (Jaccard of (onset, pitch) sets); phrases on the axes", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


@dataclass
class Memory:
    returning: float  # NLL (nats) summed over the returning phrases' tokens, read after the whole song
    as_first: float  # the same tokens read with the earlier phrases of their label cut out
    tokens: int  # tokens summed
    song_nll: float  # NLL summed over the whole song read from its start
    song_tokens: int  # its tokens (less the first)

    @property
    def gain(self) -> float:
        """Nats per token that the earlier occurrences save (positive: the model remembers)."""
        return (self.as_first - self.returning) / self.tokens if self.tokens else math.nan


@torch.no_grad()
def teacher_forced_logits(model: MusicPerformer, ids: Sequence[int], seed: int) -> torch.Tensor:
    """(len(ids) - 1, V) the model's next-token logits after each of ids[:-1], teacher-forced in one pass
    with one positional noise drawn from `seed` (as `token_nll`)."""
    device = model.head.weight.device
    tokens = torch.as_tensor(list(ids), dtype=torch.long, device=device)[None]  # (1, L)
    noise = model.draw_positional_noise(tokens.shape[1], generator=torch.Generator().manual_seed(seed))
    logits, _ = model(tokens[:, :-1], positional_noise=noise)  # (1, L - 1, V)
    return logits[0]


@torch.no_grad()
def token_nll(model: MusicPerformer, ids: Sequence[int], seed: int) -> np.ndarray:
    """(len(ids) - 1,) teacher-forced NLL of ids[1:], one positional noise drawn from `seed`."""
    logits = teacher_forced_logits(model, ids, seed)  # (L - 1, V)
    targets = torch.as_tensor(list(ids)[1:], dtype=torch.long, device=logits.device)  # (L - 1,)
    return token_loss(logits[None], targets[None], "none")[0].double().cpu().numpy()


@torch.no_grad()
def memory_gain(model: MusicPerformer, ids: Sequence[int], bar_starts: Sequence[int], phrases: Sequence[Phrase],
                shift: int = 0, seed: int = 0, recall: tuple[RecallConfig, KeyTokens] | None = None) -> Memory:
    """`Memory` of one song (module docstring): `bar_starts` index its bars in `ids`, the form's bar
    0 is its bar `shift`; phrases outside the song are left out. With `recall` (its config and the
    tokenizer's key tokens) the NLLs are the model's mixed with its copy cache (generation.recall)."""

    def nll(tokens: list[int]) -> np.ndarray:
        own = token_nll(model, tokens, seed)
        return own if recall is None else recall_nll(tokens, own, *recall)

    model.eval()
    ids = list(ids)
    edges = list(bar_starts) + [len(ids)]

    def span(first: int, bars: int) -> tuple[int, int] | None:
        a, b = first + shift, first + shift + bars
        if a < 1 or b >= len(edges):
            return None
        return edges[a], edges[b]

    full = nll(ids)
    returning = as_first = 0.0
    count = 0
    for index, source in first_occurrences(list(phrases)).items():
        phrase = phrases[index]
        where = span(phrase.first, phrase.bars)
        if where is None:
            continue
        start, end = where
        cuts = [span(p.first, p.bars) for p in phrases[:index] if p.label == phrase.label]
        if any(c is None for c in cuts):
            continue
        kept = np.ones(start, dtype=bool)
        for a, b in cuts:
            kept[a:b] = False
        context = [t for t, keep in zip(ids[:start], kept) if keep]
        alone = nll(context + ids[start:end])[len(context) - 1:]
        returning += float(full[start - 1:end - 1].sum())
        as_first += float(alone.sum())
        count += end - start
    return Memory(returning, as_first, count, float(full.sum()), len(full))


@dataclass
class LabelledSong:
    name: str  # song number
    ids: list[int]  # its tokens, as measured
    phrases: list[Phrase]  # its human form
    shift: int  # the form's bar 0 is bar `shift` of `ids`


def label_songs(songs: Sequence[tuple[str, list[int], list[int]]], tokenizer, source: Path, structure: Path,
                built: dict[str, dict], annotator: int = 1) -> tuple[list[LabelledSong], dict[str, int]]:
    """The songs (name, corpus ids, measured ids: the corpus ids less leading bars) whose human labels
    fall on the tokenizer's bars (data.pop909_structure.place), and a count of songs: given, with
    labels, placed on our bars. `built`: the corpus summary's per-song report (the leading bars the
    build dropped, the ticks it moved the song by to align its downbeats)."""
    from data.pop909 import merge_tracks, pop909_files
    from data.pop909_structure import place, structure_songs
    from tokenization import load_midi

    files = pop909_files(source)
    labelled = set(structure_songs(structure))
    out, report = [], {"songs": len(songs), "with_labels": 0, "on_our_bars": 0}
    for name, corpus_ids, ids in songs:
        if name not in labelled or name not in files:
            continue
        report["with_labels"] += 1
        midi = load_midi(files[name])
        moved = built.get(name, {}).get("downbeat_shift", 0)
        for note in (n for inst in midi.instruments for n in inst.notes):
            note.start, note.end = note.start + moved, note.end + moved
        tokenizer.encode(merge_tracks(midi, name)[0])  # where the tokenizer's bars fall in this file
        stats = tokenizer.last_encode_stats
        per_bar = 12 if stats.meter == "3/4" else 16
        placement = place(structure, name, midi, stats.start, per_bar, annotator=annotator)
        if placement is None or not placement.agrees:
            continue
        report["on_our_bars"] += 1
        dropped = len(tokenizer.bar_starts(list(corpus_ids))) - len(tokenizer.bar_starts(list(ids)))
        out.append(LabelledSong(name, list(ids), placement.form, placement.shift - dropped))
    return out, report
