"""MusicPerformer: causality, recurrent = parallel, gating, features, gradients, errors."""

from __future__ import annotations

import copy

import pytest
import torch

from model import ModelConfig, MusicPerformer, PositionalNoise, count_parameters

from model.config import PE_KINDS as ALL_PE


@pytest.mark.parametrize("pe", ALL_PE)
def test_logits_shape_and_no_future_leak(make_model, tokens, pe):
    model = make_model(pe)
    noise = model.draw_positional_noise(tokens.shape[1])
    with torch.no_grad():
        logits = model(tokens, positional_noise=noise)[0]
        assert logits.shape == (*tokens.shape, model.cfg.vocab_size)
        for t in (0, 5, 22):
            changed = tokens.clone()
            changed[:, t + 1] = (changed[:, t + 1] + 1) % model.cfg.vocab_size
            other = model(changed, positional_noise=noise)[0]
            torch.testing.assert_close(other[:, : t + 1], logits[:, : t + 1], atol=1e-5, rtol=1e-5)
            assert (other[:, t + 1] - logits[:, t + 1]).abs().max() > 1e-3


@pytest.mark.parametrize("pe", ALL_PE)
# {} and {"gated": False}: the shared code's fast step path (SPEContext.step); share_pe=False: the filters'
# decay_horizon: the decayed state's chunked kernel in both modes
@pytest.mark.parametrize("options", [{}, {"gated": False}, {"gated": False, "share_pe": False},
                                     {"decay_horizon": 6}])
def test_recurrent_steps_equal_parallel_forward(make_model, tokens, pe, options):
    model = make_model(pe, **options)
    noise = model.draw_positional_noise(tokens.shape[1])
    with torch.no_grad():
        parallel = model(tokens, positional_noise=noise)[0]
        state = model.init_state(tokens.shape[0], positional_noise=noise)
        steps = []
        for t in range(tokens.shape[1]):
            logits, state = model.step(tokens[:, t], state)
            steps.append(logits)
    recurrent = torch.stack(steps, dim=1)  # (B, N, V)
    torch.testing.assert_close(recurrent, parallel, atol=1e-4, rtol=1e-4)
    assert state.position == tokens.shape[1]
    assert (parallel[:, 1:] - parallel[:, :-1]).abs().max() > 1e-2  # outputs do vary with position


@pytest.mark.parametrize("pe", ALL_PE)
@pytest.mark.parametrize("chunks", [(24,), (5, 1, 11, 7), (1,) * 3 + (21,)])
@pytest.mark.parametrize("decay_horizon", [0, 6])
def test_feeding_chunks_equals_steps(make_model, tokens, pe, chunks, decay_horizon):
    """A prompt read in chunks (`feed`) leaves the state N steps leave, and the same last logits."""
    model = make_model(pe, decay_horizon=decay_horizon)
    noise = model.draw_positional_noise(tokens.shape[1])
    with torch.no_grad():
        stepped = model.init_state(tokens.shape[0], positional_noise=noise)
        for t in range(tokens.shape[1]):
            step_logits, stepped = model.step(tokens[:, t], stepped)
        fed, start = model.init_state(tokens.shape[0], positional_noise=noise), 0
        for size in chunks:
            fed_logits, fed = model.feed(tokens[:, start:start + size], fed)
            start += size
    assert fed.position == stepped.position == tokens.shape[1]
    torch.testing.assert_close(fed_logits, step_logits, atol=1e-4, rtol=1e-4)
    for a, b in zip(fed.layers, stepped.layers):
        torch.testing.assert_close(a.offset, b.offset)
        torch.testing.assert_close(a.kv, b.kv, atol=1e-4, rtol=1e-4)


def test_recurrent_steps_stay_exact_when_the_key_maximum_grows(make_model, tokens):
    model = make_model("rope")
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight.mul_(6.0)  # log-features spanning more than float32's exp range
        reference = copy.deepcopy(model).double()(tokens)[0].float()  # float64: the global offset suffices
        state = model.init_state(tokens.shape[0])
        steps, first_offsets = [], None
        for t in range(tokens.shape[1]):
            logits, state = model.step(tokens[:, t], state)  # float32, running offset
            steps.append(logits)
            first_offsets = first_offsets if t else torch.stack([s.offset for s in state.layers])
    growth = torch.stack([s.offset for s in state.layers]) - first_offsets
    assert growth.max() > 30.0  # the state was rescaled by exp(-30) or less on the way
    torch.testing.assert_close(torch.stack(steps, dim=1), reference, atol=1e-3, rtol=1e-3)


def test_state_size_does_not_grow_with_position(make_model):
    model = make_model("conv_spe")
    state = model.init_state(3, positional_noise=model.draw_positional_noise(40))
    shapes = [tuple(s.kv.shape) for s in state.layers]
    with torch.no_grad():
        for _ in range(30):
            _, state = model.step(torch.zeros(3, dtype=torch.long), state)
    assert [tuple(s.kv.shape) for s in state.layers] == shapes == [(3, 2, 16, 9)] * 2


@pytest.mark.parametrize("pe", ["sine_spe", "conv_spe"])
def test_open_gates_make_attention_independent_of_position(make_model, pe):
    model = make_model(pe)
    repeated = torch.full((1, 20), 3)  # one repeated token: only positions tell the keys apart
    noise = model.draw_positional_noise(20)
    maps = {}
    for name, gate in (("open", 40.0), ("closed", -40.0)):
        with torch.no_grad():
            for f in model.pe.filters:
                f.gate.fill_(gate)
            maps[name] = model.attention_maps(repeated, layer=0, positional_noise=noise)[0]  # (H, N, N)
    lower = torch.ones(20, 20, dtype=torch.bool).tril()
    for head in maps["open"]:
        values = head[lower]
        torch.testing.assert_close(values, values[0].expand_as(values), rtol=1e-5, atol=0.0)
    closed = maps["closed"][0][lower]
    assert closed.std() / closed.mean() > 1e-2  # with the gate closed, position matters


@pytest.mark.parametrize("decay_horizon", [0, 6])
def test_attention_maps_are_the_normalised_attention_of_the_layer(make_model, tokens, decay_horizon):
    model = make_model("sine_spe", decay_horizon=decay_horizon)
    noise = model.draw_positional_noise(tokens.shape[1])
    with torch.no_grad():
        maps = model.attention_maps(tokens, layer=1, positional_noise=noise)  # (B, H, N, N)
        assert maps.shape == (2, 2, 24, 24) and maps.dtype == torch.float64
        assert (maps.triu(1) == 0).all() and (maps.tril() > 0).sum() == 2 * 2 * 24 * 25 // 2
        x, context = model._embed(tokens, noise, start=0)
        x = model.blocks[0](x, model.pe, context)
        block = model.blocks[1]
        normed = block.ln_attn(x)
        _, _, v = block.attn.inputs(normed, model.pe, context)  # (B, H, N, D)
        weights = (maps / maps.sum(-1, keepdim=True)).float()
        y = (weights @ v).transpose(1, 2).reshape(x.shape)
        torch.testing.assert_close(block.attn.proj(y), block.attn(normed, model.pe, context),
                                   atol=1e-5, rtol=1e-4)


def test_random_features_change_only_with_redraw(make_model, tokens):
    model = make_model("sine_spe")
    noise = model.draw_positional_noise(tokens.shape[1])
    before = [b.attn.features.projection.clone() for b in model.blocks]
    with torch.no_grad():
        first = model(tokens, positional_noise=noise)[0]
        torch.testing.assert_close(model(tokens, positional_noise=noise)[0], first, atol=0.0, rtol=0.0)
    model.train()
    model(tokens, positional_noise=noise)[0].sum().backward()  # training does not redraw features by itself
    model.eval()
    for block, projection in zip(model.blocks, before):
        assert torch.equal(block.attn.features.projection, projection)
    model.redraw_features(torch.Generator().manual_seed(5))
    with torch.no_grad():
        assert (model(tokens, positional_noise=noise)[0] - first).abs().max() > 1e-3
    for block, projection in zip(model.blocks, before):
        assert not torch.equal(block.attn.features.projection, projection)
    assert "blocks.0.attn.features.projection" in model.state_dict()


@pytest.mark.parametrize("pe", ["sine_spe", "conv_spe"])
def test_spe_draws_fresh_noise_per_forward_and_a_fixed_noise_is_reproducible(make_model, tokens, pe):
    model = make_model(pe)
    with torch.no_grad():
        assert (model(tokens)[0] - model(tokens)[0]).abs().max() > 1e-4
        noise = model.draw_positional_noise(tokens.shape[1])
        torch.testing.assert_close(model(tokens, positional_noise=noise)[0],
                                   model(tokens, positional_noise=noise)[0], atol=0.0, rtol=0.0)
    same = model.draw_positional_noise(30, torch.Generator().manual_seed(2))
    again = model.draw_positional_noise(30, torch.Generator().manual_seed(2))
    assert all(torch.equal(a, b) for a, b in zip(same.code_noises, again.code_noises))
    assert all(torch.equal(a, b) for a, b in zip(same.gate_noises, again.gate_noises))


@pytest.mark.parametrize("pe", ALL_PE)
def test_backward_reaches_every_parameter(make_model, tokens, pe):
    model = make_model(pe, dropout=0.1).train()
    _, loss = model(tokens, tokens)
    loss.backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None, name
        assert torch.isfinite(parameter.grad).all(), name
        assert parameter.grad.abs().sum() > 0, name


def test_spe_sharing_and_accessors(make_model):
    shared = make_model("sine_spe")
    assert shared.spe is shared.pe.spes[0] and len(shared.pe.spes) == 1
    noise = shared.draw_positional_noise(10)
    assert isinstance(noise, PositionalNoise) and len(noise.code_noises) == 1 and len(noise.gate_noises) == 2
    gates = shared.gates()
    assert len(gates) == 2 and all(g.shape == (2, 8) and ((g > 0) & (g < 1)).all() for g in gates)
    separate = make_model("conv_spe", share_pe=False, gated=False)
    assert separate.spe is None and len(separate.pe.spes) == 2 and separate.gates() is None
    assert len(separate.draw_positional_noise(10).code_noises) == 2
    for pe in ("ape", "learned_ape", "rope", "none"):
        model = make_model(pe)
        assert model.spe is None and model.gates() is None and model.draw_positional_noise(10) is None


def test_parameter_count_of_the_paper_model():
    model = MusicPerformer(ModelConfig(vocab_size=340, attention="torch"))
    expected = sum(p.numel() for p in model.parameters())
    assert count_parameters(model) == model.num_parameters() == expected
    assert 75_000_000 < expected < 85_000_000  # the paper's "~80 M"
    model.embedding.weight.requires_grad_(False)
    assert model.num_parameters() == expected - 340 * 512
    assert model.num_parameters(trainable_only=False) == expected


@pytest.mark.parametrize("changes,match", [
    ({"pe": "alibi"}, "pe must be one of"),
    ({"attention": "flash"}, "attention must be one of"),
    ({"d_model": 18, "n_head": 4}, "divisible"),
    ({"dropout": 1.0}, "dropout"),
    ({"n_layer": 0}, "n_layer"),
    ({"feature_dims": 2.5}, "feature_dims"),
    ({"vocab_size": True}, "vocab_size"),
    ({"pe": "rope", "d_model": 6, "n_head": 2}, "even head size"),
    ({"gated": 1}, "gated"),
    ({"code_dtype": "bfloat16"}, "code_dtype must be one of"),
])
def test_config_errors(make_config, changes, match):
    with pytest.raises(ValueError, match=match):
        make_config(**changes)


def test_config_round_trip(make_config):
    cfg = make_config("conv_spe", share_pe=False)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown ModelConfig fields"):
        ModelConfig.from_dict({**cfg.to_dict(), "n_embd": 3})


def test_input_errors(make_model, tokens):
    model = make_model("conv_spe")
    with pytest.raises(ValueError, match="shape"):
        model(tokens[0])
    with pytest.raises(ValueError, match="integer"):
        model(tokens.float())
    with pytest.raises(ValueError, match="token ids"):
        model(tokens + model.cfg.vocab_size)
    with pytest.raises(ValueError, match="outside"):
        model(tokens, positional_noise=model.draw_positional_noise(10))  # conv noise for 10 positions only
    with pytest.raises(ValueError, match="another SPE configuration"):
        make_model("sine_spe", gated=False)(tokens, positional_noise=model.draw_positional_noise(24))
    with pytest.raises(ValueError, match="needs a PositionalNoise"):
        model(tokens, positional_noise=torch.zeros(3))
    with pytest.raises(ValueError, match="takes no positional noise"):
        make_model("ape")(tokens, positional_noise=model.draw_positional_noise(24))
    with pytest.raises(ValueError, match="max_len"):
        make_model("learned_ape", max_len=16)(tokens)
    with pytest.raises(ValueError, match="layer"):
        model.attention_maps(tokens, layer=2)
    state = model.init_state(2)
    with pytest.raises(ValueError, match="step expects"):
        model.step(tokens[:, :2], state)
    with pytest.raises(ValueError, match="feed expects"):
        model.feed(tokens[0], state)
    with pytest.raises(ValueError, match="batch_size"):
        model.init_state(0)


@pytest.mark.parametrize("pe, overrides", [(pe, {}) for pe in ALL_PE]
                         + [("sine_spe", {"share_pe": False}), ("conv_spe", {"gated": False})])
def test_param_groups_decay_weight_matrices_only(make_model, pe, overrides):
    """The split the trainer used to make by name: decay on parameters of 2 dims or more outside the
    positional encoding (`pe.`), none on the others; frozen parameters in neither group."""
    model = make_model(pe, **overrides)
    model.ln_f.weight.requires_grad_(False)
    by_name = {"decay": [], "no_decay": []}
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
            matrix = parameter.dim() >= 2 and not name.startswith("pe.")
            by_name["decay" if matrix else "no_decay"].append(parameter)
    decay, no_decay = model.param_groups(0.1)
    assert (decay["weight_decay"], no_decay["weight_decay"]) == (0.1, 0.0)
    assert [id(p) for p in decay["params"]] == [id(p) for p in by_name["decay"]]
    assert [id(p) for p in no_decay["params"]] == [id(p) for p in by_name["no_decay"]]
    decayed = {id(p) for p in decay["params"]}
    assert {id(model.embedding.weight), id(model.head.weight)} <= decayed
    assert not decayed & {id(p) for p in model.pe.parameters()}
