"""Meter policy (remi.meter) and where a song starts (the first note's bar), on synthetic MIDI."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from remi_helpers import make_midi, meter_map, note_set, tempo_map

from remi import REMITokenizer
from remi.meter import decide_meter, infer_meter
from tokenization import BaseTokenizer


def pop_notes(beats_per_bar: int, bars: int, pickup_beats: int = 0):
    """A pop accompaniment in sub-beats: a long bass note on each downbeat, a chord on the other beats
    (longer on 4/4's third beat), an eighth-note melody; ``pickup_beats`` melody beats before bar 1."""
    notes = [(b * 4 + e * 2, 2, 72 + (b + e) % 5, 70) for b in range(pickup_beats) for e in range(2)]
    start = pickup_beats * 4
    bar = beats_per_bar * 4
    for i in range(bars):
        at = start + i * bar
        notes.append((at, bar, 36 + i % 7, 80))  # bass: the whole bar
        for beat in range(1, beats_per_bar):
            length = 8 if beats_per_bar == 4 and beat == 2 else 3
            notes += [(at + beat * 4, length, 55 + k, 60) for k in (0, 4, 7)]
        notes += [(at + e * 2, 2, 72 + (i + e) % 5, 70) for e in range(beats_per_bar * 2)]
    return notes


def downbeats(strings):
    """Bars of the token sequence and the Beat token right after each Bar (or TimeSig)."""
    return [s for s, prev in zip(strings[1:], strings) if prev.startswith(("Bar", "TimeSig")) and s.startswith("Beat")]


@pytest.mark.parametrize(
    "declared, beats, pickup, meter, phase, words",
    [
        ((1, 4), 4, 0, (4, 4), 0, "one-beat bar"),  # POP909's usual declaration
        ((1, 4), 3, 0, (3, 4), 0, "one-beat bar"),
        ((1, 4), 4, 1, (4, 4), 4, "one-beat bar"),  # a one-beat pickup: first downbeat at sub-beat 4
        ((2, 4), 4, 0, (4, 4), 0, "contradicts"),
        ((4, 4), 3, 0, (3, 4), 0, "contradicts"),
        ((4, 4), 4, 2, (4, 4), 8, "contradicts"),  # right meter, bar lines off by the pickup
        ((4, 4), 4, 0, (4, 4), 0, "agrees"),
        ((3, 4), 3, 0, (3, 4), 0, "agrees"),
    ],
)
def test_meter_decisions(tok, declared, beats, pickup, meter, phase, words):
    midi = make_midi(pop_notes(beats, 24, pickup), meters=[(0, *declared)])
    ids, stats = tok.encode_with_report(midi)
    assert (stats.meter, words in stats.meter_reason) == (f"{meter[0]}/{meter[1]}", True), stats.meter_reason
    assert stats.meter_source == ("declared" if words == "agrees" else "inferred")
    strings = tok.tokens_to_strings(ids)
    assert strings.count("Bar_None") == 24 + (pickup > 0)  # one bar per downbeat, plus the pickup's
    assert strings[1] == f"TimeSig_{meter[0]}/{meter[1]}" and strings.count(strings[1]) == 1
    first_note = strings.index(next(s for s in strings if s.startswith("Note_Pitch")))
    first_beat = [s for s in strings[:first_note] if s.startswith("Beat")][-1]
    assert first_beat == f"Beat_{(meter[0] * 4 - pickup * 4) % (meter[0] * 4)}"  # the pickup ends its bar
    assert set(downbeats(strings)) == {"Beat_0"}  # every bar starts on a note (its bass note; the song's tempo)
    assert stats.start == (phase - meter[0] * 4 if phase else 0)
    decoded = tok.decode(ids)
    shift = Fraction(stats.start, 4)
    assert note_set(decoded) == [(o - shift, d, p, v) for o, d, p, v in note_set(midi)]
    assert meter_map(decoded) == [(0, *meter)]


def test_declarations_that_are_kept(tok):
    # several meters (none single-beat) are followed as written, even against the onsets
    notes = pop_notes(4, 24)
    ids, stats = tok.encode_with_report(make_midi(notes, meters=[(0, 3, 4), (12, 2, 4)]))
    assert (stats.meter, stats.meter_source) == ("declared map", "declared")
    assert meter_map(tok.decode(ids))[:2] == [(0, 3, 4), (3, 2, 4)]
    # a short piece keeps its declaration; so does a meter whose beat is not a quarter note
    for meters, reason in (([(0, 2, 4)], "too short"), ([(0, 6, 8)], "not a quarter note")):
        count = 8 if reason == "too short" else 24
        _, stats = tok.encode_with_report(make_midi(pop_notes(4, count), meters=meters))
        assert stats.meter == f"{meters[0][1]}/{meters[0][2]}" and reason in stats.meter_reason
    # no time signature: MIDI's 4/4, checked like a declaration
    _, stats = tok.encode_with_report(make_midi(pop_notes(3, 24)))
    assert (stats.meter, stats.meter_source) == ("3/4", "inferred") and "no time signature" in stats.meter_reason
    _, stats = tok.encode_with_report(make_midi(pop_notes(4, 24)))
    assert (stats.meter, stats.meter_source) == ("4/4", "default")


def test_plain_4_4_vocabulary_ignores_the_policy(tok_4_4):
    midi = make_midi(pop_notes(3, 24), meters=[(0, 1, 4)])
    ids, stats = tok_4_4.encode_with_report(midi)
    assert (stats.meter, stats.meter_source) == ("", "")
    assert tok_4_4.tokens_to_strings(ids).count("Bar_None") == 18  # 72 beats of 4/4


def test_infer_meter_on_arrays():
    notes = np.array(pop_notes(3, 16, pickup_beats=2))
    meter, phase, score = infer_meter(notes[:, 0], notes[:, 1])
    assert (meter, phase) == ((3, 4), 8) and score > 1
    decision = decide_meter([(0, (1, 8))], notes[:, 0], notes[:, 1])
    assert decision.source == "inferred" and decision.label == "3/4" and "1/8" in decision.reason


def test_song_starts_at_the_bar_of_its_first_note(tok, tok_4_4):
    """A silent first bar holding only tempo changes is left out; the tempo in force is kept."""
    notes = [(20, 4, 60, 60), (24, 8, 64, 60), (36, 4, 67, 60)]  # first note in the second bar, sub-beat 4
    midi = make_midi(notes, tempi=[(0, 90), (6, 100), (18, 110)], meters=[(0, 4, 4)])
    for tokenizer in (tok, tok_4_4):
        ids, stats = tokenizer.encode_with_report(midi)
        strings = [s for s in tokenizer.tokens_to_strings(ids) if not s.startswith("TimeSig")]
        assert strings[:5] == ["Bar_None", "Beat_0", "Tempo_101", "Chord_N_N", "Beat_2"]
        assert strings.count("Bar_None") == 2 and (stats.leading_bars_dropped, stats.start) == (1, 16)
        decoded = tokenizer.decode(ids)
        assert note_set(decoded) == [(o - 4, d, p, v) for o, d, p, v in note_set(midi)]  # one 4/4 bar earlier
        assert tempo_map(decoded) == [(0, 101), (Fraction(1, 2), 110)]
    keep = REMITokenizer(time_signatures=False, keep_leading_silence=True)
    ids, stats = keep.encode_with_report(midi)
    strings = keep.tokens_to_strings(ids)
    assert strings[:4] == ["Bar_None", "Beat_0", "Tempo_89", "Chord_N_N"] and strings.count("Bar_None") == 3
    assert (stats.leading_bars_dropped, stats.start) == (0, 0)
    assert note_set(keep.decode(ids)) == note_set(midi)


def test_keep_leading_silence_is_saved_with_the_vocabulary(tmp_path):
    tokenizer = REMITokenizer(keep_leading_silence=True)
    tokenizer.save_vocab(tmp_path / "vocab.json")
    loaded = BaseTokenizer.load(tmp_path / "vocab.json")
    assert loaded.config() == {"time_signatures": True, "keep_leading_silence": True}
    assert BaseTokenizer.from_dict({**tokenizer.to_dict(), "config": {"time_signatures": True}}).config() == {
        "time_signatures": True,
        "keep_leading_silence": False,  # vocabularies saved before the option: off, the default
    }
