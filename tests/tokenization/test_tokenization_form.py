"""Song forms in POP909's label notation."""

from __future__ import annotations

import pytest

from tokenization.form import FormError, Phrase, first_occurrences, form_bars, form_text, parse_form


def test_a_label_file_line_and_a_spaced_form_parse_alike():
    compact = parse_form("i4A8B8A8B8x4B8o4")
    spaced = parse_form(" i4 A8 B8  A8 B8 x4 B8 o4\n")
    assert compact == spaced
    assert [(p.label, p.bars, p.first) for p in compact[:3]] == [("i", 4, 0), ("A", 8, 4), ("B", 8, 12)]
    assert form_bars(compact) == 52 and form_text(compact) == "i4 A8 B8 A8 B8 x4 B8 o4"
    assert compact[1].melodic and not compact[0].melodic


def test_first_occurrences_point_back_to_the_labels_first_phrase():
    phrases = parse_form("i4 A8 B8 X2 A8 B4 X2 o4")
    earlier = first_occurrences(phrases)
    assert earlier == {4: phrases[1], 5: phrases[2]}  # X never returns, i and o are not repeated


@pytest.mark.parametrize("text, message", [
    ("", "empty"), ("A8 B", "no length"), ("8B A8", "does not start with a letter"), ("A0", "1 .. 128"),
    ("Z8", "unknown label 'Z'"), ("A8 q4", "unknown label 'q'"), ("A8-B8", "does not start")])
def test_bad_forms_say_what_is_wrong(text, message):
    with pytest.raises(FormError, match=message):
        parse_form(text)


def test_phrase_is_a_value():
    assert Phrase("A", 8, 0) == Phrase("A", 8, 0)
