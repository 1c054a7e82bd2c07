"""Documented encoding rules on hand-made pieces: clamping, clipping, dropping, meters, tempi, bad input."""

from __future__ import annotations

import io
import logging

import miditoolkit
import pytest
from remi_helpers import make_midi, meter_map, note_set, tempo_map

from remi import REMITokenizer
from remi.vocab import METERS, meter_length, meter_parts, nearest_meter
from tokenization import BaseTokenizer, TokenizationError


def test_vocabulary_sizes_and_shared_ids(tok, tok_4_4):
    assert len(tok_4_4) == 2 + 1 + 16 + 65 + 133 + 86 + 24 + 17 == 344
    assert len(tok) == 344 + len(METERS)
    assert tok.vocab.tokens[:344] == tok_4_4.vocab.tokens  # TimeSig tokens come last
    assert (tok.pad_id, tok.eos_id) == (tok.vocab["PAD_None"], tok.vocab["EOS_None"]) == (0, 1)
    for name in ("Chord_N_N", "Chord_B_/o7", "Tempo_32", "Tempo_224", "Note_Velocity_86", "Note_Duration_0"):
        assert name in tok_4_4.vocab


def test_vocabulary_json_round_trip(tmp_path, tok, tok_4_4):
    for tokenizer in (tok, tok_4_4):
        path = tmp_path / "vocab.json"
        tokenizer.save_vocab(path)
        loaded = BaseTokenizer.load(path)
        assert isinstance(loaded, REMITokenizer)
        assert loaded.time_signatures == tokenizer.time_signatures
        assert loaded.vocab.tokens == tokenizer.vocab.tokens


def test_meter_table():
    assert meter_parts((4, 4)) == (16,) and meter_parts((3, 4)) == (12,) and meter_parts((6, 8)) == (12,)
    assert meter_parts((5, 4)) == (12, 8) and meter_parts((9, 8)) == (10, 8) and meter_parts((3, 2)) == (16, 8)
    assert meter_parts((12, 8)) == (12, 12) and meter_parts((7, 4)) == (16, 12)
    for meter in METERS:
        assert sum(meter_parts(meter)) == meter_length(meter) and max(meter_parts(meter)) <= 16
    assert nearest_meter(7, 8) == (7, 8)
    assert nearest_meter(9, 4) == (8, 4)  # 36 sub-beats -> 32, same denominator preferred
    assert nearest_meter(7, 16) == (2, 4)  # 7 sub-beats: 6 and 8 tie, the smaller denominator wins


def test_out_of_range_pitches_are_dropped_and_counted(tok):
    midi = make_midi([(0, 4, 21, 60), (0, 4, 22, 60), (4, 4, 107, 60), (4, 4, 108, 60), (8, 4, 127, 60)])
    ids, stats = tok.encode_with_report(midi)
    assert (stats.notes_in, stats.pitch_dropped, stats.notes_encoded) == (5, 3, 2)
    assert [n[2] for n in note_set(tok.decode(ids))] == [22, 107]
    with pytest.raises(TokenizationError, match="pitch"):
        tok.encode(make_midi([(0, 4, 10, 60), (0, 4, 120, 60)]))


def test_velocities_clamp_to_nearest_level(tok):
    midi = make_midi([(0, 1, 60, 1), (1, 1, 60, 39), (2, 1, 60, 41), (3, 1, 60, 86), (4, 1, 60, 87), (5, 1, 60, 127)])
    ids, stats = tok.encode_with_report(midi)
    assert stats.velocity_clamped == 4
    assert [n[3] for n in note_set(tok.decode(ids))] == [40, 40, 42, 86, 86, 86]


def test_long_notes_are_clipped_to_sixteen_sub_beats(tok):
    midi = make_midi([(0, 16, 60, 60), (2, 17, 62, 60), (4, 100, 64, 60)])
    ids, stats = tok.encode_with_report(midi)
    assert stats.duration_clipped == 2
    durations = {n.pitch: n.end - n.start for n in tok.decode(ids).instruments[0].notes}
    assert durations == {60: 1920, 62: 1920, 64: 1920}


def test_tempo_changes(tok):
    """Rounded to the 3-bpm grid, clamped to 32..224, written only where they change, dropped after the
    last onset; a file without tempo gets MIDI's 120 bpm (written 119)."""
    notes = [(0, 4, 60, 60), (16, 4, 62, 60), (32, 4, 64, 60), (48, 4, 65, 60)]
    midi = make_midi(notes, tempi=[(0, 20), (8, 300), (16, 300.4), (24, 100.9), (33, 99.6), (60, 150)])
    ids, stats = tok.encode_with_report(midi)
    assert (stats.tempo_clamped, stats.tempo_dropped) == (3, 1)
    strings = tok.tokens_to_strings(ids)
    assert [s for s in strings if s.startswith("Tempo")] == ["Tempo_32", "Tempo_224", "Tempo_101"]
    assert strings[strings.index("Tempo_101") - 1] == "Beat_8"  # second bar, sub-beat 24
    assert tempo_map(tok.decode(ids)) == [(0, 32), (2, 224), (6, 101)]
    plain = tok.tokens_to_strings(tok.encode(make_midi(notes)))
    assert plain[:4] == ["Bar_None", "TimeSig_4/4", "Beat_0", "Tempo_119"]


def test_tempo_change_without_a_note_gets_its_own_beat(tok):
    midi = make_midi([(0, 4, 60, 60), (16, 4, 62, 60)], tempi=[(0, 98), (6, 134)])
    strings = tok.tokens_to_strings(tok.encode(midi))
    i = strings.index("Tempo_134")
    assert strings[i - 1] == "Beat_6" and strings[i + 1] == "Bar_None"  # no note, no chord change at 6


def test_meter_change_mid_piece_and_off_bar_line(tok, caplog):
    notes = [(i * 4, 4, 60 + i % 12, 60) for i in range(20)]
    midi = make_midi(notes, meters=[(0, 4, 4), (16, 3, 4), (30, 2, 4)])  # 30 is not a 3/4 bar line
    ids, stats = tok.encode_with_report(midi)
    assert stats.meter_changes_moved == 1
    assert meter_map(tok.decode(ids)) == [(0, 4, 4), (4, 3, 4), (10, 2, 4)]  # 2/4 from the next bar line (sub-beat 40)
    caplog.set_level(logging.WARNING)
    ids, stats = tok.encode_with_report(make_midi(notes, meters=[(0, 7, 16)]))
    assert stats.meters_remapped == 1 and "7/16" in caplog.text
    assert tok.tokens_to_strings(ids)[1] == "TimeSig_2/4"


def test_long_meter_bars_are_split(tok):
    midi = make_midi([(i * 2, 2, 60, 60) for i in range(24)], meters=[(0, 12, 8)])  # two 12/8 bars
    ids = tok.encode(midi)
    strings = tok.tokens_to_strings(ids)
    assert strings.count("Bar_None") == 4 and strings.count("TimeSig_12/8") == 1
    beats = [int(s.split("_")[1]) for s in strings if s.startswith("Beat")]
    assert max(beats) == 10
    decoded = tok.decode(ids)
    assert note_set(decoded) == note_set(midi) and meter_map(decoded) == [(0, 12, 8)]


def test_drums_are_ignored(tok):
    midi = make_midi([(0, 4, 60, 60)], drums=[(0, 1, 36, 100), (4, 1, 38, 100)])
    ids, stats = tok.encode_with_report(midi)
    assert stats.drum_notes_ignored == 2 and stats.notes_encoded == 1
    with pytest.raises(TokenizationError, match="non-drum"):
        tok.encode(make_midi([], drums=[(0, 1, 36, 100)]))


def _midi_bytes(midi: miditoolkit.MidiFile) -> bytes:
    buffer = io.BytesIO()
    midi.dump(file=buffer)
    return buffer.getvalue()


def test_bad_input_raises_tokenization_error(tok, chorale_midi, tmp_path):
    data = chorale_midi.read_bytes()
    noteless = make_midi([], meters=[(0, 4, 4)])
    cases = {
        "empty": b"",
        "truncated": data[:60],
        "not midi": b"this is not a MIDI file",
        "no notes": _midi_bytes(noteless),
    }
    for name, payload in cases.items():
        with pytest.raises(TokenizationError):
            tok.encode(payload)
        path = tmp_path / f"{name.replace(' ', '_')}.mid"
        path.write_bytes(payload)
        with pytest.raises(TokenizationError, match=str(path.name)):
            tok.encode(path)
    with pytest.raises(TokenizationError):
        tok.encode(tmp_path / "missing.mid")


def test_folder_run_reports_bad_files_and_goes_on(tok, midi_folder):
    report = tok.encode_folder(midi_folder, progress=False)
    assert len(report.encoded) == 4
    assert sorted(p.name for p in report.failed) == ["empty.mid", "not_midi.mid"]
    assert all(ids[-1] == tok.eos_id for ids in report.encoded.values())
