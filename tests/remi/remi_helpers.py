"""Helpers of the REMI tests: build MIDI pieces in sub-beats (16th notes), compare pieces."""

from __future__ import annotations

from fractions import Fraction

import miditoolkit
from miditoolkit import Instrument, Note, TempoChange, TimeSignature


def make_midi(notes, tpq=480, tempi=(), meters=(), drums=()):
    """A MidiFile from ``(onset, duration, pitch, velocity)`` tuples in sub-beats at ``tpq`` ticks a beat.

    ``tempi``: ``(sub-beat, bpm)``; ``meters``: ``(sub-beat, numerator, denominator)``; ``drums``: notes
    of a drum track.
    """
    midi = miditoolkit.MidiFile(ticks_per_beat=tpq)
    step = Fraction(tpq, 4)

    def to_note(onset, duration, pitch, velocity):
        start = int(onset * step)
        return Note(velocity=velocity, pitch=pitch, start=start, end=start + int(duration * step))

    piano = Instrument(program=0, is_drum=False, name="piano")
    piano.notes = [to_note(*n) for n in notes]
    midi.instruments.append(piano)
    if drums:
        kit = Instrument(program=0, is_drum=True, name="drums")
        kit.notes = [to_note(*n) for n in drums]
        midi.instruments.append(kit)
    midi.tempo_changes = [TempoChange(tempo=bpm, time=int(at * step)) for at, bpm in tempi]
    midi.time_signature_changes = [
        TimeSignature(numerator=n, denominator=d, time=int(at * step)) for at, n, d in meters
    ]
    midi.max_tick = max((n.end for n in piano.notes), default=0)
    return midi


def note_set(midi):
    """Sorted ``(onset in beats, duration in beats, pitch, velocity)`` of all pitched notes."""
    tpq = midi.ticks_per_beat
    return sorted(
        (Fraction(n.start, tpq), Fraction(n.end - n.start, tpq), n.pitch, n.velocity)
        for inst in midi.instruments
        if not inst.is_drum
        for n in inst.notes
    )


def meter_map(midi):
    """``[(beat, numerator, denominator)]`` with repeated meters removed."""
    out = []
    for ts in sorted(midi.time_signature_changes, key=lambda t: t.time):
        entry = (Fraction(ts.time, midi.ticks_per_beat), ts.numerator, ts.denominator)
        if out and out[-1][0] == entry[0]:
            out[-1] = entry
        elif not out or out[-1][1:] != entry[1:]:
            out.append(entry)
    return out


def tempo_map(midi):
    """``[(beat, rounded bpm)]`` with repeated tempi removed."""
    out = []
    for t in sorted(midi.tempo_changes, key=lambda t: t.time):
        entry = (Fraction(t.time, midi.ticks_per_beat), round(t.tempo))
        if not out or out[-1][1] != entry[1]:
            out.append(entry)
    return out
