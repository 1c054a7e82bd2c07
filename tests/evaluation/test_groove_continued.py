"""A groove continuation's length and drones, as evaluate.py groove counts them."""

from __future__ import annotations

import miditoolkit

from cli_helpers import band_midi
from evaluation.groove import Continued, continuation_of, continued_markdown, onset_places
from generation.pieces import first_bars
from groove import GrooveTokenizer


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
    assert ended == Continued("m", "band", 1, 40, True, 0, 0, {"bass": (0, 0, 0), "accompaniment": (0, 0, 0)})
    assert whole.onsets == {"bass": (24, 0, 0), "accompaniment": (25, 0, 0)}  # a note per beat, and the drone
    table = continued_markdown([whole, ended])
    assert "| real | 1 | 1 (100%) | 100% | 1 of 73 (1.4%) |" in table
    assert "| m | 1 | 0 (0%) | 2% | 0 of 0 (0.0%) |" in table
    assert "| real | 100% | 0% | 100% | 0% |" in table and "| m | 0% | 0% | 0% | 0% |" in table


def test_onset_places_count_beats_off_beat_eighths_and_the_rest():
    assert onset_places([0.0, 1.0, 2.5, 3.5, 3.25, 7.999999999, 0.3333]) == (3, 2, 2)
    assert onset_places([]) == (0, 0, 0)
