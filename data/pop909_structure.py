"""POP909's human phrase labels (Dai et al. 2020, MIT), placed on the songs' MIDI files.

The folder holds, per song ``NNN/``, two annotators' forms (``human_label1.txt``, ``human_label2.txt``,
e.g. ``i4A8B8x4A8B8B8o4``; see tokenization.form) and the lead melody quantised to 16ths
(``melody.txt``: ``pitch duration`` per line, pitch 0 a rest), whose first line starts at the labels'
first bar. The labels are aligned on that melody, not on the MIDI's bars, so they are placed on a MIDI
file by matching the melody's first note with the first note of the file's MELODY track: the labels'
bar 1 starts that many 16ths before it. A bar has the sixteenths of the meter the tokenizer used for
the song (16 in 4/4, 12 in 3/4).

``placement.agrees`` tells whether the labels' bar lines fall on the REMI tokenizer's bar lines (those of
the meter and phase it chose, from the 16th where its encoding starts) within AGREE_SIXTEENTHS (POP909's
MIDI follows the recording's timing, so its notes sit near, not on, the grid), so that a label's bars
can be read from the tokenised song: ``our_bar = label_bar + placement.shift``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import miditoolkit

from tokenization.form import Phrase, form_bars, parse_form

ANNOTATORS = (1, 2)
MELODY_TRACK = "MELODY"
AGREE_SIXTEENTHS = 0.5  # largest distance, in 16ths, between a label bar line and one of ours


@dataclass
class Placement:
    song: str  # song number, e.g. "001"
    form: list[Phrase]  # the annotator's phrases
    sixteenths_per_bar: int  # 16 (4/4) or 12 (3/4)
    first_tick: int  # MIDI tick where the labels' bar 1 starts
    bar_ticks: int  # ticks per labelled bar
    offset: float  # distance in 16ths from the label bar lines to the nearest of ours (signed)
    agrees: bool  # the label bars fall on the tokenizer's bar lines (see the module docstring)
    shift: int  # our bar index of label bar 0 when `agrees` (else the nearest)


def structure_songs(folder: str | Path) -> list[str]:
    """Song numbers with labels and a melody in `folder`, sorted."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such folder (POP909's phrase labels, pop909_structure/)")
    return sorted(p.name for p in folder.iterdir()
                  if (p / "melody.txt").is_file() and (p / "human_label1.txt").is_file())


def read_form(folder: str | Path, song: str, annotator: int = 1) -> list[Phrase]:
    """One annotator's phrases of a song."""
    if annotator not in ANNOTATORS:
        raise ValueError(f"annotator must be one of {ANNOTATORS}, got {annotator}")
    path = Path(folder) / song / f"human_label{annotator}.txt"
    return parse_form(path.read_text(encoding="utf-8").strip())


def read_melody(folder: str | Path, song: str) -> list[tuple[int, int]]:
    """``(pitch, duration in 16ths)`` of melody.txt, pitch 0 for rests."""
    rows = []
    for line in (Path(folder) / song / "melody.txt").read_text(encoding="utf-8").split("\n"):
        if line.strip():
            pitch, duration = line.split()
            rows.append((int(pitch), int(duration)))
    return rows


def place(folder: str | Path, song: str, midi: miditoolkit.MidiFile, start: int = 0, per_bar: int = 16,
          annotator: int = 1) -> Placement | None:
    """The labels of `song` placed on its MIDI file, whose bars the tokenizer cut every `per_bar`
    sixteenths from the file's 16th `start` (remi's EncodeStats.start and meter); None if the file or
    the melody has no note."""
    form = read_form(folder, song, annotator)
    melody = read_melody(folder, song)
    lead = 0
    for pitch, duration in melody:
        if pitch > 0:
            break
        lead += duration
    else:
        return None
    tracks = [inst for inst in midi.instruments if inst.name.strip().upper() == MELODY_TRACK]
    notes = [n for inst in tracks for n in inst.notes]
    if not notes:
        return None
    sixteenth = midi.ticks_per_beat / 4
    first_tick = round(min(n.start for n in notes) - lead * sixteenth)
    bar_ticks = round(per_bar * sixteenth)
    position = (first_tick / sixteenth - start) / per_bar
    shift = round(position)
    offset = (position - shift) * per_bar
    agrees = abs(offset) <= AGREE_SIXTEENTHS and shift + form_bars(form) > 0
    return Placement(song, form, per_bar, first_tick, bar_ticks, offset, agrees, shift)
