"""The ways a MusicPerformer can apply its SPE code give the same model: the shared code with each
contraction backend, and sineSPE's factored code, equal plain autograd on the (qbar, kbar) tuple
(logits and every gradient), and
generation from cached code blocks equals the parallel forward across block boundaries."""

from __future__ import annotations

import pytest
import torch

from model.positional import CODE_BLOCK
from spe.contract import compiled_available

PATHS = ["torch", "factorised"] + (["compiled"] if compiled_available() else [])


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("pe", ["sine_spe", "conv_spe"])
@pytest.mark.parametrize("options", [{}, {"gated": False}, {"share_pe": False}])
def test_code_paths_equal_autograd_path(make_model, tokens, path, pe, options):
    if path == "factorised" and pe == "conv_spe":
        pytest.skip("a convSPE code has no factored form (tested to raise below)")
    model = make_model(pe, **options).double().train()
    noise = model.draw_positional_noise(tokens.shape[1])
    noise.code_noises = [n.double() for n in noise.code_noises]
    if noise.gate_noises is not None:
        noise.gate_noises = [n.double() for n in noise.gate_noises]
    results = {}
    for mode in ("autograd", path):
        model.pe.contraction = mode
        model.zero_grad(set_to_none=True)
        logits = model(tokens, positional_noise=noise)[0]
        (logits.square().mean() + logits[:, -1].sum()).backward()
        results[mode] = (logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()})
    torch.testing.assert_close(results[path][0], results["autograd"][0])
    reference = results["autograd"][1]
    assert set(results[path][1]) == set(reference)
    for name, grad in results[path][1].items():
        torch.testing.assert_close(grad, reference[name], msg=name)


def test_factorised_contraction_needs_sine_spe(make_model, tokens):
    model = make_model("conv_spe")
    model.pe.contraction = "factorised"
    with pytest.raises(ValueError, match="sineSPE"):
        model(tokens)


@pytest.mark.parametrize("pe", ["sine_spe", "conv_spe"])
def test_steps_across_code_blocks_equal_parallel_forward(make_model, pe):
    model = make_model(pe, max_len=2 * CODE_BLOCK + 8)
    tokens = torch.randint(0, model.cfg.vocab_size, (2, CODE_BLOCK + 9),
                           generator=torch.Generator().manual_seed(4))
    noise = model.draw_positional_noise(tokens.shape[1])
    with torch.no_grad():
        parallel = model(tokens, positional_noise=noise)[0]
        state = model.init_state(2, positional_noise=noise)
        steps = []
        for t in range(tokens.shape[1]):
            logits, state = model.step(tokens[:, t], state)
            steps.append(logits)
    assert set(noise.blocks) == {0}
    torch.testing.assert_close(torch.stack(steps, dim=1), parallel, atol=1e-4, rtol=1e-4)


def test_code_block_cache_follows_parameter_changes(make_model, tokens):
    model = make_model("sine_spe")
    noise = model.draw_positional_noise(8)

    def last_logits():  # position 0 attends to itself only: look at position 3
        state = model.init_state(2, noise)
        for t in range(4):
            logits, state = model.step(tokens[:, t], state)
        return logits

    with torch.no_grad():
        first = last_logits()
        model.spe.gains.add_(0.5)
        changed = last_logits()
        model.spe.gains.sub_(0.5)
        back = last_logits()
    assert (first - changed).abs().max() > 1e-4
    torch.testing.assert_close(back, first)
