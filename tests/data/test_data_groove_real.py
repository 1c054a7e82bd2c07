"""data.groove_real: real band songs added to a Groove2Groove folder, with a cross-validation fold held out."""

from __future__ import annotations

import json

import miditoolkit
import pytest

from data.groove_real import build, deal_folds, main
from groove.dataset import list_splits
from tests.cli_helpers import band_midi


@pytest.fixture
def folders(tmp_path):
    base = tmp_path / "base"
    for split in ("train", "val", "test"):
        (base / split).mkdir(parents=True)
        band_midi(base / split / f"piece_{split}.mid")
    real = tmp_path / "real"
    real.mkdir()
    for i in range(5):
        band_midi(real / f"song{i}.mid")
    midi = miditoolkit.MidiFile(str(band_midi(real / "no_drums.mid")))
    midi.instruments = [inst for inst in midi.instruments if not inst.is_drum]
    midi.dump(str(real / "no_drums.mid"))
    midi = miditoolkit.MidiFile(str(band_midi(real / "waltz.mid")))
    midi.time_signature_changes = [miditoolkit.TimeSignature(3, 4, 0)]
    midi.dump(str(real / "waltz.mid"))
    return base, real


def test_a_fold_is_the_test_split_and_the_other_songs_train_repeated(folders, tmp_path):
    base, real = folders
    report = build(base, real, tmp_path / "out", fold=1, folds=2, repeat=3, seed=0)
    full = [f"song{i}.mid" for i in range(5)]
    assert report["test"] == deal_folds(full, 2, 0)[1]
    assert sorted(report["train"]) == sorted(set(full) - set(report["test"]) | {"no_drums.mid"})
    assert set(report["left_out"]) == {"waltz.mid"} and "3/4" in report["left_out"]["waltz.mid"]
    splits = list_splits(tmp_path / "out")
    names = {split: sorted(p.name for p in files) for split, files in splits.items()}
    assert names["test"] == report["test"]  # the base's test pieces are not scored beside the held-out songs
    assert names["val"] == ["piece_val.mid"]
    repeated = sorted(f"{name[:-4]}.r{i}.mid" for name in report["train"] for i in range(3))
    assert names["train"] == sorted(["piece_train.mid"] + repeated)
    for path in splits["train"]:  # links to the sources, not copies
        assert path.is_symlink() and path.resolve().parent in {(base / "train").resolve(), real.resolve()}
    assert json.loads((tmp_path / "out" / "real_songs.json").read_text()) == report


def test_without_a_fold_every_song_trains_and_the_base_test_stays(folders, tmp_path):
    base, real = folders
    report = build(base, real, tmp_path / "out", fold=None, repeat=1)
    assert report["test"] == [] and len(report["train"]) == 6
    assert [p.name for p in list_splits(tmp_path / "out")["test"]] == ["piece_test.mid"]


def test_a_folder_already_built_is_not_overwritten(folders, tmp_path):
    base, real = folders
    build(base, real, tmp_path / "out", fold=0, repeat=1)
    with pytest.raises(ValueError, match="not empty"):
        build(base, real, tmp_path / "out", fold=1, repeat=1)
    assert json.loads((tmp_path / "out" / "real_songs.json").read_text())["fold"] == 0


def test_folds_cover_every_song_once_with_balanced_sizes():
    names = [f"s{i}" for i in range(7)]
    folds = deal_folds(names, 3, seed=4)
    assert sorted(n for fold in folds for n in fold) == names
    assert sorted(len(f) for f in folds) == [2, 2, 3]
    assert deal_folds(names, 3, seed=4) == folds


@pytest.mark.parametrize("args, message", [
    (["--fold", "2", "--folds", "2"], "fold must be in 0..1"),
    (["--repeat", "0"], "repeat must be at least 1"),
])
def test_bad_arguments_get_one_line_and_write_nothing(folders, tmp_path, args, message):
    base, real = folders
    with pytest.raises(SystemExit) as exit_info:
        main(["--base", str(base), "--real", str(real), "--out", str(tmp_path / "out"), *args])
    assert message in str(exit_info.value)
    assert not (tmp_path / "out").exists()
