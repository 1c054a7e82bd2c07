"""groove.rhythm: pushes and pumped eighths of one role's notes."""

from __future__ import annotations

import numpy as np
import pytest

from groove.rhythm import EIGHTH, RhythmVariation, draw_variation, vary

# A bass on every beat of two bars, each note 8 ticks (2/3 of a beat), last one a whole bar.
BASS = [(0, 8, 40), (12, 20, 43), (24, 32, 45), (36, 44, 47), (48, 96, 40)]


def test_push_moves_the_chosen_beats_an_eighth_early_and_the_previous_note_makes_room():
    out = vary(BASS, RhythmVariation("push", beats=(2,)))
    assert out == [(0, 8, 40), (12, 18, 43), (18, 32, 45), (36, 44, 47), (48, 96, 40)]


def test_push_never_moves_a_note_before_the_piece_start_and_keeps_ends():
    out = vary(BASS, RhythmVariation("push", beats=(0,)))
    assert out[0] == (0, 8, 40)  # tick 0 stays
    assert (42, 96, 40) in out  # the second bar's downbeat is anticipated, its end kept
    assert (36, 42, 47) in out  # the note sounding at tick 42 ends there


def test_push_moves_a_chord_as_a_whole():
    chords = [(0, 24, 60), (0, 24, 64), (24, 48, 62), (24, 48, 65)]
    out = vary(chords, RhythmVariation("push", beats=(2,)))
    assert out == [(0, 18, 60), (0, 18, 64), (18, 48, 62), (18, 48, 65)]


def test_pump_restrikes_eighths_until_the_next_onset():
    out = vary([(0, 5, 40), (24, 29, 43)], RhythmVariation("pump", stroke=4))
    assert out == [(0, 4, 40), (6, 10, 40), (12, 16, 40), (18, 22, 40), (24, 28, 43), (30, 34, 43)]


def test_pump_leaves_short_gaps_and_off_grid_notes_alone():
    notes = [(0, 5, 40), (6, 10, 41), (13, 30, 42)]  # 6 ticks apart, then off the eighth grid
    assert vary(notes, RhythmVariation("pump", stroke=6)) == notes


def test_variations_are_checked():
    with pytest.raises(ValueError, match="beats"):
        RhythmVariation("push", beats=())
    with pytest.raises(ValueError, match="beats"):
        RhythmVariation("push", beats=(4,))
    with pytest.raises(ValueError, match="stroke"):
        RhythmVariation("pump", stroke=EIGHTH + 1)
    with pytest.raises(ValueError, match="unknown"):
        RhythmVariation("swing")


def test_draws_cover_both_kinds_and_are_valid():
    rng = np.random.default_rng(0)
    drawn = [draw_variation(rng) for _ in range(200)]
    assert {v.kind for v in drawn} == {"push", "pump"}
    assert all(v.beats for v in drawn if v.kind == "push")
    assert 0.2 < np.mean([v.kind == "pump" for v in drawn]) < 0.5
