"""Recall: the copy cache (keys, matches, mixture), its fitting, and decoding with it (tiny random models)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from generation.recall import (KeyTokens, Recall, RecallConfig, Sections, Trace, fit_weights, mix_logits, mixture_nll,
                               trace)
from generation.sampling import Decoder, SamplingConfig
from remi import REMITokenizer
from tests.generation.test_sampling import tiny_model
from training.config import GenerateConfig


@pytest.fixture(scope="module")
def tokenizer():
    return REMITokenizer()


def no_skip(size: int = 10) -> KeyTokens:
    return KeyTokens.plain(size)


def test_the_longest_earlier_key_gives_what_followed_it():
    recall = Recall((1, 3), no_skip())
    recall.extend([1, 2, 3, 4, 9, 3, 5, 1, 2, 3])
    order, counts = recall.match()
    assert order == 1 and dict(counts) == {4: 1}  # "1 2 3" was followed by 4; "3" alone by 4 and 5
    recall.append(7)  # "2 3 7" and "7" were never seen
    assert recall.match() is None
    recall = Recall((1, 3), no_skip())
    recall.extend([3, 4, 3, 5, 3])
    order, counts = recall.match()
    assert order == 0 and dict(counts) == {4: 1, 5: 1}


def test_skipped_tokens_leave_the_keys_but_are_still_predicted():
    skipped = np.zeros(10, dtype=bool)
    skipped[8] = skipped[9] = True  # two "velocities"
    keys = KeyTokens(skipped, np.zeros(10, dtype=bool))
    recall = Recall((2,), keys)
    recall.extend([1, 2, 8, 3, 1, 2, 9])  # "1 2" then a velocity, twice, with different velocities
    order, counts = recall.match()
    assert dict(counts) == {3: 1}  # the token after the velocity, whatever the velocity was
    recall = Recall((2,), keys)
    recall.extend([1, 2, 8, 3, 1, 2])  # right after "1 2" (no velocity yet) comes a velocity
    assert dict(recall.match()[1]) == {8: 1}


def test_the_tokenizer_names_its_expressive_and_position_tokens(tokenizer):
    keys = KeyTokens.of(tokenizer)
    names = [tokenizer.vocab.token(i) for i in np.flatnonzero(keys.skipped)]
    assert names and all(n.startswith(("Note_Velocity", "Tempo")) for n in names)
    assert not keys.skipped[tokenizer.vocab["Note_Pitch_60"]] and not keys.skipped[tokenizer.bar_id]
    anchors = {tokenizer.vocab.token(i) for i in np.flatnonzero(keys.anchors)}
    assert anchors == {"Bar_None"} | {f"Beat_{b}" for b in range(16)}


def test_an_anchor_keeps_a_short_key_to_its_place_in_the_bar():
    anchors = np.zeros(10, dtype=bool)
    anchors[0] = anchors[1] = True  # 0: a bar line, 1: a beat
    keys = KeyTokens(np.zeros(10, dtype=bool), anchors)
    recall = Recall((2,), keys)
    recall.extend([0, 5, 6, 0])  # after "5 6" at the bar's start came a bar line
    recall.extend([0, 1, 5, 6])  # the same "5 6" after a beat: the earlier one does not match
    assert recall.match() is None
    plain = Recall((2,), no_skip())
    plain.extend([0, 5, 6, 0, 0, 1, 5, 6])
    assert dict(plain.match()[1]) == {0: 1}

def test_with_a_form_a_bar_copies_from_bars_of_its_label_only():
    form = Sections(bar=0, starts=((0, "A"), (1, "B"), (2, "A"), (3, "B")))
    assert [form.label(b) for b in range(5)] == ["A", "B", "A", "B", "B"]
    assert Sections(0, ((2, "A"),)).label(1) is None
    recall = Recall((2,), no_skip(), sections=form)
    recall.extend([0, 5, 6, 7, 0, 5, 6, 8])  # bar A: 5 6 7; bar B: 5 6 8
    recall.extend([0, 5, 6])  # the second A
    assert dict(recall.match()[1]) == {7: 1}  # what followed in A, not in B
    recall.extend([7, 0, 5, 6])  # the second B
    assert dict(recall.match()[1]) == {8: 1}
    anywhere = Recall((2,), no_skip())
    anywhere.extend([0, 5, 6, 7, 0, 5, 6, 8, 0, 5, 6])
    assert dict(anywhere.match()[1]) == {7: 1, 8: 1}


def test_the_mixture_moves_weight_onto_the_copy():
    recall = Recall((1,), no_skip(4))
    recall.extend([1, 2, 1])  # after 1 came 2
    fresh = Recall((1,), no_skip(4))
    fresh.append(3)  # nothing to match
    logits = torch.zeros(2, 4)  # uniform model
    mixed = torch.softmax(mix_logits(logits, [recall, fresh], weights=[0.6]), dim=-1)
    assert torch.allclose(mixed[0], torch.tensor([0.1, 0.1, 0.7, 0.1], dtype=torch.float64))
    assert torch.allclose(mixed[1], torch.full((4,), 0.25, dtype=torch.float64))
    assert torch.allclose(mix_logits(logits, [fresh, fresh], weights=[0.6]), logits)  # no match: unchanged


def test_a_bias_before_recall_leaves_the_copy_its_odds():
    from generation.sampling import shaped_logits

    recall = Recall((1,), no_skip(4))
    recall.extend([1, 2, 1])  # after 1 came 2: the copy puts its weight on 2
    logits = torch.zeros(1, 4)  # uniform model
    bias = torch.tensor([0.0, 0.0, -50.0, 0.0])  # token 2 biased away
    config = RecallConfig((0.6,), orders=(1,), min_lag=1)
    after = SamplingConfig(recall=config)
    before = SamplingConfig(recall=config, bias_before_recall=True)
    p_after = torch.softmax(shaped_logits(logits, after, 3, [recall], token_bias=bias), dim=-1)[0]
    p_before = torch.softmax(shaped_logits(logits, before, 3, [recall], token_bias=bias), dim=-1)[0]
    assert p_after[2] < 1e-15  # biased in the mixture: the copy is cut as well
    assert torch.isclose(p_before[2], torch.tensor(0.6, dtype=p_before.dtype))  # only the model's share moved
    assert SamplingConfig.from_defaults(GenerateConfig(bias_before_recall=True)).bias_before_recall


def test_a_copy_leaves_the_end_to_the_model():
    keys = KeyTokens(np.zeros(4, dtype=bool), np.zeros(4, dtype=bool), end=3)
    recall = Recall((1,), keys)
    recall.extend([1, 2, 1])  # after 1 came 2: the copy would put everything on 2
    logits = torch.log(torch.tensor([[0.1, 0.2, 0.3, 0.4]]))  # the model gives the end 0.4
    mixed = torch.softmax(mix_logits(logits, [recall], weights=[0.9]), dim=-1)[0]
    assert mixed[3] == pytest.approx(0.4)  # whatever the weight
    assert mixed[2] == pytest.approx(0.1 * 0.3 + 0.9 * 0.6) and mixed.sum() == pytest.approx(1.0)
    rec = trace([1, 2, 1, 3], np.array([0.5, 0.5, 0.25]), (1,), keys)
    assert rec.p_copy[2] == 0.25  # the end token: the model's own probability


def test_fitted_weights_follow_how_often_the_copy_is_right():
    rng = np.random.default_rng(0)
    motif = list(rng.integers(0, 50, 40))
    repeating = motif * 6  # every later token is what followed its key before
    random = list(rng.integers(0, 50, 240))  # keys recur by chance only
    p_model = np.full(239, 1 / 50)
    fitted = fit_weights(trace(repeating, p_model, (1, 8), no_skip(50)), 2)
    assert fitted[1] >= 0.95  # a long match is always right
    chance = fit_weights(trace(random, p_model, (1, 8), no_skip(50)), 2)
    assert chance[0] < 0.2 and chance[1] == 0.0  # no 8-token key ever recurs in a random sequence
    rec = trace(repeating, p_model, (1, 8), no_skip(50))
    assert mixture_nll(rec, fitted).mean() < mixture_nll(rec, (0.0, 0.0)).mean() == pytest.approx(math.log(50))


def test_a_trace_records_the_copy_probability_of_the_token_that_came():
    rec = trace([1, 2, 1, 3, 1, 2], np.full(5, 0.5), (1,), no_skip())
    assert isinstance(rec, Trace)
    assert rec.order.tolist() == [-1, -1, 0, -1, 0]  # a key "1" was seen before the 2nd and 3rd "1"
    assert rec.p_copy[2] == 0.0 and rec.p_copy[4] == pytest.approx(0.5)  # 1 -> 2 (not 3), then 2 or 3


def test_recall_weights_are_checked():
    with pytest.raises(ValueError, match="orders"):
        RecallConfig((0.5,), orders=(4, 2))
    with pytest.raises(ValueError, match="weights"):
        RecallConfig((0.5,), orders=(2, 4))
    with pytest.raises(ValueError, match="in \\[0, 1\\)"):
        RecallConfig((1.0, 0.5), orders=(2, 4))
    with pytest.raises(ValueError, match="recall"):
        GenerateConfig(recall_weights=(0.5,)).validate()


def test_sampling_takes_recall_from_the_checkpoint_unless_told():
    fitted = GenerateConfig(recall_weights=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6))
    assert SamplingConfig.from_defaults(fitted).recall.weights == fitted.recall_weights
    assert SamplingConfig.from_defaults(fitted, recall=False).recall is None
    assert SamplingConfig.from_defaults(GenerateConfig()).recall is None
    with pytest.raises(ValueError, match="no recall weights"):
        SamplingConfig.from_defaults(GenerateConfig(), recall=True)


def test_decoding_with_recall_continues_a_passage_the_prompt_repeats(tokenizer):
    """A random tiny model left alone does not restate the prompt; with heavy recall it does."""
    names = ["Bar_None"]
    for position, pitch in [(0, 60), (4, 64), (8, 67), (12, 72)]:
        names += [f"Beat_{position}", f"Note_Pitch_{pitch}", "Note_Velocity_60", "Note_Duration_480"]
    bar = tokenizer.strings_to_ids(names)
    prompt = bar * 3 + bar[:6]  # three bars of the same motif, then the motif's start
    model = tiny_model(tokenizer.vocab_size)
    copying = SamplingConfig(top_p=1.0, temperature=1.0,
                             recall=RecallConfig((0.0, 0.0, 0.99, 0.99, 0.99, 0.99), min_lag=8))
    decoder = Decoder(model, tokenizer, prompt, num_samples=2, sampling=copying,
                      generator=torch.Generator().manual_seed(0))
    decoder.run(30)
    expected = (bar * 4)[len(prompt):len(prompt) + 30]
    agree = [np.mean([a == b for a, b in zip(t[len(prompt):], expected)]) for t in decoder.tokens]
    assert min(agree) > 0.8
    plain = Decoder(model, tokenizer, prompt, num_samples=2, sampling=SamplingConfig(top_p=1.0, temperature=1.0),
                    generator=torch.Generator().manual_seed(0))
    plain.run(30)
    assert max(np.mean([a == b for a, b in zip(t[len(prompt):], expected)]) for t in plain.tokens) < 0.5
    # an undo point restores the copy caches too
    point = decoder.snapshot()
    before = decoder.recalls[0].length
    decoder.run(5)
    decoder.restore(point)
    assert decoder.recalls[0].length == before


def test_a_token_is_copied_only_from_min_lag_positions_back():
    sequence = [1, 2, 3, 1, 2, 3, 1, 2]  # period 3
    near = Recall((2,), no_skip(), min_lag=3)
    near.extend(sequence)
    assert dict(near.match()[1]) == {3: 2}  # the 3s at positions 2 and 5: 6 and 3 positions before 8
    far = Recall((2,), no_skip(), min_lag=4)
    far.extend(sequence)
    assert dict(far.match()[1]) == {3: 1}  # only position 2
    farther = Recall((2,), no_skip(), min_lag=7)
    farther.extend(sequence)
    assert farther.match() is None
    rec = trace(sequence, np.full(7, 0.5), (2,), no_skip(), min_lag=3)
    assert rec.order.tolist() == [-1, -1, -1, -1, 0, 0, 0]  # positions 5, 6, 7 copy from 2, 3, 4
    assert (trace(sequence, np.full(7, 0.5), (2,), no_skip(), min_lag=4).order == -1).all()
