"""bench.checked_corpus and data.corpus_for: a corpus is read only in the checkpoint's own vocabulary."""

from __future__ import annotations

import pytest

from bench import checked_corpus
from cli_helpers import save_tiny, song_corpus
from data import corpus_for, extends
from groove import GrooveTokenizer
from remi import REMITokenizer
from training.checkpoint import load_model


def test_a_corpus_in_another_vocabulary_is_refused(chorale_midi, tmp_path):
    remi = REMITokenizer()
    corpus = song_corpus(tmp_path / "corpus", remi, chorale_midi)
    assert corpus_for(corpus, remi).pieces("test")  # the same vocabulary
    assert corpus_for(corpus, remi.with_infill()).pieces("test")  # one that adds tokens at its end
    with pytest.raises(ValueError, match="differs from the checkpoint's GrooveTokenizer"):
        corpus_for(corpus, GrooveTokenizer())
    assert extends(["a", "b", "c"], ["a", "b"]) and not extends(["a", "c"], ["a", "b"])
    groove = load_model(save_tiny(tmp_path / "groove", GrooveTokenizer()))
    with pytest.raises(SystemExit, match="differs from the checkpoint's GrooveTokenizer"):
        checked_corpus(str(corpus), groove)
    with pytest.raises(SystemExit, match="no token corpus in .*nowhere"):
        checked_corpus(str(tmp_path / "nowhere"), groove)
    assert checked_corpus(str(corpus), load_model(save_tiny(tmp_path / "remi", remi))).pieces("test")
