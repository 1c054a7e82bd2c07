import miditoolkit
import numpy as np
import pytest
from groove_helpers import make_midi, make_music, notes_of

from groove import GrooveTokenizer
from groove.roles import TICKS_PER_BAR, piece_from_midi
from tokenization import BaseTokenizer, TokenizationError

# A hand-made on-grid piece: long gaps across bars, off and on at the same tick, a drum roll.
PIECE = {
    "bass": [(0, 12, 36), (12, 36, 38), (36, 37, 36), (110, 200, 40), (205, 206, 41)],
    "drums": [(0, 2, 36), (3, 5, 42), (6, 8, 42), (9, 11, 42), (12, 14, 38), (150, 152, 49)],
    "accompaniment": [(0, 24, 60), (0, 24, 64), (24, 48, 60), (24, 30, 67), (31, 95, 72)],
}


@pytest.fixture(scope="module")
def tok():
    return GrooveTokenizer()


def test_vocabulary(tok):
    assert tok.vocab_size == 794 == len(set(tok.vocab.tokens))
    assert tok.vocab.tokens[:2] == ["Start_None", "End_None"]
    assert tok.pad_id == tok.eos_id == tok.vocab["End_None"] and tok.start_id == 0
    assert len(tok.vocab.by_type("NoteOn")) == len(tok.vocab.by_type("NoteOff")) == 384
    shifts = [t.split("_")[1] for t in tok.tokens_to_strings(tok.vocab.by_type("TimeShift"))]
    assert shifts == [f"0:{o:02d}" for o in range(1, 12)] + [f"1:{o:02d}" for o in range(12)] + ["2:00"]
    assert "NoteOn_bass:60" in tok.vocab and "NoteOff_accompaniment:127" in tok.vocab
    assert isinstance(BaseTokenizer.from_dict(tok.to_dict()), GrooveTokenizer)


def test_hand_made_round_trip(tok):
    ids = tok.encode(make_music(PIECE))
    strings = tok.tokens_to_strings(ids)
    assert strings[0] == "Start_None" and strings[-1] == "End_None"
    # off before on at the same tick: bass 36 ends at 12 and 38 starts at 12
    assert strings.index("NoteOff_bass:36") < strings.index("NoteOn_bass:38")
    report = tok.decode_with_report(ids)
    assert report.skipped == 0
    assert report.music.resolution == 12
    assert notes_of(report.music) == {name: sorted(notes) for name, notes in PIECE.items()}
    assert [(t.name, t.program, t.is_drum) for t in report.music.tracks] == [
        ("bass", 33, False), ("drums", 0, True), ("accompaniment", 0, False)]
    assert tok.encode(report.music) == ids


def test_long_gaps_use_several_shifts_and_stop_on_bar_lines(tok):
    ids = tok.encode(make_music({"bass": [(0, 1, 40), (203, 204, 41)]}))
    strings = tok.tokens_to_strings(ids)
    # tick 1 -> 24 -> 48 (bar) -> 72 -> 96 (bar) -> ... -> 192 (bar) -> 203
    assert strings == (["Start_None", "NoteOn_bass:40", "TimeShift_0:01", "NoteOff_bass:40"]
                       + ["TimeShift_2:00"] * 8 + ["TimeShift_0:11", "NoteOn_bass:41", "TimeShift_1:00",
                                                  "NoteOff_bass:41", "End_None"])
    assert notes_of(tok.decode(ids)) == {"bass": [(0, 1, 40), (203, 204, 41)]}
    assert tok.bar_starts(ids) == [0, 6, 8, 10, 12]


def test_trio_files_round_trip_exactly(tok, trio_files):
    for path in trio_files:
        ids = tok.encode(path)
        midi = miditoolkit.MidiFile(str(path))
        piece = piece_from_midi(midi, str(path))
        scale = midi.ticks_per_beat // 12
        expected = {inst.name: sorted((n.start // scale, n.end // scale, n.pitch) for n in inst.notes)
                    for inst in midi.instruments}
        assert all(n.start % scale == 0 and n.end % scale == 0 for i in midi.instruments for n in i.notes)
        report = tok.decode_with_report(ids)
        assert report.skipped == 0
        got = notes_of(report.music)
        acc_name = next(name for name in expected if name not in ("BB Bass", "BB Drums"))
        assert got == {"bass": expected["BB Bass"], "drums": expected["BB Drums"], "accompaniment": expected[acc_name]}
        assert got["accompaniment"] == sorted(piece.candidates[0])
        assert tok.encode(report.music) == ids


def test_all_input_forms_agree(tok, trio_files):
    path = trio_files[0]
    ids = tok.encode(path)
    assert tok.encode(str(path)) == ids
    assert tok.encode(path.read_bytes()) == ids
    assert tok.encode(miditoolkit.MidiFile(str(path))) == ids
    assert tok.encode(tok.decode(ids)) == ids


def test_real_chorale_roles(tok, chorale_midi):
    """music21's export: four piano-program parts named Soprano/Alto/Tenor/Bass, no drums."""
    music = tok.decode(tok.encode(chorale_midi))
    midi = miditoolkit.MidiFile(str(chorale_midi))
    counts = {inst.name: len(inst.notes) for inst in midi.instruments}
    assert len(music.tracks[0].notes) == counts["Bass"]
    assert not music.tracks[1].notes
    assert len(music.tracks[2].notes) == max(counts[n] for n in ("Soprano", "Alto", "Tenor"))


def test_role_rules():
    notes = [(0, 480, 50)]
    many = [(i * 480, i * 480 + 240, 60) for i in range(5)]
    piece = piece_from_midi(make_midi([
        ("BB Guitar", 25, False, notes),
        ("BB Bass", 0, False, notes),          # bass by name
        ("Kit", 0, False, many),               # drums by name
        ("BB Piano", 0, False, many),          # most notes -> default accompaniment
        ("Lead", 35, False, notes),            # bass program, but BB Bass comes first on a tie
        ("Channel 10", 0, True, notes),        # is_drum, fewer notes than "Kit"
    ]), "x")
    assert piece.bass == [(0, 12, 50)]
    assert piece.drums == [(i * 12, i * 12 + 6, 60) for i in range(5)]
    assert [c[0] for c in piece.candidates] == [(0, 6, 60), (0, 12, 50), (0, 12, 50)]  # Piano, Guitar, Lead
    assert piece.candidates[0] == [(i * 12, i * 12 + 6, 60) for i in range(5)]


def test_quantisation_and_overlaps():
    # off-grid times round to the 1/12-beat grid; a zero-length note lasts one tick; same-pitch overlap truncated
    piece = piece_from_midi(make_midi([("BB Bass", 33, False, [(19, 21, 40), (100, 300, 42), (200, 400, 42)])]), "x")
    assert piece.bass == [(0, 1, 40), (3, 5, 42), (5, 10, 42)]


def test_unterminated_notes_are_closed(tok):
    ids = tok.strings_to_ids(["Start_None", "NoteOn_bass:40", "TimeShift_1:00", "NoteOn_drums:36", "End_None"])
    report = tok.decode_with_report(ids)
    assert report.skipped == 0
    assert notes_of(report.music) == {"bass": [(0, 12, 40)], "drums": [(12, 13, 36)]}


def test_invalid_events_are_skipped_and_counted(tok):
    strings = ["NoteOff_bass:40", "TimeShift_0:05", "Start_None", "TimeShift_0:03", "NoteOn_bass:40",
               "NoteOn_bass:40", "NoteOff_bass:40", "TimeShift_1:00", "NoteOff_bass:40", "End_None",
               "NoteOn_drums:36", "End_None"]
    report = tok.decode_with_report(tok.strings_to_ids(strings) + [5000, -3])
    # skipped: off not sounding, late Start, backward shift, on while sounding, zero-length off,
    # event after End, and two unknown ids; End after End is padding
    assert report.skipped == 8
    assert notes_of(report.music) == {"bass": [(5, 12, 40)]}


def test_random_ids_never_crash(tok):
    rng = np.random.default_rng(0)
    for _ in range(20):
        ids = rng.integers(0, tok.vocab_size, size=300)
        report = tok.decode_with_report(ids)
        assert 0 <= report.skipped <= 300
        for track in report.music.tracks:
            assert all(n.duration > 0 and 0 <= n.pitch <= 127 for n in track.notes)


def test_transpose(tok):
    ids = tok.encode(make_music(PIECE))
    up = tok.transpose(ids, 3)
    music, orig = notes_of(tok.decode(up)), notes_of(tok.decode(ids))
    assert music["drums"] == orig["drums"]
    for name in ("bass", "accompaniment"):
        assert music[name] == [(s, e, p + 3) for s, e, p in orig[name]]
    assert tok.transpose(up, -3) == ids
    with pytest.raises(ValueError, match="outside"):
        tok.transpose(ids, 127 - 72 + 1)
    drums_only = tok.encode(make_music({"drums": [(0, 2, 127)]}))
    assert tok.transpose(drums_only, 5) == drums_only


def test_bar_starts_cut_decodes_bar_aligned(tok, trio_files):
    ids = tok.encode(trio_files[0])
    full = tok.decode(ids)
    starts = tok.bar_starts(ids)
    assert starts[0] == 0 and len(starts) >= 8 and starts == sorted(set(starts))
    for bar, index in list(enumerate(starts))[1:6]:
        crop = tok.decode_with_report(ids[index:])
        cut = bar * TICKS_PER_BAR
        expected = {name: [(s - cut, e - cut, p) for s, e, p in notes if s >= cut]
                    for name, notes in notes_of(full).items()}
        crossing = sum(1 for notes in notes_of(full).values() for s, e, _ in notes if s < cut < e)
        assert notes_of(crop.music) == {k: v for k, v in expected.items() if v}
        assert crop.skipped == crossing  # note-offs of notes that began before the cut


def test_bad_input(tok, tmp_path, midi_folder):
    with pytest.raises(TokenizationError, match="empty file"):
        tok.encode(midi_folder / "empty.mid")
    silent = make_midi([("BB Bass", 33, False, [])])
    silent.dump(str(tmp_path / "silent.mid"))
    with pytest.raises(TokenizationError, match="no notes") as info:
        tok.encode(tmp_path / "silent.mid")
    assert str(tmp_path / "silent.mid") in str(info.value)
    with pytest.raises(TokenizationError, match="unsupported"):
        tok.encode(12)
    report = tok.encode_folder(midi_folder, progress=False)
    assert len(report.encoded) == 4 and {p.name for p in report.failed} == {"empty.mid", "not_midi.mid"}


def test_write_midi_is_muspys_writer_and_notes_are_in_beats(tok, tmp_path):
    ids = tok.encode(make_music(PIECE))
    tok.write_midi(ids, tmp_path / "a.mid")
    tok.decode(ids).write_midi(str(tmp_path / "b.mid"))
    assert (tmp_path / "a.mid").read_bytes() == (tmp_path / "b.mid").read_bytes()
    notes = tok.notes(ids)
    assert {n.track for n in notes} == {"bass", "drums", "accompaniment"}
    bass = sorted((n.start, n.end, n.pitch) for n in notes if n.track == "bass")
    assert bass == sorted((start / 12, end / 12, pitch) for start, end, pitch in PIECE["bass"])
    assert {n.velocity for n in notes} == {80}


def test_groove_has_no_chords_and_no_fill_in_the_middle(tok):
    with pytest.raises(ValueError, match="chords need a REMI model with chord tokens; this one uses GrooveTokenizer"):
        tok.chord_id(None)
    with pytest.raises(ValueError, match="fill in the middle needs a REMI model; this one uses GrooveTokenizer"):
        tok.arrange(tok.encode(make_music(PIECE)), 0, 1)
    assert tok.infill_markers() is None
