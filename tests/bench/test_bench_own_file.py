"""bench.own_file's measures on files whose answer is known: the song itself, and the song moved."""

from __future__ import annotations

from pathlib import Path

import mido

from bench.own_file import compare

TPQ = 96


def write(path: Path, shift: int = 0, extra: bool = False) -> Path:
    """Two bars of quarter notes and a tempo; `shift` ticks later; `extra`: one more note on the 16th grid."""
    events = [(0, mido.MetaMessage("set_tempo", tempo=600000)), (TPQ, mido.MetaMessage("marker", text="A"))]
    for beat in range(8):
        events += [(beat * TPQ + shift, mido.Message("note_on", note=60 + beat, velocity=64)),
                   (beat * TPQ + shift + TPQ // 2, mido.Message("note_off", note=60 + beat, velocity=0))]
    if extra:
        events += [(4 * TPQ + TPQ // 4, mido.Message("note_on", note=90, velocity=50)),
                   (5 * TPQ, mido.Message("note_off", note=90, velocity=0))]
    events.sort(key=lambda event: event[0])
    midi, track, now = mido.MidiFile(ticks_per_beat=TPQ), mido.MidiTrack(), 0
    for tick, message in events:
        track.append(message.copy(time=tick - now))
        now = tick
    midi.tracks.append(track)
    midi.save(path)
    return path


def test_the_song_itself_is_all_kept_and_a_moved_song_is_not(tmp_path):
    song = write(tmp_path / "song.mid")
    same = compare(song, write(tmp_path / "same.mid", extra=True), (4 * TPQ, 8 * TPQ))
    assert same["notes_outside"] == 4 and same["kept"] == same["on_time"] == same["other_messages_kept"] == 1.0
    assert same["generated_notes"] == 1 and same["generated_on_grid"] == 1.0
    moved = compare(song, write(tmp_path / "moved.mid", shift=TPQ // 8), (4 * TPQ, 8 * TPQ))
    assert moved["kept"] == moved["on_time"] == 0.0
    assert moved["generated_notes"] == 8 and moved["generated_on_grid"] == 0.0
