"""Fixtures of the command tests."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture(scope="session")
def corpus_root(midi_files, tmp_path_factory):
    """A REMI corpus of the four test pieces, three copies each (so valid and test are not empty)."""
    from data import build_midi_folder_corpus
    from remi import REMITokenizer

    folder = tmp_path_factory.mktemp("train_midi")
    for path in midi_files.values():
        for copy in range(3):
            shutil.copy(path, folder / f"{path.stem}_{copy}.mid")
    root = tmp_path_factory.mktemp("train_corpus") / "corpus"
    corpus = build_midi_folder_corpus(folder, root, REMITokenizer(), progress=False)
    assert corpus.pieces("valid") and corpus.pieces("train")
    return root
