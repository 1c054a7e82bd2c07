"""generation.pieces.song_opening: an unprompted piece opens as the format's encoded songs do."""

from __future__ import annotations

import numpy as np

from generation.pieces import song_opening
from groove import GrooveTokenizer
from remi import REMITokenizer


def allowed_set(mask: np.ndarray) -> set[int]:
    return set(np.flatnonzero(mask).tolist())


def test_an_unprompted_piece_opens_as_encoded_songs_do(chorale_midi):
    tokenizer = REMITokenizer(time_signatures=True)
    song = tokenizer.encode(chorale_midi)
    vocab, everything = tokenizer.vocab, np.ones(tokenizer.vocab_size, dtype=bool)
    steer = song_opening(tokenizer)
    choices = [set(vocab.by_type("TimeSig")), {vocab["Beat_0"]}, set(vocab.by_type("Tempo"))]
    for at, choice in enumerate(choices):  # each opening position: the format's choices, the model's pick
        assert song[1 + at] in choice  # an encoded song opens so
        assert allowed_set(steer(song[:1 + at], everything)) == choice
    assert steer(song[:1 + len(choices)], everything).all()  # then the steer lets everything through
    assert steer([tokenizer.start_id, vocab["Beat_0"]], everything).all()  # a prompt opening otherwise
    assert steer([vocab["Beat_0"]], everything).all()  # not a piece's start


def test_without_time_signatures_the_opening_starts_at_the_first_beat():
    tokenizer = REMITokenizer(time_signatures=False)
    steer = song_opening(tokenizer)
    everything = np.ones(tokenizer.vocab_size, dtype=bool)
    assert allowed_set(steer([tokenizer.start_id], everything)) == {tokenizer.vocab["Beat_0"]}


def test_the_opening_runs_before_the_next_steer_and_keeps_the_grammars_mask():
    tokenizer = REMITokenizer(time_signatures=True)
    seen = []

    def then(tokens, allowed):
        seen.append(allowed.copy())
        return allowed

    grammar = tokenizer.constraint_state()
    grammar.advance(tokenizer.start_id)
    allowed = grammar.allowed()
    out = song_opening(tokenizer, then)([tokenizer.start_id], allowed)
    assert np.array_equal(out, seen[0])  # `then` saw the narrowed mask
    assert out.any() and not (out & ~allowed).any()  # nothing the grammar forbids comes back


def test_formats_without_a_fixed_opening_are_left_alone():
    then = object()
    assert song_opening(GrooveTokenizer(), then) is then
