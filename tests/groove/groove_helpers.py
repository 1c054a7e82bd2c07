"""Hand-made on-grid pieces for the groove tests."""

from __future__ import annotations

import miditoolkit
import muspy


def make_music(tracks: dict[str, list[tuple[int, int, int]]], resolution: int = 12) -> muspy.Music:
    """A muspy piece from ``{name: [(start, end, pitch), ...]}``; the track named "drums" is a drum track."""
    return muspy.Music(
        resolution=resolution,
        tracks=[
            muspy.Track(
                program=33 if name == "bass" else 0,
                is_drum=name == "drums",
                name=name,
                notes=[muspy.Note(time=s, pitch=p, duration=e - s, velocity=80) for s, e, p in notes],
            )
            for name, notes in tracks.items()
        ],
    )


def make_midi(tracks: list[tuple[str, int, bool, list[tuple[int, int, int]]]], tpb: int = 480) -> miditoolkit.MidiFile:
    """A MidiFile from ``[(name, program, is_drum, [(start, end, pitch), ...]), ...]`` (ticks)."""
    midi = miditoolkit.MidiFile(ticks_per_beat=tpb)
    for name, program, is_drum, notes in tracks:
        inst = miditoolkit.Instrument(program=program, is_drum=is_drum, name=name)
        inst.notes = [miditoolkit.Note(velocity=80, pitch=p, start=s, end=e) for s, e, p in notes]
        midi.instruments.append(inst)
    return midi


def notes_of(music: muspy.Music) -> dict[str, list[tuple[int, int, int]]]:
    """``{track name: sorted (start, end, pitch)}`` of the non-empty tracks (times at the music's resolution)."""
    return {
        t.name: sorted((n.time, n.time + n.duration, n.pitch) for n in t.notes) for t in music.tracks if t.notes
    }
