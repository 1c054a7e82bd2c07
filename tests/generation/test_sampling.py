"""Nucleus / temperature sampling, grammar masks and the recurrent decoding loop (tiny random models)."""

from __future__ import annotations

import math

import pytest
import torch

from generation.sampling import (Decoder, GrammarDeadEnd, SamplingConfig, check_length, generate,
                           generate_batch, sample_next, sampling_probabilities, token_types)
from model import ModelConfig, MusicPerformer
from remi import REMITokenizer



@pytest.fixture(scope="module")
def tokenizer():
    return REMITokenizer()


def tiny_model(vocab_size: int, pe: str = "sine_spe", max_len: int = 256, seed: int = 0) -> MusicPerformer:
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=vocab_size, n_layer=2, n_head=2, d_model=16, d_ff=32, dropout=0.0, pe=pe,
                      num_realizations=8, num_sines=2, kernel_size=8, feature_dims=16, attention="torch",
                      max_len=max_len)
    return MusicPerformer(cfg).eval()


# ------------------------------------------------------------------------ probabilities
def test_nucleus_keeps_the_smallest_set_reaching_top_p():
    probs = torch.tensor([[0.05, 0.5, 0.15, 0.3]], dtype=torch.float64)
    logits = probs.log()
    kept = sampling_probabilities(logits, top_p=0.7, temperature=1.0)
    assert torch.allclose(kept, torch.tensor([[0.0, 0.5 / 0.8, 0.0, 0.3 / 0.8]], dtype=torch.float64))
    kept = sampling_probabilities(logits, top_p=0.85, temperature=1.0)
    assert torch.allclose(kept, torch.tensor([[0.0, 0.5, 0.15, 0.3]], dtype=torch.float64) / 0.95)
    full = sampling_probabilities(logits, top_p=1.0, temperature=1.0)
    assert torch.allclose(full, probs)


def test_typewise_nucleus_keeps_each_types_mass_and_cuts_inside_it():
    # type 0: one likely token (a Bar); type 1: mass spread over four tokens (pitches); type 2 masked
    probs = torch.tensor([[0.4, 0.2, 0.15, 0.15, 0.1, 0.0]], dtype=torch.float64)
    types = torch.tensor([0, 1, 1, 1, 1, 2])
    logits = probs.clamp_min(1e-30).log()
    allowed = torch.tensor([[True, True, True, True, True, False]])
    kept = sampling_probabilities(logits, top_p=0.5, temperature=1.0, allowed=allowed, types=types)
    # type 1 keeps its 0.6 on the tokens reaching half of it (0.2 + 0.15 of 0.6): 0.6 * (0.2, 0.15) / 0.35
    expected = torch.tensor([[0.4, 0.6 * 0.2 / 0.35, 0.6 * 0.15 / 0.35, 0.0, 0.0, 0.0]], dtype=torch.float64)
    assert torch.allclose(kept, expected)
    # the vocabulary-wide cut at the same top_p keeps only the Bar and the best pitch: types are skewed
    token_wise = sampling_probabilities(logits, top_p=0.5, temperature=1.0, allowed=allowed)
    assert token_wise[0, 0] == pytest.approx(0.4 / 0.6) and kept[0, 0] == pytest.approx(0.4)
    # top_p 1 leaves the distribution unchanged; several rows are independent
    assert torch.allclose(sampling_probabilities(logits.repeat(3, 1), 1.0, 1.0, allowed.repeat(3, 1), types),
                          probs.repeat(3, 1))


def test_token_types_follow_the_type_value_names(tokenizer):
    types = token_types(tokenizer)
    names = [tokenizer.vocab.token(i) for i in range(tokenizer.vocab_size)]
    notes = [i for i, name in enumerate(names) if name.startswith("Note_")]  # pitches, velocities, durations
    chords = [i for i, name in enumerate(names) if name.startswith("Chord_")]  # Chord_C_M: the type is Chord
    assert types.shape == (tokenizer.vocab_size,) and len(notes) > 1 and len(chords) > 1
    assert len(set(types[notes].tolist())) == 1 and len(set(types[chords].tolist())) == 1
    assert len({int(types[tokenizer.eos_id]), int(types[notes[0]]), int(types[chords[0]]),
                int(types[tokenizer.vocab["Bar_None"]])}) == 4


def test_typewise_decoding_runs_and_is_seeded(tokenizer):
    model = tiny_model(tokenizer.vocab_size)
    sampling = SamplingConfig(top_p=0.9, temperature=1.0, nucleus="type")
    runs = [generate_batch(model, tokenizer, [tokenizer.vocab["Bar_None"]], 40, 2, sampling,
                           generator=torch.Generator().manual_seed(3)) for _ in range(2)]
    assert [r.tokens for r in runs[0]] == [r.tokens for r in runs[1]]
    with pytest.raises(ValueError, match="nucleus"):
        SamplingConfig(nucleus="bar")


def test_temperature_scales_the_logits():
    logits = torch.tensor([[1.0, 2.0, -0.5, 0.3]])
    for temperature in (0.5, 1.0, 2.0):
        got = sampling_probabilities(logits, top_p=1.0, temperature=temperature)
        expected = torch.softmax(logits.double() / temperature, dim=-1)
        assert torch.allclose(got, expected)
    # a higher temperature flattens the distribution (higher entropy)
    entropy = [-(p * p.log()).sum() for p in (sampling_probabilities(logits, 1.0, t) for t in (0.5, 2.0))]
    assert entropy[1] > entropy[0]


def test_tiny_top_p_is_argmax():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(16, 50, generator=generator)  # (B, V)
    for _ in range(5):
        drawn = sample_next(logits, top_p=1e-6, temperature=1.5, generator=generator)
        assert torch.equal(drawn, logits.argmax(dim=-1))


def test_masked_tokens_are_never_sampled():
    generator = torch.Generator().manual_seed(0)
    logits = torch.zeros(1, 10)
    logits[0, 3] = 20.0  # by far the most likely, but forbidden
    allowed = torch.ones(1, 10, dtype=torch.bool)
    allowed[0, 3] = False
    allowed[0, 7] = False
    draws = [int(sample_next(logits, 1.0, 1.0, allowed, generator)) for _ in range(300)]
    assert not {3, 7} & set(draws)
    assert len(set(draws)) == 8  # every allowed token shows up with equal-ish probability
    probs = sampling_probabilities(logits, 1.0, 1.0, allowed)
    assert float(probs[0, 3]) == 0.0 and math.isclose(float(probs.sum()), 1.0)


def test_grammar_dead_end_is_an_error():
    with pytest.raises(GrammarDeadEnd):
        sample_next(torch.zeros(1, 4), allowed=torch.zeros(1, 4, dtype=torch.bool))


def test_sampling_config_validates():
    with pytest.raises(ValueError, match="top_p"):
        SamplingConfig(top_p=0.0)
    with pytest.raises(ValueError, match="temperature"):
        SamplingConfig(temperature=0.0)


# ------------------------------------------------------------------------------ decoding
def test_constrained_generation_follows_the_grammar(tokenizer):
    model = tiny_model(tokenizer.vocab_size)
    prompt = [tokenizer.bar_id]
    trimmed = 0
    for seed in range(3):
        result = generate(model, tokenizer, prompt, 40, SamplingConfig(top_p=1.0, temperature=1.5),
                          generator=torch.Generator().manual_seed(seed))
        assert result.tokens[:1] == prompt and result.prompt_len == 1
        assert 1 <= len(result.generated) <= 40
        state = tokenizer.constraint_state()
        for token in result.tokens:
            assert state.allowed()[token], tokenizer.vocab.token(token)
            state.advance(token)
        assert tokenizer.pad_id not in result.tokens
        assert result.stopped_at_eos == (result.tokens[-1] == tokenizer.eos_id)
        assert tokenizer.decode_with_report(result.tokens).skipped == 0  # no unfinished note at the end
        trimmed += not result.stopped_at_eos and len(result.generated) < 40
    assert trimmed  # the budget ended inside a note at least once, and its tokens were dropped


def test_decoding_is_reproducible_and_uses_one_noise_for_the_whole_length(tokenizer):
    """Replaying the draws on a parallel forward with the same noise gives the same tokens."""
    model = tiny_model(tokenizer.vocab_size)
    prompt = [tokenizer.bar_id, tokenizer.vocab["Beat_0"]]
    sampling = SamplingConfig(top_p=0.95, temperature=1.0, constrained=False)
    result = generate(model, tokenizer, prompt, 40, sampling, generator=torch.Generator().manual_seed(3))
    again = generate(model, tokenizer, prompt, 40, sampling, generator=torch.Generator().manual_seed(3))
    assert result.tokens == again.tokens
    assert result.noise_length == len(prompt) + 40

    generator = torch.Generator().manual_seed(3)
    noise = model.draw_positional_noise(result.noise_length, generator=generator)
    with torch.no_grad():
        logits, _ = model(torch.tensor([result.tokens]), positional_noise=noise)
        logits = logits[0]  # (N, V)
    replay = list(prompt)
    for position in range(len(prompt) - 1, len(result.tokens) - 1):
        replay.append(int(sample_next(logits[position:position + 1], sampling.top_p, sampling.temperature,
                                      generator=generator)))
    assert replay == result.tokens


def test_generation_stops_at_eos(tokenizer):
    model = tiny_model(tokenizer.vocab_size)
    with torch.no_grad():  # a model that always predicts EOS
        model.ln_f.weight.zero_()
        model.ln_f.bias.fill_(1.0)
        model.head.weight.zero_()
        model.head.weight[tokenizer.eos_id] = 10.0
    result = generate(model, tokenizer, [tokenizer.bar_id], 50, SamplingConfig(constrained=False),
                      generator=torch.Generator().manual_seed(0))
    assert result.tokens == [tokenizer.bar_id, tokenizer.eos_id] and result.stopped_at_eos


def test_the_end_bias_multiplies_the_end_tokens_odds(tokenizer):
    model = tiny_model(tokenizer.vocab_size)
    with torch.no_grad():  # a model that never predicts EOS unless biased
        model.ln_f.weight.zero_()
        model.ln_f.bias.fill_(1.0)
        model.head.weight.zero_()
        model.head.weight[tokenizer.eos_id] = -1.0  # logit -16
    ends = []
    for bias in (0.0, 60.0):
        result = generate(model, tokenizer, [tokenizer.bar_id], 20, SamplingConfig(end_bias=bias),
                          generator=torch.Generator().manual_seed(0))
        ends.append(result.stopped_at_eos and len(result.tokens) == 2)  # where the grammar first allows it
    assert ends == [False, True]
    with pytest.raises(ValueError, match="end_bias and end_ramp must be finite"):
        SamplingConfig(end_bias=float("inf"))
    with pytest.raises(ValueError, match="end_bias and end_ramp must be finite"):
        SamplingConfig(end_ramp=float("nan"))


def test_the_end_ramp_adds_its_bias_per_bar_line(tokenizer):
    model = tiny_model(tokenizer.vocab_size)
    with torch.no_grad():  # a model that never predicts EOS unless biased, and predicts bar lines mostly
        model.ln_f.weight.zero_()
        model.ln_f.bias.fill_(1.0)
        model.head.weight.zero_()
        model.head.weight[tokenizer.eos_id] = -1.0  # logit -16
        model.head.weight[tokenizer.bar_id] = 0.5  # logit +8
    sampling = SamplingConfig(end_bias=-40.0, end_ramp=12.0, constrained=False)
    decoder = Decoder(model, tokenizer, [tokenizer.bar_id] * 2, 2, sampling, torch.Generator().manual_seed(0))
    assert decoder.bars == [2, 2] and decoder.end_logit_bias().tolist() == [-16.0, -16.0]
    decoder.run(40)
    for tokens, bars in zip(decoder.tokens, decoder.bars):
        assert bars == tokens.count(tokenizer.bar_id)
        # the end comes once the ramp has lifted the End logit above the others: after 5 bar lines
        assert tokens[-1] == tokenizer.eos_id and bars >= 5
    snapshot = decoder.snapshot()
    decoder.bars[0] += 3
    decoder.restore(snapshot)
    assert decoder.bars == [t.count(tokenizer.bar_id) for t in decoder.tokens]
    from groove import GrooveTokenizer
    groove = GrooveTokenizer()
    with pytest.raises(ValueError, match="counts bar lines, which the GrooveTokenizer format has none of"):
        Decoder(tiny_model(groove.vocab_size), groove, [groove.start_id], 1, SamplingConfig(end_ramp=0.1))


def test_the_end_bias_comes_from_the_models_defaults():
    from training.config import GenerateConfig

    assert SamplingConfig.from_defaults(GenerateConfig(end_bias=0.85)).end_bias == 0.85
    assert SamplingConfig.from_defaults(GenerateConfig()).end_bias == 0.0
    assert SamplingConfig.from_defaults(GenerateConfig(end_ramp=0.05)).end_ramp == 0.05
    with pytest.raises(ValueError, match="generate.end_bias and generate.end_ramp must be finite"):
        GenerateConfig(end_bias=float("nan")).validate()
    with pytest.raises(ValueError, match="generate.end_bias and generate.end_ramp must be finite"):
        GenerateConfig(end_ramp=float("inf")).validate()


def test_stop_condition_ends_decoding(tokenizer):
    model = tiny_model(tokenizer.vocab_size)
    result = generate(model, tokenizer, [tokenizer.bar_id], 50, SamplingConfig(constrained=False),
                      generator=torch.Generator().manual_seed(0), stop=lambda tokens: len(tokens) >= 7)
    assert len(result.tokens) == 7 or result.stopped_at_eos


def test_bad_requests(tokenizer):
    model = tiny_model(tokenizer.vocab_size, pe="learned_ape", max_len=32)
    with pytest.raises(ValueError, match="32 positions"):
        check_length(model, 33)
    check_length(model, 32)
    with pytest.raises(ValueError, match="32 positions"):
        generate(model, tokenizer, [tokenizer.bar_id] * 10, 30)
    with pytest.raises(ValueError, match="non-empty prompt"):
        generate(model, tokenizer, [], 5)
    with pytest.raises(ValueError, match="grammar"):  # a note velocity cannot open a piece
        generate(model, tokenizer, [tokenizer.vocab["Note_Velocity_60"]], 5)
    other = tiny_model(tokenizer.vocab_size + 3)
    with pytest.raises(ValueError, match="tokens"):
        generate(other, tokenizer, [tokenizer.bar_id], 5)


# ------------------------------------------------------------------------ batched decoding
def test_batched_samples_are_grammatical_and_match_a_parallel_forward(tokenizer):
    """Each row of the batched recurrent state is that sample's own: the decoder's next-token logits
    equal a parallel forward over the sample's tokens with the same positional noise."""
    model = tiny_model(tokenizer.vocab_size)
    prompt = [tokenizer.bar_id, tokenizer.vocab["Beat_0"]]
    decoder = Decoder(model, tokenizer, prompt, num_samples=3, sampling=SamplingConfig(top_p=1.0),
                      generator=torch.Generator().manual_seed(5), capacity=40)
    decoder.run(30)
    assert len({tuple(t) for t in decoder.tokens}) == 3
    for i, tokens in enumerate(decoder.tokens):
        if decoder.at_eos[i]:
            continue
        with torch.no_grad():
            logits = model(torch.tensor([tokens]), positional_noise=decoder.noise)[0][0, -1]  # (V,)
        assert torch.allclose(decoder.logits[i], logits, atol=1e-4)
    for result in decoder.results():
        state = tokenizer.constraint_state()
        for token in result.tokens:
            assert state.allowed()[token], tokenizer.vocab.token(token)
            state.advance(token)
        assert tokenizer.decode_with_report(result.tokens).skipped == 0


def test_a_batch_of_one_is_plain_generation(tokenizer):
    model = tiny_model(tokenizer.vocab_size)
    single = generate(model, tokenizer, [tokenizer.bar_id], 25, generator=torch.Generator().manual_seed(2))
    batch = generate_batch(model, tokenizer, [tokenizer.bar_id], 25, 1,
                           generator=torch.Generator().manual_seed(2))
    assert batch[0].tokens == single.tokens


@pytest.mark.parametrize("pe", ["sine_spe", "conv_spe", "rope"])
def test_continuing_keeps_the_state_and_undo_restores_it(tokenizer, pe):
    model = tiny_model(tokenizer.vocab_size, pe=pe)
    decoder = Decoder(model, tokenizer, [tokenizer.bar_id], num_samples=2,
                      sampling=SamplingConfig(constrained=False), generator=torch.Generator().manual_seed(0),
                      capacity=11)
    decoder.run(10)
    before = [list(t) for t in decoder.tokens]
    snapshot = decoder.snapshot()
    decoder.run(15)  # beyond the noise drawn at first: it is extended
    assert decoder.noise_length >= 26
    for old, new in zip(before, decoder.tokens):
        assert new[:len(old)] == old
    for i, tokens in enumerate(decoder.tokens):  # the state still matches the whole sequence
        if not decoder.at_eos[i]:
            with torch.no_grad():
                logits = model(torch.tensor([tokens]), positional_noise=decoder.noise)[0][0, -1]
            assert torch.allclose(decoder.logits[i], logits, atol=1e-4)
    decoder.restore(snapshot)
    assert decoder.tokens == before and decoder.state.position == snapshot["state"].position


def test_resuming_equals_one_run(tokenizer):
    """sineSPE codes do not depend on the length: 10 + 10 tokens are the same draws as 20."""
    model = tiny_model(tokenizer.vocab_size)
    sampling = SamplingConfig(constrained=False)
    once = Decoder(model, tokenizer, [tokenizer.bar_id], 2, sampling, torch.Generator().manual_seed(4), 21)
    once.run(20)
    twice = Decoder(model, tokenizer, [tokenizer.bar_id], 2, sampling, torch.Generator().manual_seed(4), 11)
    twice.run(10)
    twice.run(10)
    assert once.tokens == twice.tokens


def test_extended_conv_noise_keeps_the_covered_positions(tokenizer):
    model = tiny_model(tokenizer.vocab_size, pe="conv_spe")
    noise = model.draw_positional_noise(20, generator=torch.Generator().manual_seed(0))
    longer = model.extend_positional_noise(noise, 50, torch.Generator().manual_seed(1))
    assert longer.length == 50
    spe = model.pe.spes[0]
    short_q, short_k = spe.codes(noise.code_noises[0], 0, 20)
    long_q, long_k = spe.codes(longer.code_noises[0], 0, 50)
    assert torch.allclose(short_q, long_q[:, :20], atol=1e-5) and torch.allclose(short_k, long_k[:, :20], atol=1e-5)
    assert model.extend_positional_noise(noise, 10) is noise


def test_per_sample_stop_conditions(tokenizer):
    model = tiny_model(tokenizer.vocab_size)
    decoder = Decoder(model, tokenizer, [tokenizer.bar_id], 2, SamplingConfig(constrained=False),
                      torch.Generator().manual_seed(0))
    decoder.run(20, stop=[lambda t: len(t) >= 5, lambda t: len(t) >= 9])
    lengths = [len(t) for t in decoder.tokens]
    assert [n == limit or eos for n, limit, eos in zip(lengths, (5, 9), decoder.at_eos)] == [True, True]
    with pytest.raises(ValueError, match="stop conditions"):
        decoder.run(5, stop=[None])
    with pytest.raises(ValueError, match="samples"):
        Decoder(model, tokenizer, [tokenizer.bar_id], 0)


# ------------------------------------------------------------------------ sampling policy: hold limit
def test_hold_bars_is_validated_with_the_sampling_config():
    assert SamplingConfig().hold_bars is None and SamplingConfig(hold_bars=0).hold_bars == 0
    with pytest.raises(ValueError, match="hold_bars must be >= 0"):
        SamplingConfig(hold_bars=-1)
    with pytest.raises(ValueError, match="grammar-constrained"):
        SamplingConfig(constrained=False, hold_bars=2)


def test_from_defaults_takes_the_models_hold_limit_when_constrained():
    from training.config import GenerateConfig

    held = GenerateConfig(hold_bars=2)
    assert SamplingConfig.from_defaults(held).hold_bars == 2
    assert SamplingConfig.from_defaults(held, hold_bars=3).hold_bars == 3
    assert SamplingConfig.from_defaults(held, hold_bars=0).hold_bars is None  # 0 lifts it
    assert SamplingConfig.from_defaults(held, constrained=False).hold_bars is None
    assert SamplingConfig.from_defaults(GenerateConfig(hold_bars=2, constrained=False)).hold_bars is None
    assert SamplingConfig.from_defaults(GenerateConfig()).hold_bars is None


def test_a_hold_limit_on_a_remi_model_is_refused_before_decoding(tokenizer):
    model = tiny_model(tokenizer.vocab_size)
    generator = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="a hold limit applies to groove models; this one uses REMITokenizer"):
        Decoder(model, tokenizer, [tokenizer.bar_id], 1, SamplingConfig(hold_bars=2), generator)
    assert Decoder(model, tokenizer, [tokenizer.bar_id], 1, SamplingConfig(hold_bars=0), generator).tokens


def test_a_hold_limit_closes_the_notes_a_groove_sample_holds():
    from groove import GrooveTokenizer
    from groove.roles import TICKS_PER_BAR, TICKS_PER_BEAT

    groove = GrooveTokenizer()
    model = tiny_model(groove.vocab_size, seed=3)
    with torch.no_grad():  # uniform over the allowed tokens: one NoteOff among some 400, notes stay on
        model.head.weight.zero_()

    def longest(hold_bars):
        sampling = SamplingConfig(top_p=1.0, temperature=1.0, hold_bars=hold_bars)
        result = generate(model, groove, [groove.start_id], 400, sampling, torch.Generator().manual_seed(1))
        return max(n.duration for t in groove.decode(result.tokens).tracks for n in t.notes)

    assert longest(None) > 2 * TICKS_PER_BAR
    assert longest(1) <= TICKS_PER_BAR and longest(2) <= 2 * TICKS_PER_BAR
    assert TICKS_PER_BAR == 4 * TICKS_PER_BEAT  # bars of 4/4
    assert groove.constraint_state().hold_limit is None  # the shared tokenizer is left as it was


def test_the_token_bias_shifts_the_named_tokens(tokenizer):
    from generation.sampling import token_bias_vector

    vector = token_bias_vector(tokenizer, (("Note_Pitch", -0.5), ("Note_Pitch_6", 0.25)))
    names = [tokenizer.vocab.token(i) for i in range(tokenizer.vocab_size)]
    for name, value in zip(names, vector.tolist()):
        expected = (-0.5 if name.startswith("Note_Pitch") else 0.0) + (0.25 if name.startswith("Note_Pitch_6") else 0.0)
        assert value == expected
    assert token_bias_vector(tokenizer, ()) is None
    with pytest.raises(ValueError, match="no token of the REMITokenizer format starts with 'Nope'"):
        token_bias_vector(tokenizer, (("Nope", 1.0),))
    with pytest.raises(ValueError, match="token_bias needs"):
        SamplingConfig(token_bias=(("Note_Pitch", float("nan")),))
    model = tiny_model(tokenizer.vocab_size)
    with torch.no_grad():  # a model that writes bar lines mostly, unless they are biased away
        model.ln_f.weight.zero_()
        model.ln_f.bias.fill_(1.0)
        model.head.weight.zero_()
        model.head.weight[tokenizer.bar_id] = 0.5  # logit +8
    for bias, many in ((0.0, True), (-30.0, False)):
        sampling = SamplingConfig(constrained=False, token_bias=(("Bar", bias),))
        result = generate(model, tokenizer, [tokenizer.bar_id], 30, sampling, torch.Generator().manual_seed(0))
        assert (result.tokens[1:].count(tokenizer.bar_id) > 15) == many


def test_the_token_bias_comes_from_the_models_defaults():
    from training.config import GenerateConfig

    pairs = (("Note_Pitch", -0.15),)
    assert SamplingConfig.from_defaults(GenerateConfig(token_bias=pairs)).token_bias == pairs
    with pytest.raises(ValueError, match="generate.token_bias needs"):
        GenerateConfig(token_bias=(("", 1.0),)).validate()


def test_the_opening_boost_strengthens_the_token_bias_over_the_first_bars(tokenizer):
    from training.config import GenerateConfig

    model = tiny_model(tokenizer.vocab_size)
    bar = tokenizer.vocab.token(tokenizer.bar_id)
    sampling = SamplingConfig(constrained=False, token_bias=((bar, 1.0),), opening_boost=1.0, opening_bars=4)
    for prompt_bars, expected in ((1, 1.75), (2, 1.5), (4, 1.0), (9, 1.0)):
        decoder = Decoder(model, tokenizer, [tokenizer.bar_id] * prompt_bars, 2, sampling,
                          torch.Generator().manual_seed(0))
        bias = decoder.opening_token_bias()  # (B, V)
        assert bias.shape == (2, tokenizer.vocab_size)
        assert bias[:, tokenizer.bar_id].tolist() == [expected, expected] and bias.sum().item() == 2 * expected
    decoder.run(12)  # the count follows the bar lines drawn, per sample
    assert decoder.bars == [t.count(tokenizer.bar_id) for t in decoder.tokens]
    plain = Decoder(model, tokenizer, [tokenizer.bar_id], 1, SamplingConfig(constrained=False, opening_boost=1.0))
    assert not plain.opening and plain.bars is None  # no token bias: nothing to boost, no bar count
    defaults = SamplingConfig.from_defaults(GenerateConfig(opening_boost=0.5, opening_bars=8))
    assert (defaults.opening_boost, defaults.opening_bars) == (0.5, 8)
    with pytest.raises(ValueError, match="opening_boost must be finite and >= -1"):
        SamplingConfig(opening_boost=-2.0)
    with pytest.raises(ValueError, match="generate.opening_boost must be finite and >= -1"):
        GenerateConfig(opening_boost=float("nan")).validate()
    with pytest.raises(ValueError, match="generate.opening_bars must be >= 1"):
        GenerateConfig(opening_bars=0).validate()


def test_token_biases_sharing_a_value_are_described_together():
    from generation.request import grouped_biases

    pairs = (("Note_Duration_1080", 0.4), ("Note_Pitch", -0.15), ("Note_Duration_1200", 0.4))
    assert grouped_biases(pairs) == [("Note_Duration_1080, Note_Duration_1200", 0.4), ("Note_Pitch", -0.15)]
    assert grouped_biases(()) == []


def test_exempt_tokens_keep_their_whole_tail_under_the_nucleus():
    # type 1 (durations, say): its tail tokens 3 and 4 fall outside a 0.5 cut unless exempt
    probs = torch.tensor([[0.4, 0.2, 0.15, 0.15, 0.1, 0.0]], dtype=torch.float64)
    types = torch.tensor([0, 1, 1, 1, 1, 2])
    logits = probs.clamp_min(1e-30).log()
    top_p = torch.tensor([0.5, 2.0, 2.0, 2.0, 2.0, 0.5], dtype=torch.float64)  # type 1 exempt
    kept = sampling_probabilities(logits, top_p=top_p, temperature=1.0, types=types)
    assert torch.allclose(kept, probs)  # every token of the exempt type keeps its probability
    cut = sampling_probabilities(logits, top_p=0.5, temperature=1.0, types=types)
    assert cut[0, 3] == 0.0 and cut[0, 4] == 0.0
    # over the whole vocabulary: the exempt tokens stay, the others are cut as before
    top_p = torch.tensor([0.3, 0.3, 0.3, 2.0, 0.3, 0.3], dtype=torch.float64)
    kept = sampling_probabilities(logits, top_p=top_p, temperature=1.0)
    assert torch.allclose(kept, torch.tensor([[0.4, 0.0, 0.0, 0.15, 0.0, 0.0]], dtype=torch.float64) / 0.55)


def test_nucleus_exempt_names_tokens_and_comes_from_the_models_defaults(tokenizer):
    from generation.sampling import NEVER_CUT, nucleus_top_p
    from training.config import GenerateConfig

    assert nucleus_top_p(tokenizer, SamplingConfig(top_p=0.8)) == 0.8
    top_p = nucleus_top_p(tokenizer, SamplingConfig(top_p=0.8, nucleus_exempt=("Note_Duration",)))
    names = [tokenizer.vocab.token(i) for i in range(tokenizer.vocab_size)]
    assert top_p.tolist() == [NEVER_CUT if n.startswith("Note_Duration") else 0.8 for n in names]
    with pytest.raises(ValueError, match="nucleus_exempt: no token of the REMITokenizer format starts with 'Dur'"):
        nucleus_top_p(tokenizer, SamplingConfig(nucleus_exempt=("Dur",)))
    with pytest.raises(ValueError, match="nucleus_exempt needs"):
        SamplingConfig(nucleus_exempt=("",))
    with pytest.raises(ValueError, match="generate.nucleus_exempt needs"):
        GenerateConfig(nucleus_exempt=("",)).validate()
    defaults = GenerateConfig(nucleus_exempt=("Note_Duration",))
    assert SamplingConfig.from_defaults(defaults).nucleus_exempt == ("Note_Duration",)


def test_an_exempt_type_is_sampled_from_its_whole_distribution(tokenizer):
    model = tiny_model(tokenizer.vocab_size)
    with torch.no_grad():  # bar lines far likelier than the rest (logit +8): a 0.5 nucleus keeps them alone
        model.ln_f.weight.zero_()
        model.ln_f.bias.fill_(1.0)
        model.head.weight.zero_()
        model.head.weight[tokenizer.bar_id] = 0.5
    drawn = {}
    for exempt in ((), ("Note_Pitch",)):
        sampling = SamplingConfig(constrained=False, top_p=0.5, temperature=1.0, nucleus_exempt=exempt)
        result = generate(model, tokenizer, [tokenizer.bar_id], 200, sampling, torch.Generator().manual_seed(0))
        drawn[exempt] = {tokenizer.vocab.token(i) for i in result.tokens[1:]} - {"Bar_None"}
    assert drawn[()] == set()
    assert drawn[("Note_Pitch",)] and all(name.startswith("Note_Pitch") for name in drawn[("Note_Pitch",)])
