import numpy as np
import pytest
from groove_helpers import make_music

from groove import Augmentation, GrooveTokenizer
from groove.constraints import GrooveConstraintState
from groove.roles import TICKS_PER_BAR, TICKS_PER_BEAT


@pytest.fixture(scope="module")
def tok():
    return GrooveTokenizer()


def _accept(tok, ids):
    """Feed ids one by one; every one must be allowed, and allowed() must agree with accepts() (without the
    sampling policy on note lengths)."""
    state = tok.constraint_state()
    assert state.hold_limit is None  # off unless asked for
    for step, idx in enumerate(ids):
        mask = state.allowed()
        assert mask.shape == (794,) and mask.dtype == bool
        assert mask[idx], f"token {tok.vocab.token(idx)} refused at step {step}"
        if step % 50 == 0:
            assert mask.tolist() == [state.accepts(i) for i in range(794)]
        state.advance(idx)
    return state


def test_real_files_accepted_token_by_token(tok, trio_files, chorale_midi):
    for source in trio_files + [chorale_midi]:
        state = _accept(tok, tok.encode(source))
        assert state.ended and not state.sounding
    rng = np.random.default_rng(0)
    for _ in range(3):
        _accept(tok, tok.encode_augmented(trio_files[0], rng, Augmentation(drop_prob=0.5)))


def test_masks(tok):
    ids = tok.vocab.ids
    state = tok.constraint_state()
    mask = state.allowed()
    assert mask[ids["Start_None"]] and mask[ids["NoteOn_bass:40"]] and not mask[ids["NoteOff_bass:40"]]
    state.advance(ids["Start_None"])
    assert not state.allowed()[ids["Start_None"]]
    state.advance(ids["NoteOn_bass:40"])
    mask = state.allowed()
    assert not mask[ids["NoteOn_bass:40"]] and mask[ids["NoteOn_accompaniment:40"]]
    assert not mask[ids["NoteOff_bass:40"]]  # it would be zero-length
    state.advance(ids["TimeShift_0:05"])
    mask = state.allowed()
    assert mask[ids["NoteOff_bass:40"]] and not mask[ids["NoteOff_drums:40"]]
    backward = [f"TimeShift_0:{o:02d}" for o in range(1, 6)]
    assert not any(mask[ids[t]] for t in backward)
    assert all(mask[ids[t]] for t in ["TimeShift_0:06", "TimeShift_1:00", "TimeShift_1:03", "TimeShift_2:00"])
    with pytest.raises(ValueError, match="not valid"):
        state.advance(ids["TimeShift_0:02"])
    state.advance(ids["End_None"])
    mask = state.allowed()
    assert mask.sum() == 1 and mask[ids["End_None"]]


@pytest.mark.parametrize("hold_bars", [None, 2])
def test_sampling_under_the_mask_decodes_cleanly(tok, hold_bars):
    rng = np.random.default_rng(1)
    longest = 0
    for _ in range(5):
        state, ids = tok.constraint_state(hold_bars), []
        assert state.hold_limit == (None if hold_bars is None else hold_bars * TICKS_PER_BAR)
        for _ in range(400):
            allowed = np.flatnonzero(state.allowed())
            idx = int(rng.choice(allowed))
            state.advance(idx)
            ids.append(idx)
        report = tok.decode_with_report(ids)
        assert report.skipped == 0
        assert sum(len(t.notes) for t in report.music.tracks) > 0
        assert report.music.resolution == TICKS_PER_BEAT
        longest = max([longest] + [n.duration for t in report.music.tracks for n in t.notes])
    if hold_bars is None:
        assert longest > 2 * TICKS_PER_BAR  # random sampling leaves notes on
    else:
        assert longest <= hold_bars * TICKS_PER_BAR


def test_hold_bars_is_a_policy_of_each_grammar_not_of_the_tokenizer(tok):
    held, free, none = tok.constraint_state(hold_bars=3), tok.constraint_state(), tok.constraint_state(hold_bars=0)
    assert held.hold_limit == 3 * TICKS_PER_BAR and free.hold_limit is None and none.hold_limit is None
    assert tok.holds_notes and "hold" not in tok.to_dict()["config"]  # nothing saved, nothing shared
    ids = tok.vocab.ids
    for state in (held, free):
        for token in ["Start_None", "NoteOn_bass:40"] + ["TimeShift_2:00"] * 6:
            state.advance(ids[token])
    assert np.flatnonzero(held.allowed()).tolist() == [ids["NoteOff_bass:40"]]  # held 3 bars: closed
    assert free.allowed()[ids["TimeShift_2:00"]]


def test_hold_limit_closes_long_notes_in_sampling_only(tok):
    ids = tok.vocab.ids
    state = GrooveConstraintState(tok.table, hold_limit=8 * TICKS_PER_BEAT)
    for token in ["Start_None", "NoteOn_bass:40", "TimeShift_2:00", "NoteOn_accompaniment:60", "TimeShift_2:00",
                  "TimeShift_2:00", "TimeShift_1:06"]:
        state.advance(ids[token])  # the bass note has sounded 7.5 beats: its deadline is half a beat away
    assert state.time == 90
    mask = state.allowed()
    assert mask[ids["TimeShift_0:11"]] and mask[ids["TimeShift_1:00"]]
    assert not mask[ids["TimeShift_1:01"]] and not mask[ids["TimeShift_2:00"]]
    assert mask[ids["NoteOn_drums:36"]] and mask[ids["NoteOff_accompaniment:60"]] and mask[ids["NoteOff_bass:40"]]
    assert state.accepts(ids["TimeShift_2:00"])  # still valid: decoding and prompts are unaffected
    state.advance(ids["TimeShift_1:00"])  # at the deadline: only the overdue note may follow
    assert np.flatnonzero(state.allowed()).tolist() == [ids["NoteOff_bass:40"]]
    state.advance(ids["NoteOff_bass:40"])
    assert state.allowed()[ids["TimeShift_2:00"]]  # to the accompaniment note's deadline (it began at 24)
    state.advance(ids["TimeShift_2:00"])
    assert np.flatnonzero(state.allowed()).tolist() == [ids["NoteOff_accompaniment:60"]]
    free = GrooveConstraintState(tok.table, hold_limit=None)
    for token in ["Start_None", "NoteOn_bass:40"] + ["TimeShift_2:00"] * 5:
        free.advance(ids[token])
    assert free.allowed()[ids["TimeShift_2:00"]]


def test_a_note_closed_at_the_hold_limit_rests_a_bar_before_it_sounds_again(tok):
    ids = tok.vocab.ids
    state = GrooveConstraintState(tok.table, hold_limit=8 * TICKS_PER_BEAT)
    for token in ["Start_None", "NoteOn_bass:40", "NoteOn_bass:43", "TimeShift_1:00", "NoteOff_bass:43",
                  "TimeShift_2:00", "TimeShift_2:00", "TimeShift_2:00", "TimeShift_1:00", "NoteOff_bass:40"]:
        state.advance(ids[token])  # 40 closed at the limit (8 beats), 43 by the model after a beat
    mask = state.allowed()
    assert not mask[ids["NoteOn_bass:40"]] and mask[ids["NoteOn_bass:43"]]  # only the drone rests
    assert mask[ids["NoteOn_accompaniment:40"]] and mask[ids["NoteOn_bass:41"]]  # on its own track and pitch
    assert state.accepts(ids["NoteOn_bass:40"])  # still valid: decoding and prompts are unaffected
    state.advance(ids["TimeShift_2:00"])
    state.advance(ids["TimeShift_1:11"])  # a tick short of the bar's rest
    assert not state.allowed()[ids["NoteOn_bass:40"]]
    state.advance(ids["TimeShift_1:00"])  # the next tick, a bar after the close
    assert state.time == 96 + TICKS_PER_BAR and state.allowed()[ids["NoteOn_bass:40"]] and state.resting == {}
    free = GrooveConstraintState(tok.table, hold_limit=None)
    for token in ["Start_None", "NoteOn_bass:40"] + ["TimeShift_2:00"] * 5 + ["NoteOff_bass:40"]:
        free.advance(ids[token])
    assert free.allowed()[ids["NoteOn_bass:40"]]  # without a limit, nothing rests
