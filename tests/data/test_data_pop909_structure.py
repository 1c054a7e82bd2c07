"""POP909's phrase labels placed on MIDI files, and POP909's bars aligned on its annotated downbeats."""

from __future__ import annotations

from pathlib import Path

import miditoolkit
import pytest
from miditoolkit import Instrument, Note, TempoChange

from data.pop909 import align_downbeat, first_downbeat, seconds_to_tick
from data.pop909_structure import place, read_form, read_melody, structure_songs

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
TPQ = 480


def song_folder(root: Path, name: str, labels: str, lead_rest: int) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "human_label1.txt").write_text(labels + "\n")
    (folder / "human_label2.txt").write_text(labels + "\n")
    (folder / "melody.txt").write_text(f"0 {lead_rest}\n72 4\n74 4\n0 8\n")
    return folder


def melody_midi(first_tick: int) -> miditoolkit.MidiFile:
    midi = miditoolkit.MidiFile(ticks_per_beat=TPQ)
    melody = Instrument(program=0, name="MELODY")
    melody.notes = [Note(80, 72, first_tick, first_tick + 480), Note(80, 74, first_tick + 480, first_tick + 960)]
    piano = Instrument(program=0, name="PIANO")
    piano.notes = [Note(60, 48, 0, 1920)]
    midi.instruments = [melody, piano]
    midi.tempo_changes = [TempoChange(120, 0)]
    return midi


def test_labels_are_placed_by_the_first_melody_note(tmp_path):
    song_folder(tmp_path, "001", "i2A4B4", lead_rest=40)  # the melody starts 2.5 bars into the labels
    assert structure_songs(tmp_path) == ["001"] and [p.label for p in read_form(tmp_path, "001")] == ["i", "A", "B"]
    assert read_melody(tmp_path, "001")[:2] == [(0, 40), (72, 4)]
    on_grid = place(tmp_path, "001", melody_midi(first_tick=3 * 1920 + 8 * 120))  # label bar 0 = our bar 1
    assert on_grid.agrees and on_grid.shift == 1 and on_grid.offset == 0 and on_grid.sixteenths_per_bar == 16
    later = place(tmp_path, "001", melody_midi(3 * 1920 + 8 * 120), start=16)  # our encoding starts a bar later
    assert later.agrees and later.shift == 0
    off = place(tmp_path, "001", melody_midi(3 * 1920 + 12 * 120))  # a beat late: not on our bars
    assert not off.agrees and off.offset == pytest.approx(4.0)
    triple = place(tmp_path, "001", melody_midi(40 * 120 + 12 * 120), per_bar=12)
    assert triple.agrees and triple.shift == 1 and triple.bar_ticks == 12 * 120


def test_a_song_without_melody_is_not_placed(tmp_path):
    song_folder(tmp_path, "002", "A4", lead_rest=0)
    midi = melody_midi(0)
    midi.instruments = midi.instruments[1:]
    assert place(tmp_path, "002", midi) is None


def test_the_first_annotated_downbeat_moves_onto_a_bar_line(tmp_path):
    beats = tmp_path / "beat_midi.txt"
    beats.write_text("0.25 1.0 0.0\n0.75 0.0 0.0\n1.25 1.0 1.0\n1.75 0.0 0.0\n")
    assert first_downbeat(beats) == 1.25
    midi = melody_midi(first_tick=1200)  # 120 bpm: 1.25 s is tick 1200
    midi.tempo_changes.append(TempoChange(100, 3000))
    assert seconds_to_tick(midi, 1.25) == pytest.approx(1200)
    shift = align_downbeat(midi, 1.25)
    assert shift == 720 and midi.instruments[0].notes[0].start == 1920
    assert [t.time for t in midi.tempo_changes] == [0, 3720]
    assert align_downbeat(midi, seconds_to_tick(midi, 0) + 1920 / 960) == 0  # already on a bar line


@pytest.mark.skipif(not (SHARED / "pop909_structure").is_dir(),
                    reason=f"needs POP909's phrase labels in {SHARED / 'pop909_structure'} (absent here)")
def test_every_shared_label_file_parses():
    folder = SHARED / "pop909_structure"
    songs = structure_songs(folder)
    assert len(songs) == 869
    for song in songs[::20]:
        for annotator in (1, 2):
            assert read_form(folder, song, annotator)
