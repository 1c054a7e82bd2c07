"""data.kinds: the token format follows from the corpus kind."""

import pytest

from data import CORPUS_KINDS, FORMAT_OF_KIND, check_kind_format
from tokenization import token_formats


def test_every_kind_has_a_registered_format():
    assert set(FORMAT_OF_KIND.values()) <= set(token_formats())
    for kind in CORPUS_KINDS:
        check_kind_format(kind, FORMAT_OF_KIND[kind])


@pytest.mark.parametrize("kind, token_format", [("trio", "remi"), ("groove", "remi"), ("pop909", "groove")])
def test_mismatch_is_a_clear_error(kind, token_format):
    with pytest.raises(ValueError, match=f"a {kind} corpus is tokenised in the .* format, but data.format is"):
        check_kind_format(kind, token_format)


def test_unknown_kind():
    with pytest.raises(ValueError, match="unknown corpus kind 'lakh'"):
        check_kind_format("lakh", "remi")
