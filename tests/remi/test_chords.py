"""Our vectorised chord rule agrees with chorder's Dechorder, window by window and song by song."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from chorder import Dechorder
from miditoolkit import Note
from remi_helpers import make_midi

from remi import REMITokenizer
from remi.chords import beat_chords, window_chords
from remi.vocab import chord_token
from tokenization.chords import chord_name


def _reference(chord) -> tuple | None:
    return None if chord.quality is None else (chord.root_pc, chord.quality, chord.bass_pc)


def test_windows_match_dechorder_get_chord_quality():
    rng = np.random.default_rng(0)
    checked = found = 0
    for _ in range(60):
        n = int(rng.integers(1, 30))
        start = rng.integers(0, 48, n)
        end = start + rng.integers(0, 17, n)
        pitch = rng.integers(22, 108, n)
        for width in (4, 8):
            count = -(-int(end.max()) // width)
            if count == 0:
                continue
            chords, scores = window_chords(start, end, pitch, width, count)
            for i in range(count):
                lo, hi = i * width, (i + 1) * width
                notes = [Note(64, int(p), int(s), int(e)) for s, e, p in zip(start, end, pitch) if s < hi and e >= lo]
                chord, score = Dechorder.get_chord_quality(notes, lo, hi)
                assert chords[i] == _reference(chord) and scores[i] == score
                checked += 1
                found += chords[i] is not None
    assert checked > 500 and found > 100


def test_triads_and_sevenths_are_recognised():
    c_major = [(0, 4, 48, 60), (0, 4, 52, 60), (0, 4, 55, 60)]
    a_minor7 = [(4, 4, 45, 60), (4, 4, 48, 60), (4, 4, 52, 60), (4, 4, 55, 60)]
    g7 = [(8, 4, 43, 60), (8, 4, 47, 60), (8, 4, 50, 60), (8, 4, 53, 60)]
    midi = make_midi(c_major + a_minor7 + g7, tpq=4)
    notes = midi.instruments[0].notes
    start, end, pitch = (np.array([getattr(n, a) for n in notes]) for a in ("start", "end", "pitch"))
    assert beat_chords(start, end, pitch, 4) == ["Chord_C_M", "Chord_A_m7", "Chord_G_7"]


def test_songs_match_dechorder_dechord(midi_files, tok):
    """On the quantised notes of real files, our per-beat labels equal chorder's dechord."""
    for path in midi_files.values():
        decoded = tok.decode(tok.encode(path))
        notes = decoded.instruments[0].notes
        start, end, pitch = (np.array([getattr(n, a) for n in notes]) for a in ("start", "end", "pitch"))
        ours = beat_chords(start // 120, end // 120, pitch, 4)
        reference = copy.deepcopy(decoded)
        reference.max_tick = int(end.max())
        chords = Dechorder.dechord(reference)
        assert ours == [
            chord_token(c.root_pc, c.quality) if c.is_complete() else chord_token(None, None) for c in chords
        ]


def test_chord_tokens_where_the_chord_changes(tok):
    c_major = [(b, 4, p, 60) for b in (0, 4) for p in (48, 52, 55)]
    f_major = [(8, 8, p, 60) for p in (53, 57, 60)]
    strings = tok.tokens_to_strings(tok.encode(make_midi(c_major + f_major + [(12, 1, 72, 60)])))
    chords = [(strings[i - 1], s) for i, s in enumerate(strings) if s.startswith("Chord")]
    assert chords == [("Tempo_119", "Chord_C_M"), ("Beat_8", "Chord_F_M")]  # Beat_0, Tempo, Chord


def test_chord_ids_through_the_tokenizer_contract():
    tok = REMITokenizer()
    assert tok.chord_id((9, "m")) == tok.vocab["Chord_A_m"] == tok.vocab[chord_token(9, "m")]
    assert tok.chord_id(None) == tok.vocab["Chord_N_N"]
    assert [chord_name(c) for c in ((0, "M"), (10, "/o7"), None)] == ["C_M", "A#_/o7", "N_N"]
    with pytest.raises(ValueError, match="unknown chord quality 'maj9'"):
        tok.chord_id((0, "maj9"))
