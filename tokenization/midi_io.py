"""Loading MIDI from the forms users hand us: a path, raw bytes, or an in-memory object; finding MIDI files.

Bytes are parsed with ``symusic`` (a C++ MIDI parser, ~100x faster than mido) and converted to the
``miditoolkit.MidiFile`` the tokenizers work on: instruments (program, is_drum, name, notes), tempo
changes, time signatures and the file's ticks per beat. Other MIDI events are not carried over.

The notes of a file in beats, whatever its resolution, are ``midi_notes(midi)`` (``PieceNote``s): what
``BaseTokenizer.notes`` gives of a decoded piece, for piano rolls and note counts.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import miditoolkit
import numpy as np
import symusic

from tokenization.errors import TokenizationError

MIDI_MAGIC = b"MThd"
MIDI_SUFFIXES = (".mid", ".midi")  # file suffixes taken for MIDI files, compared in lower case


def is_midi_path(path: Path) -> bool:
    """Whether a path names a MIDI file by its suffix (``.mid`` / ``.midi``, any case)."""
    return path.suffix.lower() in MIDI_SUFFIXES


MIDI_DEFAULT_QPM = 120.0  # tempo before a file's first tempo change


@dataclass
class PieceNote:
    """One note of a piece, its times in beats (quarter notes) from the piece's start."""

    track: str  # track label: the instrument's name, else "drums" or "program <n>"
    start: float  # onset in beats
    end: float  # offset in beats
    pitch: int  # MIDI pitch
    velocity: int  # MIDI velocity 0..127


def track_label(name: str | None, program: int, is_drum: bool) -> str:
    """How a track is called in a piano roll: its name, else "drums" or "program <n>"."""
    return name or ("drums" if is_drum else f"program {program}")


def midi_notes(midi: miditoolkit.MidiFile) -> list[PieceNote]:
    """The notes of a MIDI file, track by track in file order, times in beats."""
    per_beat = float(midi.ticks_per_beat)
    return [PieceNote(track_label(inst.name, inst.program, inst.is_drum), n.start / per_beat, n.end / per_beat,
                      n.pitch, n.velocity)
            for inst in midi.instruments for n in inst.notes]


def midi_files(folder: Path) -> list[Path]:
    """Every MIDI file below ``folder`` (recursively), sorted by path."""
    return sorted(p for p in folder.rglob("*") if is_midi_path(p) and p.is_file())


def unusable_midi_paths(folder: Path) -> list[tuple[Path, str]]:
    """MIDI-named entries below ``folder`` that are not readable files, each with the reason: a
    dangling or looping symbolic link, a FIFO, a device (what `midi_files` leaves out)."""
    out = []
    for path in sorted(p for p in folder.rglob("*") if is_midi_path(p)):
        if path.is_file() or path.is_dir():
            continue
        if path.is_symlink():
            try:
                path.resolve(strict=True)
                reason = "a symbolic link to something that is not a file"
            except (OSError, RuntimeError):
                reason = "a symbolic link that leads nowhere (dangling or a loop)"
        elif path.is_fifo():
            reason = "a FIFO, not a file"
        else:
            reason = "not a regular file"
        out.append((path, reason))
    return out


def declared_meters(midi: miditoolkit.MidiFile) -> list[str]:
    """Time signatures of a MIDI file in order of appearance ("n/d"), consecutive repeats removed."""
    meters: list[str] = []
    for change in sorted(midi.time_signature_changes, key=lambda t: t.time):
        meter = f"{change.numerator}/{change.denominator}"
        if not meters or meters[-1] != meter:
            meters.append(meter)
    return meters


def source_name(source: Any) -> str:
    """A short human-readable name for error messages."""
    if isinstance(source, (str, Path)):
        return str(source)
    if isinstance(source, (bytes, bytearray)):
        return f"<{len(source)} bytes of MIDI>"
    return f"<{type(source).__module__}.{type(source).__name__}>"


def _from_bytes(data: bytes, name: str) -> miditoolkit.MidiFile:
    if len(data) == 0:
        raise TokenizationError(name, "empty file")
    if not data.startswith(MIDI_MAGIC):
        raise TokenizationError(name, "not a MIDI file (no 'MThd' header)")
    try:
        score = symusic.Score.from_midi(data)
    except RuntimeError as err:
        reason = str(err).removeprefix("MiniMidi: ").removesuffix(": iostream error")
        raise TokenizationError(name, f"corrupt or truncated MIDI ({reason})") from err
    return _to_miditoolkit(score)


def _to_miditoolkit(score: symusic.Score) -> miditoolkit.MidiFile:
    midi = miditoolkit.MidiFile()
    midi.ticks_per_beat = score.ticks_per_quarter
    for track in score.tracks:
        inst = miditoolkit.Instrument(program=track.program, is_drum=track.is_drum, name=track.name)
        arrays = track.notes.numpy()  # dict of equal-length int arrays: time, duration, pitch, velocity
        starts = arrays["time"].tolist()
        ends = (arrays["time"] + arrays["duration"]).tolist()
        inst.notes = [
            miditoolkit.Note(velocity=v, pitch=p, start=s, end=e)
            for s, e, p, v in zip(starts, ends, arrays["pitch"].tolist(), arrays["velocity"].tolist())
        ]
        midi.instruments.append(inst)
    midi.tempo_changes = [miditoolkit.TempoChange(60_000_000 / t.mspq, t.time) for t in score.tempos]
    midi.time_signature_changes = [
        miditoolkit.TimeSignature(ts.numerator, ts.denominator, ts.time) for ts in score.time_signatures
    ]
    midi.max_tick = max((n.end for inst in midi.instruments for n in inst.notes), default=0)
    return midi


def load_midi(source: Any) -> miditoolkit.MidiFile:
    """Return a ``miditoolkit.MidiFile`` from a path, bytes, a MidiFile or a ``pretty_midi.PrettyMIDI``.

    Raises :class:`TokenizationError` (naming the source) for a missing, empty, truncated or non-MIDI file.
    """
    name = source_name(source)
    if isinstance(source, miditoolkit.MidiFile):
        return source
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.exists():
            raise TokenizationError(name, "no such file")
        if not path.is_file():
            raise TokenizationError(name, "not a regular file")
        try:
            data = path.read_bytes()
        except OSError as err:
            raise TokenizationError(name, f"unreadable ({err.strerror})") from err
        return _from_bytes(data, name)
    if isinstance(source, (bytes, bytearray)):
        return _from_bytes(bytes(source), name)
    if type(source).__module__.startswith("pretty_midi"):
        buffer = io.BytesIO()
        source.write(buffer)
        return _from_bytes(buffer.getvalue(), name)
    raise TokenizationError(name, "unsupported input type (expected a path, bytes or a MIDI object)")


def tick_to_seconds(midi: miditoolkit.MidiFile, ticks: np.ndarray) -> np.ndarray:
    """Seconds of MIDI ticks under the file's tempo map (120 qpm before the first change)."""
    per_beat = float(midi.ticks_per_beat)
    changes: dict[int, float] = {0: MIDI_DEFAULT_QPM}
    for change in sorted(midi.tempo_changes, key=lambda c: c.time):  # a later change at one tick wins
        if change.tempo > 0:
            changes[int(change.time)] = float(change.tempo)
    starts = np.array(sorted(changes), dtype=np.float64)  # (S,) ticks where a tempo begins
    seconds_per_tick = np.array([60.0 / (changes[int(s)] * per_beat) for s in starts])  # (S,)
    segment_seconds = np.concatenate([[0.0], np.cumsum(np.diff(starts) * seconds_per_tick[:-1])])  # (S,)
    ticks = np.asarray(ticks, dtype=np.float64)
    index = np.searchsorted(starts, ticks, side="right") - 1  # segment of each tick
    return segment_seconds[index] + (ticks - starts[index]) * seconds_per_tick[index]
