"""groove.rhythm: pushes and pumped eighths of one role's notes."""

from __future__ import annotations

import numpy as np
import pytest

from groove.rhythm import EIGHTH, SIXTEENTH, RhythmVariation, draw_variation, vary

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
    with pytest.raises(ValueError, match="step"):
        RhythmVariation("pump", step=4)
    with pytest.raises(ValueError, match="offset"):
        RhythmVariation("approach", offset=0)
    with pytest.raises(ValueError, match="unknown"):
        RhythmVariation("swing")


def test_pump_on_sixteenths():
    out = vary([(0, 12, 40), (12, 14, 43)], RhythmVariation("pump", stroke=2, step=SIXTEENTH))
    # the last note is re-struck until the end of its beat as well
    assert out == [(t, t + 2, 40) for t in (0, 3, 6, 9)] + [(t, t + 2, 43) for t in (12, 15, 18, 21)]


def test_approach_fills_the_gap_before_a_new_pitch_with_a_passing_note():
    out = vary(BASS[:3] + [(36, 44, 45)], RhythmVariation("approach", step=EIGHTH, offset=-1))
    # 40 -> 43: 42 on the last eighth; 43 -> 45: 44; 45 -> 45 (same pitch): no passing note
    assert out == [(0, 6, 40), (6, 12, 42), (12, 18, 43), (18, 24, 44), (24, 32, 45), (36, 44, 45)]


def test_approach_walks_from_a_chord_lowest_note_and_from_above():
    chords = [(0, 24, 48), (0, 24, 52), (24, 48, 50), (24, 48, 53)]
    out = vary(chords, RhythmVariation("approach", step=SIXTEENTH, offset=2))
    assert out == [(0, 21, 48), (0, 21, 52), (21, 24, 52), (24, 48, 50), (24, 48, 53)]


def test_plain_draws_push_and_pump_eighths():
    rng = np.random.default_rng(0)
    drawn = [draw_variation(rng) for _ in range(200)]
    assert {v.kind for v in drawn} == {"push", "pump"}
    assert all(v.beats for v in drawn if v.kind == "push")
    assert {v.step for v in drawn} == {EIGHTH} and all(3 <= v.stroke <= EIGHTH for v in drawn)
    assert 0.2 < np.mean([v.kind == "pump" for v in drawn]) < 0.5


def test_walk_draws_cover_the_kinds_and_are_valid():
    rng = np.random.default_rng(0)
    drawn = [draw_variation(rng, walk=True) for _ in range(200)]
    assert {v.kind for v in drawn} == {"push", "pump"}
    assert {v.step for v in drawn if v.kind == "pump"} == {EIGHTH, SIXTEENTH}
    assert all(1 <= v.stroke <= v.step for v in drawn)
    bass = [draw_variation(rng, walk=True, approach=True) for _ in range(300)]
    assert 0.2 < np.mean([v.kind == "approach" for v in bass]) < 0.45
    assert {v.offset for v in bass if v.kind == "approach"} == {-2, -1, 1, 2}
