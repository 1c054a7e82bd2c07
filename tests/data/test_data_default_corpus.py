"""The default music21 corpus, built tiny (a handful of chorales) into a temporary folder."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys

import numpy as np
import pytest

import data.music21_corpus as m21
import data.score_midi as score_midi
from data import SPLITS, assign_splits, build_default_corpus, load_corpus
from data.corpus import Piece, split_pieces
from remi import REMITokenizer

N_CHORALES = 6
TINY = dict(max_chorales=N_CHORALES, max_long_pieces=0, max_folk_files=0, progress=False)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("default_corpus")
    return build_default_corpus(root, REMITokenizer(), workers=1, **TINY)


def _refuse(*args, **kwargs):
    raise AssertionError("must not be called when the cache is valid")


def test_summary_and_index(tiny):
    summary = json.loads((tiny.root / "summary.json").read_text())
    assert summary == tiny.summary
    assert summary["skipped"] == []
    assert summary["files_converted"] == N_CHORALES
    counts = {split: summary["splits"][split]["pieces"] for split in SPLITS}
    assert counts == {"train": N_CHORALES - 2, "valid": 1, "test": 1}
    bar_id = tiny.tokenizer.vocab["Bar_None"]
    for split in SPLITS:
        pieces, infos = tiny.pieces(split), tiny.info(split)
        assert summary["splits"][split]["tokens"] == sum(len(p) for p in pieces) == tiny.num_tokens(split)
        assert len(np.load(tiny.root / f"{split}.npy")) == sum(len(p) for p in pieces)
        for piece, info in zip(pieces, infos):
            assert piece.dtype == np.int32 and len(piece) == info.length > 100
            assert piece[0] == bar_id and piece[-1] == tiny.tokenizer.eos_id
            assert info.composer == "J. S. Bach" and info.group == "chorale"
            assert info.meters and all("/" in m for m in info.meters)
            assert info.source.startswith("bach/") and info.name == info.source.rsplit(".", 1)[0]
            assert (tiny.root / "midi" / f"{info.name}.mid").is_file()
    names = [n for split in SPLITS for n in tiny.names(split)]
    assert len(set(names)) == N_CHORALES


def test_loaded_corpus_matches(tiny):
    again = load_corpus(tiny.root)
    assert type(again.tokenizer) is REMITokenizer and again.tokenizer.vocab.tokens == tiny.tokenizer.vocab.tokens
    for split in SPLITS:
        assert again.names(split) == tiny.names(split)
        assert all(np.array_equal(a, b) for a, b in zip(again.pieces(split), tiny.pieces(split)))


def test_load_in_a_fresh_process(tiny):
    """load_corpus registers the tokenizer formats itself (nothing imported beforehand)."""
    code = "import sys; from data import load_corpus; print(load_corpus(sys.argv[1]).tokenizer.vocab_size)"
    out = subprocess.run([sys.executable, "-c", code, str(tiny.root)], capture_output=True, text=True, check=True)
    assert int(out.stdout.split()[-1]) == tiny.tokenizer.vocab_size


def test_full_cache_reused(tiny, monkeypatch):
    monkeypatch.setattr(m21, "process_source", _refuse)
    again = build_default_corpus(tiny.root, REMITokenizer(), workers=1, **TINY)
    assert again.summary == tiny.summary


def test_midi_cache_reused_when_settings_change(tiny, tmp_path, monkeypatch):
    """New settings re-tokenise from root/midi without parsing a score; long pieces are cut at a bar."""
    root = tmp_path / "copy"
    shutil.copytree(tiny.root / "midi", root / "midi")
    monkeypatch.setattr(m21, "convert_corpus_file", _refuse)
    cut = build_default_corpus(root, REMITokenizer(), workers=1, max_piece_tokens=400, **TINY)
    assert cut.summary["files_converted"] == 0 and cut.summary["files_from_cache"] == N_CHORALES
    tok = cut.tokenizer
    for split in SPLITS:
        assert cut.names(split) == tiny.names(split)
        for short, full in zip(cut.pieces(split), tiny.pieces(split)):
            assert len(short) <= 400 and short[-1] == tok.eos_id
            assert np.array_equal(short[:-1], full[: len(short) - 1])
            assert full[len(short) - 1] == tok.vocab["Bar_None"]  # the cut was at a bar line


def test_pool_build_is_identical(tiny, tmp_path):
    """Two workers, another folder (MIDI cache copied): same split and same tokens."""
    root = tmp_path / "pool"
    shutil.copytree(tiny.root / "midi", root / "midi")
    other = build_default_corpus(root, REMITokenizer(), workers=2, **TINY)
    for split in SPLITS:
        assert other.names(split) == tiny.names(split)
        assert all(np.array_equal(a, b) for a, b in zip(other.pieces(split), tiny.pieces(split)))


def test_assign_splits_deterministic():
    names = [f"piece{i}" for i in range(200)]
    shuffled = names[:]
    random.Random(1).shuffle(shuffled)
    first = assign_splits(names)
    assert assign_splits(shuffled) == first
    counts = {s: sum(v == s for v in first.values()) for s in SPLITS}
    assert counts == {"train": 180, "valid": 10, "test": 10}
    assert assign_splits(["a", "b"]) == {"a": "train", "b": "train"}
    assert sorted(assign_splits(["a", "b", "c"]).values()) == ["test", "train", "valid"]


def test_split_by_group_gives_long_pieces_to_held_out_splits():
    pieces = [Piece(f"short{i}", np.zeros(10, np.int32), group="chorale") for i in range(100)]
    pieces += [Piece(f"long{i}", np.zeros(5000, np.int32), group="long") for i in range(6)]
    by_split = split_pieces(pieces, 0.05, min_heldout={"long": 2})
    for split in ("valid", "test"):
        assert sum(p.group == "long" for p in by_split[split]) == 2
        assert sum(p.group == "chorale" for p in by_split[split]) == 5


def test_failed_source_is_skipped_with_reason(tmp_path):
    source = m21.ScoreSource("bach/no_such_chorale.mxl", "J. S. Bach", "chorale")
    result = m21.process_source(m21.Task(source, str(tmp_path), None, None, None), REMITokenizer())
    assert result.converted and result.pieces == [] and "music21 could not convert it" in result.error


def test_score_to_midi_pickup_ties_meters():
    from music21 import meter, note, stream, tempo, tie

    part = stream.Part()
    pickup = stream.Measure(number=0)
    pickup.append([meter.TimeSignature("3/4"), tempo.MetronomeMark(number=90), note.Note("C4", quarterLength=1)])
    pickup.paddingLeft = 2.0
    bar1 = stream.Measure(number=1)
    tied = note.Note("E4", quarterLength=2)
    tied.tie = tie.Tie("start")
    bar1.append([note.Note("D4", quarterLength=1), tied])
    bar2 = stream.Measure(number=2)
    held = note.Note("E4", quarterLength=1)
    held.tie = tie.Tie("stop")
    bar2.append([meter.TimeSignature("2/4"), held, note.Rest(quarterLength=1)])
    part.append([pickup, bar1, bar2])
    score = stream.Score([part])

    midi = score_midi.score_to_midi(score)
    notes = [(n.pitch, n.start, n.end) for n in midi.instruments[0].notes]
    q = score_midi.TICKS_PER_QUARTER
    assert notes == [(60, 2 * q, 3 * q), (62, 3 * q, 4 * q), (64, 4 * q, 7 * q)]  # pickup on beat 3, tie merged
    assert [(t.numerator, t.denominator, t.time) for t in midi.time_signature_changes] == [(3, 4, 0), (2, 4, 6 * q)]
    assert [(t.tempo, t.time) for t in midi.tempo_changes] == [(90.0, 0)]
    assert all(n.velocity == score_midi.DEFAULT_VELOCITY for n in midi.instruments[0].notes)
