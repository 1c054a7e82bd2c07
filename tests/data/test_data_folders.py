"""Corpora from MIDI folders (REMI) and from the Groove2Groove layout / offline trio corpus (Groove)."""

from __future__ import annotations

import numpy as np
import pytest

import data.folders as folders
from data import SPLITS, build_groove_corpus, build_midi_folder_corpus, load_corpus
from remi import REMITokenizer


def _refuse(*args, **kwargs):
    raise AssertionError("must not be called when the cache is valid")


def test_midi_folder_with_bad_files(midi_folder, tmp_path, monkeypatch):
    corpus = build_midi_folder_corpus(midi_folder, tmp_path / "c", REMITokenizer(), progress=False)
    skipped = {s["name"]: s["reason"] for s in corpus.summary["skipped"]}
    assert set(skipped) == {"empty", "not_midi"}
    assert "empty" in skipped["empty"] and "not a MIDI file" in skipped["not_midi"]
    names = sorted(n for split in SPLITS for n in corpus.names(split))
    assert names == sorted(p.stem for p in midi_folder.glob("*.mid") if p.stem not in skipped)
    assert sum(corpus.summary["splits"][s]["pieces"] for s in SPLITS) == 4
    meters = {i.name: i.meters for split in SPLITS for i in corpus.info(split)}
    assert meters["jig_6_8"] == ["6/8"] and meters["chorale_3_4"] == ["3/4"]
    tok = REMITokenizer()
    for split in SPLITS:
        for info, piece in zip(corpus.info(split), corpus.pieces(split)):
            assert np.array_equal(piece, tok.encode(midi_folder / f"{info.name}.mid"))

    monkeypatch.setattr(folders, "tokenize_files", _refuse)
    again = build_midi_folder_corpus(midi_folder, tmp_path / "c", REMITokenizer(), progress=False)
    assert again.summary == corpus.summary


def test_midi_folder_rebuilds_when_files_change(midi_files, tmp_path):
    folder = tmp_path / "midi"
    folder.mkdir()
    first = list(midi_files.values())[0]
    (folder / first.name).write_bytes(first.read_bytes())
    corpus = build_midi_folder_corpus(folder, tmp_path / "c", progress=False)
    assert [n for s in SPLITS for n in corpus.names(s)] == [first.stem]
    second = list(midi_files.values())[1]
    (folder / second.name).write_bytes(second.read_bytes())
    corpus = build_midi_folder_corpus(folder, tmp_path / "c", progress=False)
    assert sorted(n for s in SPLITS for n in corpus.names(s)) == sorted([first.stem, second.stem])


def test_midi_folder_without_usable_files(tmp_path):
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "x.mid").write_text("nope")
    with pytest.raises(ValueError, match="none of the 1 MIDI files"):
        build_midi_folder_corpus(folder, tmp_path / "c", progress=False)


@pytest.fixture(scope="module")
def trio_corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("groove")
    return build_groove_corpus(None, root, trio_pieces=3, progress=False)


def test_groove_trio_corpus(trio_corpus):
    from groove import GrooveTokenizer

    assert isinstance(trio_corpus.tokenizer, GrooveTokenizer)
    assert [trio_corpus.summary["splits"][s]["pieces"] for s in SPLITS] == [1, 1, 1]
    tok = GrooveTokenizer()
    for split, folder in (("train", "train"), ("valid", "val"), ("test", "test")):
        (info,) = trio_corpus.info(split)
        assert info.name.startswith(f"{folder}/")
        (piece,) = trio_corpus.pieces(split)
        assert np.array_equal(piece, tok.encode(trio_corpus.root / "midi" / f"{info.name}.mid"))
        assert info.meters == ["4/4"]


def test_groove_layout_folder_and_cache(trio_corpus, tmp_path, monkeypatch):
    """A Groove2Groove-style folder keeps its splits; a second build reuses the cache."""
    corpus = build_groove_corpus(trio_corpus.root / "midi", tmp_path / "g", progress=False)
    for split in SPLITS:
        assert corpus.names(split) == trio_corpus.names(split)
    monkeypatch.setattr(folders, "tokenize_files", _refuse)
    again = build_groove_corpus(trio_corpus.root / "midi", tmp_path / "g", progress=False)
    assert load_corpus(tmp_path / "g").summary == again.summary == corpus.summary


def test_odd_folder_entries_are_reported_by_name(midi_files, tmp_path, caplog):
    """Twin names, a name that is not UTF-8, dangling and looping links, a FIFO: each skipped and
    named in the summary, the rest built; a stray note far beyond the end cuts the piece, with a warning."""
    import os
    import shutil

    import miditoolkit

    folder = tmp_path / "odd"
    folder.mkdir()
    chorale = midi_files["4/4"]
    shutil.copy(chorale, folder / "a.mid")
    shutil.copy(chorale, folder / "a.midi")
    shutil.copy(midi_files["3/4"], os.fsdecode(bytes(folder) + b"/caf\xe9.mid"))
    (folder / "dangling.mid").symlink_to(folder / "absent.mid")
    (folder / "loop.mid").symlink_to(folder / "loop.mid")
    os.mkfifo(folder / "pipe.mid")
    far = miditoolkit.MidiFile(str(midi_files["6/8"]))
    far.instruments[0].notes.append(miditoolkit.Note(80, 60, 10**8, 10**8 + 100))
    far.dump(str(folder / "far.mid"))
    corpus = build_midi_folder_corpus(folder, tmp_path / "corpus", REMITokenizer(), progress=False)
    reasons = {s["name"]: s["reason"] for s in corpus.summary["skipped"]}
    assert "a.midi has the same name" in reasons["a"] or "a.mid has the same name" in reasons["a"]
    assert "not valid UTF-8" in reasons["caf\\udce9"]
    assert "leads nowhere" in reasons["dangling.mid"] and "leads nowhere" in reasons["loop.mid"]
    assert "FIFO" in reasons["pipe.mid"]
    names = [n for split in SPLITS for n in corpus.names(split)]
    assert sorted(names) == ["a", "far"]
    far_ids = [p for split in SPLITS for p, n in zip(corpus.pieces(split), corpus.names(split)) if n == "far"][0]
    assert len(far_ids) < 2000 and "empty bars or more" in caplog.text
