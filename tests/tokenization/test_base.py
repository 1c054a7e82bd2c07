import json
from fractions import Fraction

import miditoolkit
import numpy as np
import pytest

from tokenization import BaseTokenizer, ConstraintState, PieceNote, TokenizationError, Vocab, load_midi


class AnyPitchState(ConstraintState):
    """The grammar of PitchTokenizer: any pitch token, any time."""

    def __init__(self, size):
        self.size, self.count = size, 0

    def allowed(self):
        return np.arange(self.size) >= 2

    def accepts(self, token_id):
        return 2 <= token_id < self.size

    def advance(self, token_id):
        if not self.accepts(token_id):
            raise ValueError(f"token id {token_id} is not a pitch")
        self.count += 1

    def next_bar_time(self):
        return Fraction(self.count)


class PitchTokenizer(BaseTokenizer):
    """A minimal format: one token per note, by pitch, in onset order (one note per beat, one beat per bar)."""

    @property
    def start_id(self):
        return self.vocab["Pitch_60"]

    def bar_starts(self, ids):
        return list(range(len(ids)))

    def transpose(self, ids, semitones):
        return self.strings_to_ids(f"Pitch_{int(s[6:]) + semitones}" for s in self.tokens_to_strings(ids))

    def _constraint_state(self, hold_bars):
        return AnyPitchState(self.vocab_size)

    def _build_vocab_tokens(self):
        return [f"Pitch_{p}" for p in range(128)]

    def _encode_midi(self, midi):
        notes = sorted((n for inst in midi.instruments for n in inst.notes), key=lambda n: (n.start, n.pitch))
        return [f"Pitch_{n.pitch}" for n in notes]

    def _decode_tokens(self, tokens):
        midi = miditoolkit.MidiFile()
        inst = miditoolkit.Instrument(program=0)
        skipped = 0
        for i, tok in enumerate(tokens):
            if not tok.startswith("Pitch_"):
                skipped += 1
                continue
            inst.notes.append(miditoolkit.Note(velocity=64, pitch=int(tok[6:]), start=i * 480, end=(i + 1) * 480))
        midi.instruments.append(inst)
        return midi, skipped


def test_vocab_rejects_duplicates_and_unknown():
    with pytest.raises(ValueError, match="duplicate"):
        Vocab(["A_1", "A_1"])
    vocab = Vocab(["A_1", "B_2"])
    with pytest.raises(KeyError):
        vocab["C_3"]
    with pytest.raises(IndexError):
        vocab.token(2)
    assert vocab.by_type("B") == [1]


def test_encode_decode_and_specials(chorale_midi):
    tok = PitchTokenizer()
    assert tok.vocab.tokens[:2] == ["PAD_None", "EOS_None"]
    assert (tok.pad_id, tok.eos_id, tok.vocab_size) == (0, 1, 130)
    ids = tok.encode(chorale_midi)
    midi = miditoolkit.MidiFile(str(chorale_midi))
    assert len(ids) == sum(len(i.notes) for i in midi.instruments)
    assert tok.encode(chorale_midi.read_bytes()) == ids
    assert tok.encode(midi) == ids
    report = tok.decode_with_report(ids + [tok.eos_id, 10_000, -1])
    assert report.skipped == 3
    assert [n.pitch for n in report.music.instruments[0].notes] == [int(s[6:]) for s in tok.tokens_to_strings(ids)]


def test_json_round_trip(tmp_path):
    tok = PitchTokenizer()
    tok.save_vocab(tmp_path / "vocab.json")
    again = BaseTokenizer.load(tmp_path / "vocab.json")
    assert isinstance(again, PitchTokenizer) and again.vocab.tokens == tok.vocab.tokens
    data = json.loads((tmp_path / "vocab.json").read_text())
    data["vocab"] = data["vocab"][:-1]
    with pytest.raises(ValueError, match="does not match"):
        BaseTokenizer.from_dict(data)
    with pytest.raises(ValueError, match="unknown tokenizer"):
        BaseTokenizer.from_dict({"tokenizer": "Nope"})


@pytest.mark.parametrize(
    "content, reason",
    [(b"", "empty file"), (b"hello world", "not a MIDI file"), (None, "truncated")],
)
def test_bad_files_raise_one_error_type(tmp_path, chorale_midi, content, reason):
    path = tmp_path / "bad.mid"
    path.write_bytes(chorale_midi.read_bytes()[:40] if content is None else content)
    with pytest.raises(TokenizationError, match=reason) as info:
        PitchTokenizer().encode(path)
    assert str(path) in str(info.value)
    assert isinstance(info.value, ValueError)


def test_missing_and_noteless_files(tmp_path):
    with pytest.raises(TokenizationError, match="no such file"):
        load_midi(tmp_path / "missing.mid")
    empty = miditoolkit.MidiFile()
    empty.instruments.append(miditoolkit.Instrument(program=0))
    empty.dump(str(tmp_path / "silent.mid"))
    with pytest.raises(TokenizationError, match="no notes"):
        PitchTokenizer().encode(tmp_path / "silent.mid")


def test_folder_run_reports_bad_files_and_continues(midi_folder):
    report = PitchTokenizer().encode_folder(midi_folder, progress=False)
    assert len(report.encoded) == 4
    assert {p.name for p in report.failed} == {"empty.mid", "not_midi.mid"}


def test_a_format_that_does_not_hold_notes_refuses_a_hold_limit():
    tok = PitchTokenizer()
    assert isinstance(tok.constraint_state(), AnyPitchState)
    assert isinstance(tok.constraint_state(hold_bars=0), AnyPitchState)  # 0: no limit
    with pytest.raises(ValueError, match="a hold limit applies to groove models; this one uses PitchTokenizer"):
        tok.constraint_state(hold_bars=2)


def test_write_midi_and_notes_of_any_format(tmp_path):
    tok = PitchTokenizer()
    ids = tok.strings_to_ids(["Pitch_60", "Pitch_64", "Pitch_67"])
    tok.write_midi(ids, tmp_path / "piece.mid")
    again = miditoolkit.MidiFile(str(tmp_path / "piece.mid"))
    assert [n.pitch for n in again.instruments[0].notes] == [60, 64, 67]
    assert tok.notes(ids) == [PieceNote("program 0", float(i), float(i + 1), p, 64) for i, p in enumerate((60, 64, 67))]


def test_format_features_name_the_format_that_lacks_them():
    tok = PitchTokenizer()
    with pytest.raises(ValueError, match="chords need a REMI model with chord tokens; this one uses PitchTokenizer"):
        tok.chord_id((0, "M"))
    with pytest.raises(ValueError, match="fill in the middle needs a REMI model; this one uses PitchTokenizer"):
        tok.arrange([2, 3, 4], 0, 1)
    assert tok.infill_markers() is None
