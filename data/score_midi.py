"""Scores to MIDI: music21 scores written as MIDI files, as the notation says (no performance).

:func:`score_to_midi` converts one ``music21`` score (repeats are not expanded, ties are merged, a pickup
bar is shifted so that bar lines fall where the time signature puts them); :func:`convert_corpus_file`
parses a file of music21's bundled corpus and writes its score (or each tune of an opus) to MIDI.
``data.music21_corpus`` caches these files and tokenises them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import miditoolkit
import numpy as np

TICKS_PER_QUARTER = 480  # resolution of the written MIDI files
DEFAULT_VELOCITY = 80  # note velocity before any dynamic marking (mf)


def convert_corpus_file(corpus_path: str, stem: str, midi_root: Path) -> list[str]:
    """Parse a music21 corpus file and write one MIDI file per score below ``midi_root``.

    The piece names (and MIDI paths, ``midi_root/<name>.mid``) are ``stem`` for a score and
    ``stem/01``, ``stem/02`` ... for the tunes of an opus; returns them.
    """
    from music21 import corpus, stream

    parsed = corpus.parse(corpus_path, forceSource=True)
    if isinstance(parsed, stream.Opus):
        scores = list(parsed.scores)
        width = len(str(len(scores)))
        named = [(f"{stem}/{i + 1:0{width}d}", s) for i, s in enumerate(scores)]
    else:
        named = [(stem, parsed)]
    names = []
    for name, score in named:
        path = midi_root / f"{name}.mid"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        score_to_midi(score).dump(str(tmp))
        os.replace(tmp, path)
        names.append(name)
    return names


def score_to_midi(score: Any) -> miditoolkit.MidiFile:
    """A ``music21.stream.Score`` as a MIDI file, as written (no repeat expansion).

    One track per part (program from the part's instrument); ties are merged; velocities follow the
    dynamic markings of each part (``DEFAULT_VELOCITY`` before the first); time signatures and
    metronome marks come from the first part; a pickup bar is shifted to the end of its bar.
    """
    from music21 import chord, dynamics, note, stream, tempo

    parts = list(score.parts) if isinstance(score, stream.Score) and len(score.parts) else [score]
    shift = _pickup_shift(parts[0])
    midi = miditoolkit.MidiFile(ticks_per_beat=TICKS_PER_QUARTER)
    for index, part in enumerate(parts):
        instrument = part.getInstrument(returnDefault=True)
        program = instrument.midiProgram if instrument is not None and instrument.midiProgram is not None else 0
        track = miditoolkit.Instrument(program=int(program), is_drum=False, name=part.partName or f"part {index + 1}")
        velocity = DEFAULT_VELOCITY
        sounding: dict[int, miditoolkit.Note] = {}  # pitch -> last note (to extend on a tie)
        for element in part.flatten():
            tick = _ticks(element.offset + shift)
            if index == 0 and isinstance(element, tempo.MetronomeMark) and element.getQuarterBPM():
                start = 0 if element.offset == 0 else tick  # a mark at the very start holds from bar 1
                midi.tempo_changes.append(miditoolkit.TempoChange(float(element.getQuarterBPM()), start))
            elif isinstance(element, dynamics.Dynamic) and element.volumeScalar is not None:
                velocity = int(np.clip(round(element.volumeScalar * 127), 1, 127))
            elif isinstance(element, (note.Note, chord.Chord)):
                duration = _ticks(element.quarterLength)
                if duration <= 0:  # grace notes
                    continue
                tie = element.tie.type if element.tie is not None else None
                for pitch in element.pitches:
                    previous = sounding.get(pitch.midi)
                    if tie in ("continue", "stop") and previous is not None and previous.end == tick:
                        previous.end = tick + duration
                        continue
                    sounding[pitch.midi] = miditoolkit.Note(velocity, int(pitch.midi), tick, tick + duration)
                    track.notes.append(sounding[pitch.midi])
        track.notes.sort(key=lambda n: (n.start, n.pitch))
        midi.instruments.append(track)
    midi.time_signature_changes = _dedupe_by_time(_time_signatures(parts[0], shift))
    midi.tempo_changes = _dedupe_by_time(midi.tempo_changes)
    midi.max_tick = max((n.end for t in midi.instruments for n in t.notes), default=0)
    return midi


def _ticks(quarter_length: Any) -> int:
    return int(round(float(quarter_length) * TICKS_PER_QUARTER))


def _time_signatures(part: Any, shift: float) -> list[miditoolkit.TimeSignature]:
    """The time signatures of a part, at the start of their bars (the first one at tick 0)."""
    from music21 import meter

    measures = part.getElementsByClass("Measure")
    if not len(measures):
        found = part.flatten().getElementsByClass(meter.TimeSignature)
        return [miditoolkit.TimeSignature(ts.numerator, ts.denominator, _ticks(ts.offset)) for ts in found]
    changes = []
    for index, measure in enumerate(measures):
        signature = measure.timeSignature
        if signature is not None:
            tick = 0 if index == 0 else _ticks(measure.offset + shift)
            changes.append(miditoolkit.TimeSignature(signature.numerator, signature.denominator, tick))
    return changes


def _pickup_shift(part: Any) -> float:
    """Quarter lengths missing from an incomplete first bar (a pickup), 0 otherwise."""
    measures = part.getElementsByClass("Measure")
    if not len(measures):
        return 0.0
    first = measures[0]
    if first.paddingLeft:
        return float(first.paddingLeft)
    bar = first.barDuration.quarterLength
    if first.number == 0 and 0 < first.duration.quarterLength < bar:
        return float(bar - first.duration.quarterLength)
    return 0.0


def _dedupe_by_time(events: list[Any]) -> list[Any]:
    """Events sorted by time, keeping the first one at each time."""
    kept: dict[int, Any] = {}
    for event in sorted(events, key=lambda e: e.time):
        kept.setdefault(event.time, event)
    return list(kept.values())
