"""Pop1K7 as released: folder layouts, both pickle shapes, words + dictionary, event mapping, the corpus."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

from data import SPLITS, build_pop1k7_corpus
from data.pop1k7 import (
    events_to_ids,
    locate_release,
    read_dictionary,
    read_song,
    read_words,
    strings_to_ids,
)
from cli_helpers import SONG, SONGS, release_token as _token, write_release
from remi import REMITokenizer
from tokenization import TokenizationError

EXPECTED = [
    "Bar_None", "Beat_0", "Chord_N_N", "Tempo_110",
    "Beat_4", "Chord_A_m7", "Note_Pitch_57", "Note_Velocity_60", "Note_Duration_960",
    "Note_Pitch_64", "Note_Velocity_62", "Note_Duration_0",  # velocity 61 -> 62 (ties go up)
    "Bar_None", "Beat_0", "Tempo_122", "Chord_C_M",  # 121 bpm -> the nearest level, 122
    "Note_Pitch_60", "Note_Velocity_40", "Note_Duration_1920",
    "EOS_None",  # the trailing empty bar is dropped
]
REMAPS = {"Note_Velocity_61 -> Note_Velocity_62": 1, "Tempo_121 -> Tempo_122": 1}


def test_release_pickle_is_a_plain_list_with_numpy_values(tmp_path):
    remi = write_release(tmp_path)
    path = remi / "events" / "src_001" / "1.pkl"
    assert b"multiarray" in path.read_bytes()  # numpy.int64 values need numpy's scalar global
    events = read_song(path)
    assert events == [(n, None if v is None else (int(v) if isinstance(v, np.integer) else v)) for n, v in SONG]
    assert all(type(v) is not np.int64 for _, v in events)  # numpy scalars come back as Python numbers
    tok = REMITokenizer(time_signatures=False)
    assert tok.tokens_to_strings(events_to_ids(events, tok, "song")) == EXPECTED
    with_meters = REMITokenizer(time_signatures=True)
    strings = with_meters.tokens_to_strings(events_to_ids(events, with_meters, "song"))
    assert strings == EXPECTED[:1] + ["TimeSig_4/4"] + EXPECTED[1:]


def test_paper_pair_shape_and_event_objects_give_the_same_ids(tmp_path):
    tok = REMITokenizer(time_signatures=False)
    items = [{"name": n, "value": v} for n, v in SONG]
    bars = [i for i, (n, _) in enumerate(SONG) if n == "Bar"]
    (tmp_path / "pair.pkl").write_bytes(pickle.dumps((bars, items)))
    (tmp_path / "list.pkl").write_bytes(pickle.dumps(items))
    pair, plain = read_song(tmp_path / "pair.pkl"), read_song(tmp_path / "list.pkl")
    assert pair == plain
    assert tok.tokens_to_strings(events_to_ids(pair, tok, "pair")) == EXPECTED
    (tmp_path / "bad_bars.pkl").write_bytes(pickle.dumps((["x"], items)))
    with pytest.raises(TokenizationError, match="bar positions"):
        read_song(tmp_path / "bad_bars.pkl")


def test_words_equal_events_mapped_through_the_vocabulary(tmp_path):
    remi = write_release(tmp_path)
    idx2event = read_dictionary(remi / "dictionary.pkl")
    tok = REMITokenizer(time_signatures=False)
    for name in SONGS:
        words = read_words(remi / "words" / f"{name}.npy", idx2event)
        assert words == [_token(n, v) for n, v in SONG]
        from_words = strings_to_ids(words, tok, name)
        assert from_words == events_to_ids(read_song(remi / "events" / f"{name}.pkl"), tok, name)
        assert tok.tokens_to_strings(from_words) == EXPECTED


@pytest.mark.parametrize("where", ["release root", "remi folder", "events folder", "words only"])
def test_corpus_from_every_accepted_folder(tmp_path, where):
    remi = write_release(tmp_path / "Pop1K7")
    if where == "words only":
        for path in (remi / "events").rglob("*.pkl"):
            path.unlink()
    folder = {"release root": tmp_path / "Pop1K7", "events folder": remi / "events"}.get(where, remi)
    corpus = build_pop1k7_corpus(folder, tmp_path / "corpus", progress=False)
    names = sorted(n for split in SPLITS for n in corpus.names(split))
    assert names == sorted(SONGS)
    for split in SPLITS:
        for piece in corpus.pieces(split):
            assert corpus.tokenizer.tokens_to_strings(piece) == EXPECTED
    summary = corpus.summary
    assert summary["skipped"] == []
    assert summary["remapped"]["by_event"] == {k: n * len(SONGS) for k, n in REMAPS.items()}
    assert summary["remapped"]["songs"] == len(SONGS)
    expected_layout = {"events folder": "flat pickles", "release root": "release root"}.get(where, "remi folder")
    assert summary["layout"] == expected_layout
    compared = len(SONGS) if where in ("release root", "remi folder") else 0
    assert summary["words_check"] == {"compared": compared, "disagree": []}


def test_words_that_disagree_with_events_are_reported(tmp_path):
    remi = write_release(tmp_path)
    path = remi / "words" / "src_002" / "2.npy"
    words = np.load(path)
    words[1], words[4] = words[4], words[1]  # Beat_0 and Beat_4 swapped
    np.save(path, words)
    corpus = build_pop1k7_corpus(tmp_path, tmp_path / "corpus", progress=False)
    assert corpus.summary["words_check"] == {"compared": len(SONGS), "disagree": ["src_002/2"]}


def test_layout_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such folder"):
        locate_release(tmp_path / "missing")
    remi = write_release(tmp_path / "a")
    write_release(tmp_path / "b")
    with pytest.raises(ValueError, match="several REMI folders"):
        locate_release(tmp_path)
    (remi / "dictionary.pkl").unlink()
    with pytest.raises(FileNotFoundError, match="need dictionary.pkl"):
        locate_release(remi)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no Pop1K7 event pickles"):
        build_pop1k7_corpus(tmp_path / "empty", tmp_path / "corpus", progress=False)


def test_malicious_dictionary_is_refused(tmp_path):
    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    remi = write_release(tmp_path)
    (remi / "dictionary.pkl").write_bytes(pickle.dumps(({}, {0: Exploit()})))
    with pytest.raises(TokenizationError, match="unsafe pickle"):
        build_pop1k7_corpus(tmp_path, tmp_path / "corpus", progress=False)
    assert not (tmp_path / "pwned").exists()


def test_builder_skips_bad_files(tmp_path):
    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    folder = tmp_path / "pop"
    folder.mkdir()
    items = [{"name": n, "value": v} for n, v in SONG]
    for i in range(4):
        (folder / f"{i:03d}.pkl").write_bytes(pickle.dumps(items))
    (folder / "evil.pkl").write_bytes(pickle.dumps(([0], [Exploit()])))
    (folder / "truncated.pkl").write_bytes(pickle.dumps(items)[:40])
    unknown = [{"name": "Bar", "value": None}, {"name": "Note_Pitch", "value": 120}]
    (folder / "unknown.pkl").write_bytes(pickle.dumps(unknown))
    (folder / "shape.pkl").write_bytes(pickle.dumps({"events": []}))
    corpus = build_pop1k7_corpus(folder, tmp_path / "c", progress=False)
    assert not (tmp_path / "pwned").exists()
    skipped = {s["name"]: s["reason"] for s in corpus.summary["skipped"]}
    assert set(skipped) == {"evil", "truncated", "unknown", "shape"}
    assert "unsafe pickle" in skipped["evil"] and "corrupt pickle" in skipped["truncated"]
    assert "Note_Pitch_120" in skipped["unknown"] and "expected a list of events or a pair" in skipped["shape"]
    assert corpus.summary["settings"]["tokenizer"]["config"]["time_signatures"] is False
    names = sorted(n for split in SPLITS for n in corpus.names(split))
    assert names == ["000", "001", "002", "003"]
    for split in SPLITS:
        for piece in corpus.pieces(split):
            assert corpus.tokenizer.tokens_to_strings(piece) == EXPECTED
    assert [corpus.summary["splits"][s]["pieces"] for s in SPLITS] == [2, 1, 1]


def test_train_builds_pop1k7_from_the_release_root(tmp_path):
    import data
    from training.config import RunConfig
    from data.build import prepare_corpus

    write_release(tmp_path / "Pop1K7")
    settings = {"kind": "pop1k7", "root": str(tmp_path / "c"), "source": str(tmp_path / "Pop1K7")}
    prepare_corpus(RunConfig.from_dict({"data": settings}).data)
    corpus = data.load_corpus(tmp_path / "c")
    assert corpus.summary["builder"] == "pop1k7" and corpus.summary["layout"] == "release root"
    assert sum(len(corpus.names(split)) for split in SPLITS) == len(SONGS)
