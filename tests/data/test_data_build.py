"""prepare_corpus: a corpus follows its source folder (files added, removed, another folder)."""

from __future__ import annotations

import logging
import shutil

from data.build import prepare_corpus
from training.config import RunConfig


def names(corpus) -> list[str]:
    return sorted(name for split in ("train", "valid", "test") for name in corpus.names(split))


def section(root, source):
    return RunConfig.from_dict({"data": {"kind": "midi_folder", "root": str(root), "source": str(source)}}).data


def test_a_corpus_is_rebuilt_when_its_source_changes(tmp_path, midi_files, caplog):
    source = tmp_path / "midi"
    source.mkdir()
    paths = list(midi_files.values())
    for path in paths[:2]:
        shutil.copy(path, source / path.name)
    root = tmp_path / "corpus"
    first = prepare_corpus(section(root, source))
    assert len(names(first)) == 2
    caplog.set_level(logging.INFO)
    again = prepare_corpus(section(root, source))
    assert len(names(again)) == 2 and "using the cached corpus" in caplog.text
    shutil.copy(paths[2], source / paths[2].name)  # a file added
    caplog.clear()
    grown = prepare_corpus(section(root, source))
    assert len(names(grown)) == 3 and "files were added to, removed from or changed" in caplog.text
    (source / paths[0].name).unlink()  # a file deleted: gone from every split
    shrunk = prepare_corpus(section(root, source))
    assert len(names(shrunk)) == 2 and not any(paths[0].stem in n for n in names(shrunk))
    other = tmp_path / "other"
    shutil.copytree(source, other)
    caplog.clear()
    prepare_corpus(section(root, other))
    assert "data.source names another folder" in caplog.text
