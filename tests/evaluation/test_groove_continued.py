"""A groove continuation's length and drones, as evaluate.py groove counts them."""

from __future__ import annotations

import miditoolkit

from cli_helpers import band_midi
from evaluation.groove import Continued, continuation_of, continued_markdown, onset_places, restruck_drones
from generation.pieces import first_bars
from groove import GrooveTokenizer
from tokenization.midi_io import PieceNote


def test_a_drone_and_an_early_end_are_counted(tmp_path):
    tokenizer = GrooveTokenizer()
    path = band_midi(tmp_path / "band.mid", bars=8)
    midi = miditoolkit.MidiFile(str(path))
    piano = midi.instruments[2]
    piano.notes.append(miditoolkit.Note(80, 72, 4 * 4 * 480, 7 * 4 * 480))  # bar 5: held 3 bars
    midi.dump(str(path))
    ids = [i for i in tokenizer.encode(path) if i != tokenizer.eos_id]
    prompt = first_bars(tokenizer, ids, 2)
    whole = continuation_of("real", "band", tokenizer, ids, len(prompt), len(ids))
    assert not whole.ended and whole.new_tokens == whole.asked and whole.long_notes == 1
    assert whole.notes == 3 * 4 * 6 + 1  # 6 bars of 3 tracks, a note per beat, and the drone
    ended = continuation_of("m", "band", tokenizer, prompt + [tokenizer.eos_id], len(prompt), len(prompt) + 40)
    assert whole.restruck == 0  # a note per beat never chains, and the drone is one note
    assert ended == Continued("m", "band", 1, 40, True, 0, 0, 0, {"bass": (0, 0, 0), "accompaniment": (0, 0, 0)})
    assert whole.onsets == {"bass": (24, 0, 0), "accompaniment": (25, 0, 0)}  # a note per beat, and the drone
    table = continued_markdown([whole, ended])
    assert "| real | 1 | 1 (100%) | 100% | 1 of 73 (1.4%) | 0 (0.0%) |" in table
    assert "| m | 1 | 0 (0%) | 2% | 0 of 0 (0.0%) | 0 (0.0%) |" in table
    assert "| real | 100% | 0% | 100% | 0% |" in table and "| m | 0% | 0% | 0% | 0% |" in table


def test_onset_places_count_beats_off_beat_eighths_and_the_rest():
    assert onset_places([0.0, 1.0, 2.5, 3.5, 3.25, 7.999999999, 0.3333]) == (3, 2, 2)
    assert onset_places([]) == (0, 0, 0)


def note(start: float, end: float, pitch: int = 40, track: str = "bass") -> PieceNote:
    return PieceNote(track, start, end, pitch, 90)


def test_a_drone_restruck_as_its_hold_limit_closes_it_is_counted():
    held = [note(0, 8), note(8, 16), note(16, 18)]  # closed at 2 bars and struck again at once: 4.5 bars
    assert restruck_drones(held) == 3
    assert restruck_drones([note(0, 8), note(8.5, 16)]) == 0  # a rest between them
    assert restruck_drones([note(b, b + 1) for b in range(16)]) == 0  # a note per beat, 4 bars: not a drone
    assert restruck_drones([note(0, 4), note(4, 8)]) == 0  # 2 bars exactly
    assert restruck_drones([note(0, 8), note(8, 16, pitch=41), note(0, 8, track="accompaniment")]) == 0
    assert restruck_drones(held + [note(0, 6, pitch=52), note(6, 8, pitch=52)]) == 3  # the other: 2 bars
    assert restruck_drones(held + [note(0, 6, pitch=52), note(6, 12, pitch=52)]) == 5
