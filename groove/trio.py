"""A small offline trio corpus (bass, drums, accompaniment), a stand-in for Groove2Groove.

The real Groove2Groove MIDI dataset (Band-in-a-Box accompaniments in many styles) cannot be downloaded
here, so this module builds 3-track MIDI files from the Bach chorales bundled with music21 (public
domain): the lowest part becomes the bass track ("BB Bass", program 33), the upper parts are merged into
one accompaniment track (piano, strings or guitar, drawn per piece), and a **synthetic, rule-based**
drum track ("BB Drums") is added: kick / snare / hi-hat patterns drawn per piece from a few templates,
a crash every 8 bars and a snare fill every 4th bar. Only 4/4 chorales are used; a pickup bar is padded
so that bar lines fall on multiples of 4 beats. All times are on the 1/12-beat grid. It exercises the
whole pipeline (roles, tokenizer, augmentation, metrics) but is musically nothing like the real
dataset: chorales are homophonic and the drums are mechanical. Pieces are split into train / val / test
(whole pieces, never bars of one piece in two splits), in the Groove2Groove folder layout
``out_dir/{train,val,test}/*.mid``, with ``out_dir/corpus.json`` describing every piece.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path

import miditoolkit
import numpy as np
from tqdm.auto import tqdm

from groove.dataset import SPLITS
from groove.roles import BEATS_PER_BAR, TICKS_PER_BAR, TICKS_PER_BEAT, GridNote, clean_notes

logger = logging.getLogger(__name__)

MIDI_TICKS_PER_BEAT = 480  # resolution of the written files (grid tick = 40 MIDI ticks)
QPM = 100  # tempo of the written files
KICK, SNARE, CLOSED_HAT, OPEN_HAT, CRASH = 36, 38, 42, 46, 49  # GM drum pitches
DRUM_HIT_TICKS = 2  # length of a drum hit on the grid

# Drum templates, in grid ticks inside one 4/4 bar (48 ticks).
KICK_PATTERNS = {"rock": [0, 24], "push": [0, 24, 30], "four": [0, 12, 24, 36], "half": [0], "synco": [0, 18, 30]}
SNARE_PATTERNS = {"backbeat": [12, 36], "halftime": [24], "late": [36]}
HAT_PATTERNS = {
    "quarters": list(range(0, 48, 12)),
    "eighths": list(range(0, 48, 6)),
    "sixteenths": list(range(0, 48, 3)),
    "swing": [b + o for b in range(0, 48, 12) for o in (0, 8)],
}
ACCOMPANIMENTS = [("BB Piano", 0), ("BB Strings", 48), ("BB Guitar", 25)]  # (track name, GM program)


@dataclass
class TrioPiece:
    """Description of one generated piece (saved in corpus.json)."""

    name: str  # file stem, from the music21 corpus file name
    source: str  # music21 corpus file the notes come from
    split: str  # train / val / test
    accompaniment: str  # track name of the accompaniment (its instrument)
    drums: str  # drum template: kick/snare/hat names
    bars: int  # length in 4/4 bars


@dataclass
class TrioCorpus:
    """Where the corpus was written."""

    root: Path  # out_dir
    splits: dict[str, list[Path]] = field(default_factory=dict)  # split -> MIDI files
    pieces: list[TrioPiece] = field(default_factory=list)  # one entry per file


def _to_grid(quarter_length: Fraction | float) -> int:
    return round(Fraction(quarter_length).limit_denominator(96) * TICKS_PER_BEAT)


def chorale_parts(score) -> tuple[list[GridNote], list[GridNote]] | None:
    """(bass notes, upper-part notes) on the grid, or None if the score is not a 4/4 piece of 2+ parts."""
    parts = list(score.parts)
    signature = score.recurse().getElementsByClass("TimeSignature").first()
    if len(parts) < 2 or signature is None or signature.ratioString != "4/4":
        return None
    first_bar = parts[0].getElementsByClass("Measure").first()
    pad = _to_grid(first_bar.paddingLeft) if first_bar is not None else 0
    notes_per_part = []
    for part in parts:
        notes = []
        for element in part.stripTies().flatten().notes:
            start = _to_grid(element.offset) + pad
            end = start + max(1, _to_grid(element.quarterLength))
            notes += [(start, end, p.midi) for p in element.pitches]
        notes_per_part.append(notes)
    bass = clean_notes(notes_per_part[-1])
    upper = clean_notes([n for notes in notes_per_part[:-1] for n in notes])
    return (bass, upper) if bass and upper else None


def drum_track(bars: int, rng: np.random.Generator) -> tuple[list[tuple[int, int, int]], str]:
    """Synthetic drum hits (start, pitch, velocity) over ``bars`` bars, and the template's name."""
    kick, snare, hat = (str(rng.choice(sorted(p))) for p in (KICK_PATTERNS, SNARE_PATTERNS, HAT_PATTERNS))
    open_hat = bool(rng.random() < 0.5)
    hits = []
    for bar in range(bars):
        base = bar * TICKS_PER_BAR
        fill = bar % 4 == 3
        hits += [(base + t, KICK, 100) for t in KICK_PATTERNS[kick]]
        hits += [(base + t, SNARE, 92) for t in SNARE_PATTERNS[snare]]
        hat_ticks = [t for t in HAT_PATTERNS[hat] if not (fill and t >= 36)]
        hits += [(base + t, OPEN_HAT if open_hat and t == 42 else CLOSED_HAT, 70) for t in hat_ticks]
        if fill:
            hits += [(base + t, SNARE, 60 + 8 * i) for i, t in enumerate(range(36, 48, 3))]
        if bar % 8 == 0:
            hits.append((base, CRASH, 105))
    jitter = rng.integers(-8, 9, size=len(hits))
    return [(s, p, int(np.clip(v + j, 1, 127))) for (s, p, v), j in zip(hits, jitter)], f"{kick}/{snare}/{hat}"


def _instrument(
    name: str, program: int, notes: list[GridNote], velocity: int = 64, is_drum: bool = False
) -> miditoolkit.Instrument:
    inst = miditoolkit.Instrument(program=program, is_drum=is_drum, name=name)
    scale = MIDI_TICKS_PER_BEAT // TICKS_PER_BEAT
    inst.notes = [miditoolkit.Note(velocity=velocity, pitch=p, start=s * scale, end=e * scale) for s, e, p in notes]
    return inst


def write_trio(
    path: Path, bass: list[GridNote], upper: list[GridNote], rng: np.random.Generator
) -> tuple[str, str, int]:
    """Write one 3-track MIDI file; returns (accompaniment name, drum template, bars)."""
    end = max(n[1] for n in bass + upper)
    bars = -(-end // TICKS_PER_BAR)
    hits, template = drum_track(bars, rng)
    acc_name, acc_program = ACCOMPANIMENTS[int(rng.integers(len(ACCOMPANIMENTS)))]
    midi = miditoolkit.MidiFile(ticks_per_beat=MIDI_TICKS_PER_BEAT)
    midi.tempo_changes = [miditoolkit.TempoChange(QPM, 0)]
    midi.time_signature_changes = [miditoolkit.TimeSignature(BEATS_PER_BAR, 4, 0)]
    velocity = {(s, p): v for s, p, v in hits}  # a later hit at the same tick and pitch wins
    drums = _instrument("BB Drums", 0, clean_notes([(s, s + DRUM_HIT_TICKS, p) for s, p in velocity]), is_drum=True)
    scale = MIDI_TICKS_PER_BEAT // TICKS_PER_BEAT
    for note in drums.notes:
        note.velocity = velocity[(note.start // scale, note.pitch)]
    midi.instruments = [_instrument("BB Bass", 33, bass, 90), drums, _instrument(acc_name, acc_program, upper, 75)]
    midi.dump(str(path))
    return acc_name, template, bars


def build_trio_corpus(out_dir: str | Path, n_pieces: int = 40, seed: int = 0, progress: bool = True) -> TrioCorpus:
    """Build ``n_pieces`` trio MIDI files from music21's 4/4 Bach chorales (see the module docstring).

    Val and test get ``max(1, n_pieces // 10)`` pieces each when ``n_pieces >= 3`` (else everything is
    train). Deterministic for a given seed and music21 version.
    """
    from music21 import corpus
    from music21.exceptions21 import Music21Exception

    root = Path(out_dir)
    rng = np.random.default_rng(seed)
    sources = sorted(corpus.getComposer("bach"), key=str)
    order = rng.permutation(len(sources))
    n_held = max(1, n_pieces // 10) if n_pieces >= 3 else 0
    split_of = ["test"] * n_held + ["val"] * n_held + ["train"] * (n_pieces - 2 * n_held)
    result = TrioCorpus(root=root, splits={s: [] for s in SPLITS})
    bar = tqdm(total=n_pieces, desc="trio corpus", unit="piece", disable=not progress)
    for index in order:
        if len(result.pieces) == n_pieces:
            break
        source = Path(sources[index])
        try:
            parts = chorale_parts(corpus.parse(str(source)))
        except Music21Exception as err:
            logger.warning("skipped %s: %s", source.name, err)
            continue
        if parts is None:
            continue
        split = split_of[len(result.pieces)]
        name = source.stem.replace(".", "_")
        path = root / split / f"{name}.mid"
        path.parent.mkdir(parents=True, exist_ok=True)
        accompaniment, drums, bars = write_trio(path, *parts, rng)
        result.splits[split].append(path)
        result.pieces.append(TrioPiece(name, source.name, split, accompaniment, drums, bars))
        bar.update(1)
    bar.close()
    if len(result.pieces) < n_pieces:
        logger.warning("only %d usable chorales (asked for %d)", len(result.pieces), n_pieces)
    description = {
        "description": "synthetic stand-in for Groove2Groove: music21 Bach chorales + rule-based drums",
        "seed": seed,
        "pieces": [asdict(p) for p in result.pieces],
    }
    root.mkdir(parents=True, exist_ok=True)
    (root / "corpus.json").write_text(json.dumps(description, indent=1))
    return result
