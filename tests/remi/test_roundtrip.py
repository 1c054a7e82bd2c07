"""Encode/decode round trips: exact on the grid, within half a sub-beat otherwise, idempotent always."""

from __future__ import annotations

import io
from fractions import Fraction

import miditoolkit
import pretty_midi
import pytest
from remi_helpers import make_midi, meter_map, note_set, tempo_map

from remi.vocab import TICKS_PER_BEAT

HALF_SUB_BEAT = Fraction(1, 8)  # in beats


def test_on_grid_piece_round_trips_exactly(tok, on_grid_midi):
    ids = tok.encode(on_grid_midi)
    report = tok.decode_with_report(ids)
    decoded = report.music
    assert report.skipped == 0
    assert decoded.ticks_per_beat == TICKS_PER_BEAT
    assert note_set(decoded) == note_set(on_grid_midi)
    assert tempo_map(decoded) == tempo_map(on_grid_midi)
    assert meter_map(decoded) == meter_map(on_grid_midi)
    assert tok.encode(decoded) == ids
    stats = tok.last_encode_stats
    assert (stats.pitch_dropped, stats.velocity_clamped, stats.duration_clipped, stats.meter_changes_moved) == (
        0,
        0,
        0,
        0,
    )


def test_on_grid_piece_tokens(tok, on_grid_midi):
    strings = tok.tokens_to_strings(tok.encode(on_grid_midi))
    assert strings[:4] == ["Bar_None", "TimeSig_4/4", "Beat_0", "Tempo_98"]
    assert strings[-1] == "EOS_None"
    bars = [i for i, s in enumerate(strings) if s == "Bar_None"]
    # 4/4, 3/4, 6/8, 6/8 (empty), 5/4 as 12 + 8 sub-beats, 2/2
    assert len(bars) == 7
    assert strings[bars[3] + 1] == "Bar_None"  # the empty 6/8 bar
    assert [strings[i + 1] for i in bars if strings[i + 1].startswith("TimeSig")] == [
        "TimeSig_4/4",
        "TimeSig_3/4",
        "TimeSig_6/8",
        "TimeSig_5/4",
        "TimeSig_2/2",
    ]
    first_bar = strings[: bars[1]]
    assert first_bar.count("Beat_0") == 1 and "Beat_15" in first_bar  # same onset shares its Beat
    at_zero = first_bar[first_bar.index("Beat_0") + 1 : first_bar.index("Beat_6")]
    pitches = [int(s.split("_")[-1]) for s in at_zero if s.startswith("Note_Pitch")]
    assert pitches == [48, 60, 64, 67]
    assert "Note_Duration_1920" in first_bar


def test_plain_4_4_tokenizer_round_trips_exactly(tok_4_4):
    notes = [(0, 4, 60, 80), (0, 16, 36, 50), (17, 3, 62, 44), (40, 2, 64, 86), (63, 1, 65, 40)]
    midi = make_midi(notes, tpq=96, tempi=[(0, 122), (32, 89)], meters=[(0, 3, 4)])
    ids = tok_4_4.encode(midi)
    strings = tok_4_4.tokens_to_strings(ids)
    assert not any(s.startswith("TimeSig") for s in strings)
    assert strings.count("Bar_None") == 4  # 64 sub-beats of 4/4 whatever the file says
    decoded = tok_4_4.decode(ids)
    assert note_set(decoded) == note_set(midi)
    assert tempo_map(decoded) == tempo_map(midi)
    assert meter_map(decoded) == [(0, 4, 4)]


@pytest.mark.parametrize("time_signatures", [True, False])
def test_real_files_onsets_within_half_sub_beat(midi_files, tok, tok_4_4, time_signatures):
    tokenizer = tok if time_signatures else tok_4_4
    for meter, path in midi_files.items():
        original = miditoolkit.MidiFile(str(path))
        ids = tokenizer.encode(path)
        shift = Fraction(tokenizer.last_encode_stats.start, 4)  # the song starts at its first downbeat
        report = tokenizer.decode_with_report(ids)
        assert report.skipped == 0
        decoded = report.music
        want = sorted(
            (n.pitch, Fraction(n.start, original.ticks_per_beat) - shift)
            for i in original.instruments
            for n in i.notes
        )
        got = sorted((n.pitch, Fraction(n.start, decoded.ticks_per_beat)) for n in decoded.instruments[0].notes)
        assert len(got) == len(want), meter
        assert [p for p, _ in got] == [p for p, _ in want]
        assert max(abs(a[1] - b[1]) for a, b in zip(got, want)) <= HALF_SUB_BEAT
        assert tokenizer.encode(decoded) == ids, meter
        if time_signatures:
            numerator, denominator = map(int, meter.split("/"))
            assert meter_map(decoded) == [(0, numerator, denominator)]


def test_real_file_round_trip_through_bytes(midi_files, tok):
    """Decoded MIDI written to disk and read back encodes to the same ids (tempo survives rounding)."""
    for path in midi_files.values():
        ids = tok.encode(path)
        buffer = io.BytesIO()
        tok.decode(ids).dump(file=buffer)
        assert tok.encode(buffer.getvalue()) == ids


def test_off_grid_onsets_round_to_nearest_sub_beat(tok):
    tpq = 480  # a sub-beat is 120 ticks
    midi = make_midi([(0, 4, 60, 64)], tpq=tpq)
    midi.instruments[0].notes += [
        miditoolkit.Note(velocity=64, pitch=62, start=59, end=300),  # 0.49 sub-beat -> 0
        miditoolkit.Note(velocity=64, pitch=64, start=60, end=300),  # 0.5 -> 1 (half up)
        miditoolkit.Note(velocity=64, pitch=65, start=1000, end=1010),  # 8.33 -> 8, duration 0.08 -> 1
    ]
    decoded = tok.decode(tok.encode(midi))
    got = {n.pitch: (n.start, n.end - n.start) for n in decoded.instruments[0].notes}
    assert got[62] == (0, 240) and got[64] == (120, 240) and got[65] == (960, 120)


def test_input_forms_agree(tok, chorale_midi):
    """Path, bytes, miditoolkit and pretty_midi inputs give the same tokens."""
    ids = tok.encode(chorale_midi)
    assert tok.encode(chorale_midi.read_bytes()) == ids
    assert tok.encode(str(chorale_midi)) == ids
    assert tok.encode(miditoolkit.MidiFile(str(chorale_midi))) == ids
    assert tok.encode(pretty_midi.PrettyMIDI(str(chorale_midi))) == ids


def test_rescaling_is_independent_of_ticks_per_beat(tok, on_grid_midi):
    notes = [(n[0] * 4, n[1] * 4, n[2], n[3]) for n in note_set(on_grid_midi)]
    tempi = [(t * 4, bpm) for t, bpm in tempo_map(on_grid_midi)]
    meters = [(t * 4, n, d) for t, n, d in meter_map(on_grid_midi)]
    ids = tok.encode(on_grid_midi)
    for tpq in (96, 384, 480, 960, 10080):
        assert tok.encode(make_midi(notes, tpq=tpq, tempi=tempi, meters=meters)) == ids
