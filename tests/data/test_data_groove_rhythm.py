"""data.groove_rhythm: a varied copy of a Groove2Groove folder (train/val varied, test copied)."""

from __future__ import annotations

import json

import pytest

from data.groove_rhythm import build, main
from groove import GrooveTokenizer
from groove.rhythm import RhythmVariation, vary
from groove.roles import BASS
from groove.trio import build_trio_corpus


@pytest.fixture(scope="module")
def trio(tmp_path_factory):
    return build_trio_corpus(tmp_path_factory.mktemp("trio"), n_pieces=4, seed=1, progress=False)


def test_varied_folder_keeps_the_layout_copies_test_and_records_each_draw(trio, tmp_path):
    source = trio.root
    report = build(source, tmp_path / "out", prob=1.0, seed=3, progress=False)
    tok = GrooveTokenizer()
    for split, files in trio.splits.items():
        for path in files:
            target = tmp_path / "out" / split / path.name
            assert target.is_file()
            if split == "test":
                assert target.read_bytes() == path.read_bytes()
                continue
            drawn = report["pieces"][f"{split}/{path.name}"]
            original, varied = tok.parse(path).tracks(), tok.parse(target).tracks()
            assert varied[1] == original[1]  # drums kept
            expected = vary(original[BASS], RhythmVariation(**{k: tuple(v) if k == "beats" else v
                                                              for k, v in drawn["bass"].items()}))
            assert varied[BASS] == expected
    assert json.loads((tmp_path / "out" / "variations.json").read_text())["pieces"] == report["pieces"]


def test_prob_zero_rewrites_pieces_unchanged(trio, tmp_path):
    source = trio.root
    report = build(source, tmp_path / "out", prob=0.0, progress=False)
    assert not any(report["pieces"].values())
    tok = GrooveTokenizer()
    for split, files in trio.splits.items():
        for path in files:
            assert tok.parse(tmp_path / "out" / split / path.name).tracks()[:2] == tok.parse(path).tracks()[:2]


def test_bad_prob_is_one_line(trio, tmp_path):
    source = trio.root
    with pytest.raises(SystemExit, match="prob must be"):
        main(["--source", str(source), "--out", str(tmp_path / "x"), "--prob", "1.5"])
