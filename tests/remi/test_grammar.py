"""The REMI grammar, robust decoding, transposition and bar starts."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from remi_helpers import make_midi, note_set

from remi.grammar import Kind


def test_real_files_are_accepted_token_by_token(midi_files, tok, tok_4_4):
    for tokenizer in (tok, tok_4_4):
        for path in midi_files.values():
            state = tokenizer.constraint_state()
            for token_id in tokenizer.encode(path):
                assert state.allowed()[token_id], tokenizer.vocab.token(token_id)
                state.advance(token_id)
            assert np.flatnonzero(state.allowed()).tolist() == [tokenizer.pad_id]


def test_allowed_mask_matches_accepts(tok, on_grid_midi):
    state = tok.constraint_state()
    for token_id in tok.encode(on_grid_midi):
        mask = state.allowed()
        assert mask.shape == (tok.vocab_size,) and mask.dtype == bool
        assert mask.tolist() == [state.accepts(i) for i in range(tok.vocab_size)]
        state.advance(token_id)


def _feed(tok, strings):
    state = tok.constraint_state()
    for s in strings:
        state.advance(tok.vocab[s])
    return state


def _allowed_strings(tok, state, prefix):
    return [tok.vocab.tokens[i] for i in np.flatnonzero(state.allowed()) if tok.vocab.tokens[i].startswith(prefix)]


def test_grammar_rules(tok):
    assert _allowed_strings(tok, tok.constraint_state(), "") == ["Bar_None"]
    # 3/4: twelve positions, and they never go backwards
    state = _feed(tok, ["Bar_None", "TimeSig_3/4", "Beat_5"])
    assert _allowed_strings(tok, state, "Beat") == [f"Beat_{i}" for i in range(6, 12)]  # empty positions pass
    state = _feed(tok, ["Bar_None", "TimeSig_3/4"])
    assert _allowed_strings(tok, state, "Beat") == [f"Beat_{i}" for i in range(12)]
    state = _feed(tok, ["Bar_None", "TimeSig_3/4", "Beat_5", "Note_Pitch_60"])
    assert _allowed_strings(tok, state, "") == [f"Note_Velocity_{v}" for v in range(40, 87, 2)]
    state.advance(tok.vocab["Note_Velocity_60"])
    assert all(s.startswith("Note_Duration") for s in _allowed_strings(tok, state, ""))
    state.advance(tok.vocab["Note_Duration_240"])
    assert _allowed_strings(tok, state, "Beat") == [f"Beat_{i}" for i in range(6, 12)]
    assert not _allowed_strings(tok, state, "Tempo") and not _allowed_strings(tok, state, "Chord")
    assert not _allowed_strings(tok, state, "TimeSig")
    # 5/4 is written as bar parts of 12 and 8 sub-beats; TimeSig only at the start of a 5/4 bar
    state = _feed(tok, ["Bar_None", "TimeSig_5/4", "Bar_None"])
    assert len(_allowed_strings(tok, state, "Beat")) == 8 and not _allowed_strings(tok, state, "TimeSig")
    state.advance(tok.vocab["Bar_None"])
    assert len(_allowed_strings(tok, state, "Beat")) == 12 and _allowed_strings(tok, state, "TimeSig")
    # Tempo and Chord right after a Beat, once each
    state = _feed(tok, ["Bar_None", "Beat_0", "Chord_C_M"])
    assert _allowed_strings(tok, state, "Tempo") and not _allowed_strings(tok, state, "Chord")
    state.advance(tok.vocab["Tempo_119"])
    assert not _allowed_strings(tok, state, "Tempo")
    # EOS ends: only PAD after it
    state.advance(tok.eos_id)
    assert _allowed_strings(tok, state, "") == ["PAD_None"]
    with pytest.raises(ValueError):
        state.advance(tok.vocab["Bar_None"])


def _sample(tok, rng, length):
    """Random tokens under the grammar mask; after ``length`` tokens, end as soon as EOS is allowed."""
    state, ids = tok.constraint_state(), []
    while not ids or ids[-1] != tok.eos_id:
        allowed = state.allowed()
        if len(ids) >= length and allowed[tok.eos_id]:
            token_id = tok.eos_id
        else:
            token_id = int(rng.choice(np.flatnonzero(allowed)))
        state.advance(token_id)
        ids.append(token_id)
    return ids


@pytest.mark.parametrize("time_signatures", [True, False])
def test_sampling_under_the_mask_always_decodes_cleanly(tok, tok_4_4, time_signatures):
    tokenizer = tok if time_signatures else tok_4_4
    rng = np.random.default_rng(0)
    for _ in range(40):
        ids = _sample(tokenizer, rng, int(rng.integers(1, 400)))
        report = tokenizer.decode_with_report(ids + [tokenizer.pad_id] * 3)
        assert report.skipped == 0
        notes = report.music.instruments[0].notes
        kinds = tokenizer.table.kinds[np.asarray(ids)]
        assert len(notes) == int((kinds == Kind.DURATION).sum())
        if notes:  # what decodes re-encodes (notes keep their places relative to the song's start, which
            # moves to the first note's bar; Duration_0 becomes one sub-beat)
            again = tokenizer.decode(tokenizer.encode(report.music))
            shift = Fraction(tokenizer.last_encode_stats.start, 4)
            at_least_one = [(o - shift, max(d, Fraction(1, 4)), p, v) for o, d, p, v in note_set(report.music)]
            assert note_set(again) == sorted(at_least_one)


def test_random_ids_never_crash_decoding(tok):
    rng = np.random.default_rng(1)
    total_skipped = 0
    for _ in range(200):
        ids = rng.integers(-5, tok.vocab_size + 5, size=int(rng.integers(0, 300))).tolist()
        report = tok.decode_with_report(ids)
        total_skipped += report.skipped
        assert report.skipped <= len(ids)
        assert all(22 <= n.pitch <= 107 and n.end >= n.start for n in report.music.instruments[0].notes)
    assert total_skipped > 0


def test_decoder_skips_and_counts_invalid_events(tok):
    strings = [
        "Beat_3",
        "Bar_None",
        "Beat_4",
        "Note_Pitch_60",
        "Bar_None",  # Beat before Bar; unfinished note
        "Beat_2",
        "Note_Pitch_62",
        "Note_Velocity_50",
        "Note_Duration_120",
        "Beat_1",  # backwards
        "Tempo_119",  # after a note
        "Note_Pitch_64",
        "Note_Velocity_50",
        "Note_Duration_240",
        "EOS_None",
        "Note_Pitch_70",
    ]
    report = tok.decode_with_report(tok.strings_to_ids(strings))
    assert report.skipped == 5
    assert [(n.pitch, n.start) for n in report.music.instruments[0].notes] == [(62, 1920 + 240), (64, 1920 + 240)]


def test_transpose_shifts_pitches_and_chord_roots(tok, chorale_midi):
    ids = tok.encode(chorale_midi)
    for k in (-6, -1, 5, 6):
        shifted = tok.transpose(ids, k)
        assert tok.transpose(shifted, -k) == ids
        before, after = tok.tokens_to_strings(ids), tok.tokens_to_strings(shifted)
        for a, b in zip(before, after):
            if a.startswith("Note_Pitch"):
                assert int(b.split("_")[-1]) == int(a.split("_")[-1]) + k
            elif a.startswith("Chord") and a != "Chord_N_N":
                roots = ("C", "C#", "D", "D#", "E", "F", "F#", "G", "G#", "A", "A#", "B")
                ra, qa = a.split("_")[1:]
                rb, qb = b.split("_")[1:]
                assert qa == qb and roots.index(rb) == (roots.index(ra) + k) % 12
            else:
                assert a == b
        assert [(n[0], n[2] - k) for n in note_set(tok.decode(shifted))] == [
            (n[0], n[2]) for n in note_set(tok.decode(ids))
        ]


def test_transpose_refuses_to_leave_the_pitch_range(tok):
    ids = tok.encode(make_midi([(0, 4, 22, 60), (4, 4, 100, 60)]))
    assert tok.transpose(ids, 7)  # 107 is still in range
    with pytest.raises(ValueError, match="outside"):
        tok.transpose(ids, 8)
    with pytest.raises(ValueError, match="outside"):
        tok.transpose(ids, -1)


def test_bar_starts(tok, on_grid_midi):
    ids = tok.encode(on_grid_midi)
    starts = tok.bar_starts(ids)
    assert len(starts) == 7 and starts[0] == 0
    assert all(tok.vocab.token(ids[i]) == "Bar_None" for i in starts)
    assert tok.vocab["Bar_None"] not in np.delete(np.asarray(ids), starts)


def test_zero_duration_is_never_allowed_and_is_skipped_by_decode(tok):
    ids = tok.strings_to_ids(["Bar_None", "Beat_0", "Note_Pitch_60", "Note_Velocity_64"])
    state = tok.constraint_state()
    for token_id in ids:
        state.advance(token_id)
    zero, one = tok.vocab["Note_Duration_0"], tok.vocab["Note_Duration_120"]
    assert not state.allowed()[zero] and not state.accepts(zero)
    assert state.allowed()[one]
    report = tok.decode_with_report(ids + [zero, tok.eos_id])
    assert report.skipped >= 1
    assert all(n.end > n.start for inst in report.music.instruments for n in inst.notes)
