import json
import shutil

import miditoolkit
import numpy as np
import pytest

from groove import GrooveTokenizer
from groove.dataset import encode_split, list_split, list_splits, style_of
from groove.roles import TICKS_PER_BAR
from groove.trio import build_trio_corpus, drum_track


def test_trio_corpus_layout_and_content(trio_corpus):
    root = trio_corpus.root
    assert {s: len(f) for s, f in trio_corpus.splits.items()} == {"train": 2, "val": 1, "test": 1}
    assert list_splits(root) == {s: sorted(f) for s, f in trio_corpus.splits.items()}
    meta = json.loads((root / "corpus.json").read_text())
    assert "synthetic" in meta["description"] and len(meta["pieces"]) == 4
    names = [p["name"] for p in meta["pieces"]]
    assert len(set(names)) == 4, "pieces are distinct chorales (split by piece)"
    for path in list_split(root, "train") + list_split(root, "test"):
        midi = miditoolkit.MidiFile(str(path))
        tracks = {inst.name: inst for inst in midi.instruments}
        assert set(tracks) - {"BB Piano", "BB Strings", "BB Guitar"} == {"BB Bass", "BB Drums"} and len(tracks) == 3
        assert tracks["BB Bass"].program == 33 and tracks["BB Drums"].is_drum
        step = midi.ticks_per_beat // 12
        assert all(n.start % step == 0 and n.end % step == 0 for inst in midi.instruments for n in inst.notes)
        assert midi.time_signature_changes[0].numerator == 4


def test_drum_patterns_vary_with_the_seed():
    templates = {drum_track(4, np.random.default_rng(seed))[1] for seed in range(12)}
    assert len(templates) > 3
    hits, _ = drum_track(8, np.random.default_rng(0))
    assert max(s for s, _, _ in hits) < 8 * TICKS_PER_BAR and {p for _, p, _ in hits} >= {36, 38, 49}


def test_trio_corpus_is_deterministic(tmp_path, trio_corpus):
    again = build_trio_corpus(tmp_path / "again", n_pieces=2, seed=1, progress=False)
    first = json.loads((trio_corpus.root / "corpus.json").read_text())["pieces"]
    assert [p.name for p in again.pieces] == [p["name"] for p in first[:2]]


def test_loader_on_groove2groove_layout(tmp_path, trio_files):
    root = tmp_path / "g2g"
    (root / "train" / "fixed").mkdir(parents=True)
    (root / "val").mkdir()
    shutil.copy(trio_files[0], root / "train" / "fixed" / "Song A.Bossa.mid")
    shutil.copy(trio_files[1], root / "train" / "Song B.Funk.mid")
    (root / "train" / "broken.mid").write_bytes(b"MThd\x00\x00")
    (root / "train" / "notes.txt").write_text("not a MIDI file, not listed")
    shutil.copy(trio_files[2], root / "val" / "Song C.Swing.mid")
    splits = list_splits(root)
    assert set(splits) == {"train", "val"}
    assert [p.name for p in splits["train"]] == ["Song B.Funk.mid", "broken.mid", "Song A.Bossa.mid"]
    assert [style_of(p) for p in splits["train"]] == ["Funk", None, "Bossa"]
    report = encode_split(GrooveTokenizer(), root, "train", progress=False)
    assert len(report.encoded) == 2 and list(report.failed) == [root / "train" / "broken.mid"]
    assert "corrupt" in report.failed[root / "train" / "broken.mid"]
    with pytest.raises(FileNotFoundError, match="test"):
        list_split(root, "test")
    with pytest.raises(ValueError, match="unknown split"):
        list_split(root, "valid")
    with pytest.raises(FileNotFoundError):
        list_splits(tmp_path / "nothing")
