"""POP909 (Wang et al., ISMIR 2020; MIT): 909 pop songs as piano arrangements, as a REMI corpus.

Accepted folders: the dataset repository's ``POP909/NNN/NNN.mid`` (the ``versions/`` sub-folders of
alternative takes are skipped) or a flat folder of ``NNN.mid``. Each file has a tempo track and three
piano tracks, ``MELODY`` (lead melody), ``BRIDGE`` (secondary melody) and ``PIANO`` (accompaniment);
they are merged into one piano part (other tracks, if any, are left out and counted). A file without
any of the three is reported and skipped.

POP909's time signatures are not annotations: most files declare 1/4, some 2/4, 4/4 or 6/8, whatever
the music's meter (4/4, some 3/4). They are therefore left out of the merged file (``merge_tracks``),
and with ``time_signatures=True`` (the default here) the REMI encoder's meter policy (``remi.meter``)
checks MIDI's default 4/4 against the onsets and infers the meter and its downbeat where 4/4 does not
fit. (Kept, a declared 2/4 would pass: onsets alone cannot tell 2/4 from 4/4.) The summary counts the
meters used and gives, per song, the declared meters, the meter used and why, and its number of bars.

POP909's MIDI files follow the recordings' timing: their beats are 480 ticks apart, but the first one
falls anywhere in the first bar of the tick grid. The meter policy finds a phase from the onsets where
the grid from tick 0 does not fit; with ``downbeats`` (a folder of POP909's beat annotations,
``NNN/beat_midi.txt``) each song is first moved later by less than a bar so that its first annotated
downbeat falls on a bar line. Measured against the human phrase labels (data.pop909_structure), our bar
lines then agree with the labels' on 737 of the 869 songs, against 713 without (bench/README.md).

Songs are split by a hash of their number (``data.corpus.split_pieces``, long and short songs apart).
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import miditoolkit
import numpy as np
from tqdm.auto import tqdm

from data.corpus import (
    Piece,
    Skipped,
    TokenCorpus,
    cached_corpus,
    folder_settings,
    length_group,
    split_pieces,
    truncate_at_bar,
    write_corpus,
)
from tokenization import TokenizationError, declared_meters, load_midi, midi_files

if TYPE_CHECKING:
    from remi import REMITokenizer

logger = logging.getLogger(__name__)

BUILDER = "pop909"
TRACKS = ("MELODY", "BRIDGE", "PIANO")  # merged into the piano part, in this order


def pop909_files(folder: str | Path) -> dict[str, Path]:
    """``{song: path}`` of the MIDI files below ``folder`` (``versions/`` skipped), named by file stem."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such folder")
    songs: dict[str, Path] = {}
    for path in midi_files(folder):
        if "versions" in path.relative_to(folder).parts:
            continue
        if path.stem in songs:
            raise ValueError(f"{folder}: two files for song {path.stem} ({songs[path.stem]}, {path})")
        songs[path.stem] = path
    return songs


def merge_tracks(
    midi: miditoolkit.MidiFile, source: str, keep_meters: bool = False
) -> tuple[miditoolkit.MidiFile, int]:
    """``midi`` with MELODY, BRIDGE and PIANO merged into one piano track, and the notes left out.

    The tempo map is kept; the time signatures only with ``keep_meters`` (see the module docstring).
    """
    by_name = {inst.name.strip().upper(): inst for inst in midi.instruments}
    kept = [by_name[name] for name in TRACKS if name in by_name]
    if not kept:
        names = [inst.name for inst in midi.instruments]
        raise TokenizationError(source, f"none of the tracks {', '.join(TRACKS)} (tracks: {names})")
    piano = miditoolkit.Instrument(program=0, is_drum=False, name="Piano")
    piano.notes = sorted((n for inst in kept for n in inst.notes), key=lambda n: (n.start, n.pitch))
    left_out = sum(len(inst.notes) for inst in midi.instruments if inst not in kept)
    merged = miditoolkit.MidiFile(ticks_per_beat=midi.ticks_per_beat)
    merged.instruments = [piano]
    merged.tempo_changes = list(midi.tempo_changes)
    merged.time_signature_changes = list(midi.time_signature_changes) if keep_meters else []
    merged.max_tick = max((n.end for n in piano.notes), default=0)
    return merged, left_out


def first_downbeat(path: Path) -> float | None:
    """Seconds of the first downbeat in a POP909 ``beat_midi.txt`` (time, then the dataset's beat-order
    marks: the last column is 1.0 on the downbeats of 4-beat bars), None without one."""
    for line in path.read_text(encoding="utf-8").split("\n"):
        fields = line.split()
        if len(fields) >= 3 and float(fields[-1]) == 1.0:
            return float(fields[0])
    return None


def seconds_to_tick(midi: miditoolkit.MidiFile, seconds: float) -> float:
    """The (fractional) tick at `seconds` on the file's tempo map (120 bpm before its first tempo)."""
    tick, time, tempo = 0.0, 0.0, 120.0
    for change in sorted(midi.tempo_changes, key=lambda t: t.time):
        span = (change.time - tick) * 60.0 / (tempo * midi.ticks_per_beat)
        if time + span >= seconds:
            break
        tick, time, tempo = float(change.time), time + span, change.tempo
    return tick + (seconds - time) * tempo * midi.ticks_per_beat / 60.0


def align_downbeat(midi: miditoolkit.MidiFile, seconds: float) -> int:
    """Move every note and later tempo change of `midi` by the ticks (less than a 4/4 bar) that put
    the moment `seconds` on a bar line of the 4/4 grid from tick 0; returns the ticks added."""
    tick = round(seconds_to_tick(midi, seconds))
    bar = 4 * midi.ticks_per_beat
    shift = (-tick) % bar
    if shift:
        for inst in midi.instruments:
            for note in inst.notes:
                note.start += shift
                note.end += shift
        midi.tempo_changes = [t if t.time == 0 else miditoolkit.TempoChange(t.tempo, t.time + shift)
                              for t in midi.tempo_changes]
        midi.max_tick += shift
    return shift


def build_pop909_corpus(
    folder: str | Path,
    root: str | Path,
    tokenizer: REMITokenizer | None = None,
    heldout: float = 0.05,
    max_piece_tokens: int | None = None,
    progress: bool = True,
    downbeats: str | Path | None = None,
) -> TokenCorpus:
    """Tokenise the POP909 songs below ``folder`` (REMI with TimeSig tokens by default) into ``root`` (cached).

    Bad files are reported (``summary.json``, log) and skipped. The summary adds ``meters`` (songs per
    meter and source), ``songs`` (per song: declared meters, meter used, its source and reason, bars,
    leading bars left out) and
    ``notes_left_out`` (notes of tracks other than MELODY, BRIDGE and PIANO); with ``downbeats`` (see
    the module docstring), ``downbeats`` (songs moved, songs without an annotated downbeat) and per
    song its ``downbeat_shift`` in ticks.
    """
    if tokenizer is None:
        from remi import REMITokenizer

        tokenizer = REMITokenizer(time_signatures=True)
    folder = Path(folder)
    songs = pop909_files(folder)
    if not songs:
        raise ValueError(f"{folder}: no MIDI files (POP909's NNN/NNN.mid or NNN.mid)")
    if downbeats is not None and not Path(downbeats).is_dir():
        raise ValueError(f"data.downbeats: no such folder: {downbeats} (POP909's NNN/beat_midi.txt files)")
    settings = folder_settings(folder, songs.values(), tokenizer, heldout=heldout,
                               max_piece_tokens=max_piece_tokens,
                               **({"downbeats": str(Path(downbeats).resolve())} if downbeats is not None else {}))
    cached = cached_corpus(root, BUILDER, settings)
    if cached is not None:
        return cached
    pieces, skipped, report = [], [], {}
    meters: Counter = Counter()
    left_out = 0
    aligned: Counter = Counter()
    for name, path in tqdm(songs.items(), desc="POP909", unit="song", disable=not progress):
        try:
            original = load_midi(path)
            midi, dropped = merge_tracks(original, str(path))
            shift = None
            if downbeats is not None:
                beats = Path(downbeats) / name / "beat_midi.txt"
                seconds = first_downbeat(beats) if beats.is_file() else None
                aligned["moved" if seconds is not None else "without an annotated downbeat"] += 1
                shift = None if seconds is None else align_downbeat(midi, seconds)
            ids = tokenizer.encode(midi)
        except TokenizationError as err:
            skipped.append(Skipped(name, err.reason))
            logger.warning("skipped %s: %s", path, err.reason)
            continue
        stats = tokenizer.last_encode_stats
        left_out += dropped
        ids = truncate_at_bar(ids, tokenizer, max_piece_tokens)
        meter = stats.meter or "4/4"
        meters[f"{meter} ({stats.meter_source or 'vocabulary'})"] += 1
        report[name] = {
            "declared": declared_meters(original),
            "meter": meter,
            "source": stats.meter_source,
            "reason": f"declared time signatures ignored; {stats.meter_reason}" if stats.meter_reason else "",
            "bars": len(tokenizer.bar_starts(ids)),
            "leading_bars_dropped": stats.leading_bars_dropped,
            **({"downbeat_shift": shift} if shift is not None else {}),
        }
        pieces.append(Piece(name, np.asarray(ids, dtype=np.int32), "", [meter], path.name, length_group(len(ids))))
    if not pieces:
        raise ValueError(f"{folder}: none of the {len(songs)} POP909 files could be tokenised")
    extra = {"meters": dict(meters.most_common()), "notes_left_out": left_out, "songs": report,
             **({"downbeats": dict(aligned)} if downbeats is not None else {})}
    logger.info("meters: %s", ", ".join(f"{k}: {n}" for k, n in meters.most_common()))
    return write_corpus(root, tokenizer, split_pieces(pieces, heldout), skipped, BUILDER, settings, extra)
