import numpy as np
import pytest
from groove_helpers import make_music

from groove import Augmentation, GrooveTokenizer


@pytest.fixture(scope="module")
def tok():
    return GrooveTokenizer()


def _accept(tok, ids):
    """Feed ids one by one; every one must be allowed, and allowed() must agree with accepts()."""
    state = tok.constraint_state()
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


def test_sampling_under_the_mask_decodes_cleanly(tok):
    rng = np.random.default_rng(1)
    for _ in range(5):
        state, ids = tok.constraint_state(), []
        for _ in range(400):
            allowed = np.flatnonzero(state.allowed())
            idx = int(rng.choice(allowed))
            state.advance(idx)
            ids.append(idx)
        report = tok.decode_with_report(ids)
        assert report.skipped == 0
        assert sum(len(t.notes) for t in report.music.tracks) > 0


def test_unmasked_sampling_is_caught(tok):
    """Without the mask, random sequences contain invalid events that decode counts."""
    rng = np.random.default_rng(2)
    ids = rng.integers(2, 794, size=400)
    assert tok.decode_with_report(ids).skipped > 0
    assert tok.decode_with_report(tok.encode(make_music({"bass": [(0, 5, 40)]}))).skipped == 0
