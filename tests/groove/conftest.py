"""Fixtures of the groove tests: a tiny offline trio corpus (hand-made pieces: groove_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from groove.trio import build_trio_corpus


@pytest.fixture(scope="session")
def trio_corpus(tmp_path_factory):
    """Four 3-track pieces (Bach chorale bass + upper parts + synthetic drums) in the Groove2Groove layout."""
    return build_trio_corpus(tmp_path_factory.mktemp("trio"), n_pieces=4, seed=1, progress=False)


@pytest.fixture(scope="session")
def trio_files(trio_corpus) -> list[Path]:
    return [p for files in trio_corpus.splits.values() for p in files]
