"""Positional-encoding diagnostics: Wang et al. (ICLR 2021) properties and the learned SPE templates.

Properties (spe_notes.md section 8), on the unnormalised causal attention map A (N, N) of a sequence
of one repeated token, per head of one layer (with one repeated token, only position shapes A):

- translation invariance: mean over diagonals (offsets 0 .. N-1, weighted by their length) of the
  variance within a diagonal, divided by the variance of all causal entries. Lower = more invariant.
- monotonicity: over query rows m, the fraction of key pairs n1 < n2 <= m with A[m, n1] > A[m, n2]
  (the farther key attended more). Lower = more monotonic.

Templates (paper Fig. 7): the expected kernel P_d(m, n) of the SPE code generator (the R -> infinity
limit) with a layer's gate applied, (1 - delta) P_d + delta, drawn as matrices for a few heads and
features.
"""

from __future__ import annotations

import csv
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from generation.outputs import AtomicOutputs
from model import MusicPerformer

logger = logging.getLogger(__name__)


@dataclass
class HeadProperties:
    head: int  # attention head index
    translation_invariance: float  # mean over draws (lower = more translation invariant)
    translation_invariance_std: float  # standard deviation over draws
    monotonicity: float  # mean fraction of inverted key pairs (lower = more monotonic)
    monotonicity_std: float  # standard deviation over draws


RTOL = 1e-6  # relative differences below this are rounding, not position (the maps come from float32)


def translation_invariance(scores: torch.Tensor) -> float:
    """Length-weighted within-diagonal variance over the variance of the causal entries of (N, N).

    A map constant up to rounding (std <= RTOL * mean |entry|) has no positional structure: 0.
    """
    n = scores.shape[-1]
    rows, cols = torch.tril_indices(n, n)
    entries = scores[rows, cols]
    total = float(entries.var(unbiased=False))
    if math.sqrt(total) <= RTOL * float(entries.abs().mean()):
        return 0.0
    within = sum(float(scores.diagonal(-k).var(unbiased=False)) * (n - k) for k in range(n))
    weight = n * (n + 1) / 2  # sum of the diagonal lengths
    return within / weight / total


def monotonicity(scores: torch.Tensor) -> float:
    """Fraction of key pairs n1 < n2 <= m with scores[m, n1] > scores[m, n2], over all rows m.

    Differences within RTOL (relative) count as ties, not inversions.
    """
    n = scores.shape[-1]
    farther, nearer = scores[:, :, None], scores[:, None, :]  # (N, N, 1), (N, 1, N): [m, n1, n2]
    inverted = farther - nearer > RTOL * torch.maximum(farther.abs(), nearer.abs())  # (N, N, N)
    index = torch.arange(n, device=scores.device)
    pairs = (index[:, None] < index[None, :])[None] & (index[None, None, :] <= index[:, None, None])
    total = int(pairs.sum())
    return float((inverted & pairs).sum()) / total if total else 0.0


@torch.no_grad()
def head_properties(model: MusicPerformer, token: int, length: int, layer: int, draws: int,
                    seed: int) -> list[HeadProperties]:
    """Properties of every head of `layer` on `length` copies of `token`, over `draws` codes."""
    model.eval()
    device = model.head.weight.device
    generator = torch.Generator(device=device).manual_seed(seed)
    tokens = torch.full((1, length), token, dtype=torch.long, device=device)
    values = np.zeros((draws, model.cfg.n_head, 2))
    for draw in range(draws):
        noise = model.draw_positional_noise(length, generator=generator, formed=False)
        maps = model.attention_maps(tokens, layer=layer, positional_noise=noise)[0]  # (H, N, N)
        for head in range(maps.shape[0]):
            values[draw, head] = (translation_invariance(maps[head]), monotonicity(maps[head]))
    mean, std = values.mean(axis=0), values.std(axis=0)
    return [HeadProperties(h, mean[h, 0], std[h, 0], mean[h, 1], std[h, 1])
            for h in range(model.cfg.n_head)]


def properties_table(label: str, rows: Sequence[HeadProperties]) -> str:
    """Markdown table of the properties of one model."""
    lines = [f"{label}: lower is more translation invariant / more monotonic",
             "| head | translation invariance | monotonicity |", "|---:|---:|---:|"]
    lines += [f"| {r.head} | {r.translation_invariance:.4f} ± {r.translation_invariance_std:.4f} "
              f"| {r.monotonicity:.4f} ± {r.monotonicity_std:.4f} |" for r in rows]
    mean_ti = float(np.mean([r.translation_invariance for r in rows]))
    mean_mono = float(np.mean([r.monotonicity for r in rows]))
    lines.append(f"| mean | {mean_ti:.4f} | {mean_mono:.4f} |")
    return "\n".join(lines) + "\n"


def write_properties(results: Sequence[tuple[str, int, list[HeadProperties]]], out_dir: Path) -> str:
    """pe_properties.csv and pe_properties.md; returns the markdown."""
    text = "\n".join(properties_table(label, rows) for label, _, rows in results)
    with AtomicOutputs() as outputs:
        with outputs.temp(out_dir / "pe_properties.csv").open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["model", "layer", "head", "translation_invariance", "translation_invariance_std",
                             "monotonicity", "monotonicity_std"])
            for label, layer, rows in results:
                for r in rows:
                    writer.writerow([label, layer, r.head, f"{r.translation_invariance:.6f}",
                                     f"{r.translation_invariance_std:.6f}", f"{r.monotonicity:.6f}",
                                     f"{r.monotonicity_std:.6f}"])
        outputs.temp(out_dir / "pe_properties.md").write_text(text)
    return text


# ------------------------------------------------------------------------------ templates
def spe_generator(model: MusicPerformer, layer: int) -> Any:
    """The SPE code generator serving `layer`; ValueError for models without SPE."""
    if not model.cfg.is_spe:
        raise ValueError(f"templates need a model with stochastic positional encoding (pe=sine_spe or "
                         f"conv_spe); this checkpoint has pe={model.cfg.pe}")
    if model.spe is not None:
        return model.spe
    return model.pe.spes[layer]  # share_pe=False: one generator per layer


@torch.no_grad()
def gated_templates(model: MusicPerformer, length: int, layer: int) -> torch.Tensor:
    """(H, D, L, L) expected kernel of `layer`: (1 - delta) P_d + delta (P_d alone when ungated)."""
    if not 0 <= layer < model.cfg.n_layer:
        raise ValueError(f"--layers: layer must be in 0 .. {model.cfg.n_layer - 1}, got {layer}")
    template = spe_generator(model, layer).expected_template(length).double()  # (H, D, L, L)
    gates = model.gates()
    if gates is None:
        return template
    delta = gates[layer].double()[:, :, None, None]  # (H, D, 1, 1)
    return (1.0 - delta) * template + delta


def plot_templates(templates: torch.Tensor, path: Path, title: str, heads: int, features: int) -> None:
    """A heads x features grid of template matrices (query position down, key position across)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    heads = min(heads, templates.shape[0])
    features = min(features, templates.shape[1])
    figure, axes = plt.subplots(heads, features, figsize=(2.2 * features + 0.5, 2.2 * heads + 0.6),
                                squeeze=False)
    for h in range(heads):
        for d in range(features):
            matrix = templates[h, d].cpu().numpy()
            bound = float(np.abs(matrix).max()) or 1.0
            axis = axes[h, d]
            axis.imshow(matrix, cmap="RdBu_r", vmin=-bound, vmax=bound, interpolation="nearest")
            axis.set_xticks([])
            axis.set_yticks([])
            axis.set_title(f"head {h}, feature {d}", fontsize="small")
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def write_templates(model: MusicPerformer, label: str, out_dir: Path, length: int, layers: Sequence[int],
                    heads: int, features: int) -> list[Path]:
    """templates_<label>_layer<l>.png for each layer; returns the paths written."""
    paths = []
    with AtomicOutputs() as outputs:
        for layer in layers:
            templates = gated_templates(model, length, layer)
            path = out_dir / f"templates_{label}_layer{layer}.png"
            gated = " (gated: (1 - delta) P + delta)" if model.gates() is not None else ""
            plot_templates(templates, outputs.temp(path), f"{label}: {model.cfg.pe} templates, "
                           f"layer {layer}{gated}", heads, features)
            paths.append(path)
    return paths
