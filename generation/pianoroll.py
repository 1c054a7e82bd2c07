"""Piano-roll pictures of pieces (matplotlib, Agg backend: no display needed).

Draws a piece's notes as every format gives them (``BaseTokenizer.notes(ids)``, or
``tokenization.midi_notes(midi)`` of a MIDI file): one colour per track, time in beats, an optional
dashed line where the prompt ends, and optional section marks (a song's form: each phrase's label at
its first bar).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib

from tokenization import PieceNote

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)
from matplotlib.patches import Rectangle  # noqa: E402


def save_pianoroll(notes: Sequence[PieceNote], path: str | Path, title: str = "",
                   prompt_end_beat: float | None = None, sections: Sequence[tuple[float, str]] = (),
                   generated: tuple[float, float] | None = None) -> None:
    """Draw a piece's notes as a piano roll into an image file (format from the suffix); `sections`:
    (beat, label) of each section's start, drawn as a line and its label; `generated`: the generated
    bars [start, end) in beats, shaded, with both ends marked."""
    tracks = sorted({n.track for n in notes})
    colours = {track: plt.get_cmap("tab10")(i % 10) for i, track in enumerate(tracks)}
    length = max((n.end for n in notes), default=4.0)
    figure, axes = plt.subplots(figsize=(min(4.0 + length / 8.0, 40.0), 5.0))
    for note in notes:
        alpha = 0.35 + 0.65 * note.velocity / 127.0
        axes.add_patch(Rectangle((note.start, note.pitch - 0.4), max(note.end - note.start, 0.05),
                                 0.8, color=colours[note.track], alpha=alpha, linewidth=0))
    low = min((n.pitch for n in notes), default=48)
    high = max((n.pitch for n in notes), default=72)
    axes.set_xlim(0.0, max(length, 1.0))
    axes.set_ylim(low - 2, high + 2)
    for bar in range(0, int(length) + 1, 4):
        axes.axvline(bar, color="0.85", linewidth=0.5, zorder=0)
    for beat, label in sections:
        axes.axvline(beat, color="tab:red", linewidth=0.8, alpha=0.7, zorder=1)
        axes.text(beat + 0.5, high + 1.2, label, color="tab:red", fontsize=9, va="center", fontweight="bold")
    if generated is not None:
        axes.axvspan(*generated, color="tab:orange", alpha=0.12, zorder=0, label="generated bars")
        for edge in generated:
            axes.axvline(edge, color="tab:orange", linestyle="--", linewidth=1.0)
        axes.text(generated[0] + 0.3, low - 1.4, "generated", color="tab:orange", fontsize=9, va="center")
    if prompt_end_beat is not None:
        axes.axvline(prompt_end_beat, color="black", linestyle="--", linewidth=1.0, label="end of prompt")
    handles = [Rectangle((0, 0), 1, 1, color=colours[t]) for t in tracks]
    if handles:
        axes.legend(handles, tracks, loc="upper right", fontsize="small")
    axes.set_xlabel("beats")
    axes.set_ylabel("MIDI pitch")
    axes.set_title(title or f"{len(notes)} notes")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
