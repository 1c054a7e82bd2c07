"""generation.form: returning phrases restate their first occurrence; forms drawn; chords per label."""

from __future__ import annotations

import numpy as np
import pytest

from generation.chords import FREE, ChordSteer
from generation.form import FormSteer, draw_form, form_budget, form_chords, label_progressions, resolve_form
from generation.pieces import TOKENS_PER_BAR
from remi import REMITokenizer
from tokenization.form import form_bars, parse_form


@pytest.fixture(scope="module")
def remi() -> REMITokenizer:
    return REMITokenizer()


def bar(remi: REMITokenizer, pitch: int) -> list[int]:
    """One bar: Bar Beat_0 and a note of `pitch`."""
    notes = [t for t in remi.vocab.tokens if t.startswith("Note_Pitch_")]
    return remi.strings_to_ids(["Bar_None", "Beat_0", notes[pitch], "Note_Velocity_" +
                                remi.vocab.tokens[remi.vocab.by_type("Note_Velocity")[0]].split("_")[-1],
                                remi.vocab.tokens[remi.vocab.by_type("Note_Duration")[0]]])


def follow(steer: FormSteer, tokens: list[int], vocab_size: int, steps: int) -> list[int]:
    """Append the forced token while the steer forces one (a single allowed token)."""
    for _ in range(steps):
        allowed = steer(tokens, np.ones(vocab_size, dtype=bool))
        if allowed.sum() != 1:
            break
        tokens = tokens + [int(np.flatnonzero(allowed)[0])]
    return tokens


def test_a_returning_phrase_restates_its_first_bars(remi):
    first = bar(remi, 10) + bar(remi, 20)
    steer = FormSteer(remi, parse_form("A2 A2"), bars_from=0, restate=1.0)
    written = follow(steer, first + [remi.bar_id], remi.vocab_size, 40)
    assert written[:len(first) * 2] == first + first  # bars 3-4 are bars 1-2 again
    assert written[-1] == remi.bar_id  # the copy ends on a bar line


def test_without_restatement_only_the_end_is_held_back(remi):
    tokens = bar(remi, 10) + bar(remi, 20) + [remi.bar_id]
    steer = FormSteer(remi, parse_form("A2 A2"), bars_from=0, restate=0.0)
    allowed = steer(tokens, np.ones(remi.vocab_size, dtype=bool))
    assert not allowed[remi.eos_id] and allowed.sum() == remi.vocab_size - 1
    done = tokens + bar(remi, 5)[1:] + bar(remi, 6)  # past the form's 4 bars: nothing is narrowed
    assert steer(done + [remi.bar_id], np.ones(remi.vocab_size, dtype=bool)).all()


def test_a_restated_bar_gives_way_to_the_grammar(remi):
    tokens = bar(remi, 10) + bar(remi, 20) + [remi.bar_id]
    steer = FormSteer(remi, parse_form("A2 A2"), bars_from=0, restate=1.0)
    allowed = np.ones(remi.vocab_size, dtype=bool)
    allowed[tokens[1]] = False  # the grammar refuses the copy's next token
    narrowed = steer(tokens, allowed)
    assert narrowed.sum() > 1 and not narrowed[remi.eos_id]


def test_restatement_comes_in_two_bar_units(remi):
    steer = FormSteer(remi, parse_form("A8 B8 A8 B8"), bars_from=0, restate=0.5, seed=3)
    assert steer.plan and all(source == bar - 16 for bar, source in steer.plan.items())
    starts = sorted(b for b in steer.plan if (b - 16) % 2 == 0)
    assert all(b + 1 in steer.plan for b in starts)


def test_drawn_forms_are_pop_forms():
    for seed in range(20):
        phrases = draw_form(seed)
        labels = [p.label for p in phrases]
        assert labels[0] == "i" and labels[-1] == "o" and labels.count("B") >= 2 and "A" in labels
        assert 20 <= form_bars(phrases) <= 120
    assert resolve_form("auto", 4) == draw_form(4) and resolve_form("A4 B4", 0) == parse_form("A4 B4")


def test_chords_per_label_come_back_with_the_label(remi):
    phrases = parse_form("i2 A4 B2 A4")
    chords = form_chords(phrases, label_progressions("A: C G; B: F"))
    assert chords[:2] == [FREE, FREE]
    assert chords[2:6] == chords[8:12] == [(0, "M"), (7, "M"), (0, "M"), (7, "M")]
    assert chords[6:8] == [(5, "M"), (5, "M")]
    steer = ChordSteer(remi, chords, 0)
    free = steer(remi.strings_to_ids(["Bar_None"]), np.ones(remi.vocab_size, dtype=bool))
    assert free.sum() == remi.vocab_size - 1  # an intro bar: only the end is held back
    with pytest.raises(ValueError, match="does not have"):
        form_chords(phrases, label_progressions("C: C"))
    with pytest.raises(ValueError, match="per label"):
        label_progressions("C G Am")


def test_form_budget_checks_the_tokens():
    phrases = parse_form("A8 A8")
    assert form_budget(phrases, 0, None, 3072) == 3072 and form_budget(phrases, 0, None, 100) == 16 * TOKENS_PER_BAR
    with pytest.raises(ValueError, match="at least 640"):
        form_budget(phrases, 0, 600, 3072)
    with pytest.raises(ValueError, match="nothing is left"):
        form_budget(phrases, 16, None, 3072)
