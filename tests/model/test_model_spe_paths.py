"""The ways a MusicPerformer can apply its SPE code give the same model: the shared code with and
without the compiled kernels, and sineSPE's factored code, equal plain autograd on the (qbar, kbar) tuple
(logits and every gradient), and
generation from cached code blocks equals the parallel forward across block boundaries."""

from __future__ import annotations

from contextlib import nullcontext

import pytest
import torch

from model import positional
from model.positional import CODE_BLOCK
from spe import SharedCode
from spe import kernels
from spe.factorised import FactorisedCode

# the stored code with the kernels where they serve ("stored") and with spe's plain PyTorch path
# ("plain": `spe.kernels.plain()`)
STORED = ["plain"] + (["stored"] if kernels.available() else [])
# (pe, path): every stored path for both generators, the factored code for sineSPE (convSPE has
# none: tested to raise below)
PE_PATHS = [(pe, path) for pe in ("sine_spe", "conv_spe") for path in STORED] + [("sine_spe", "factorised")]


def use_path(model, path):
    """Set the model's contraction for `path`; returns the context to run it in."""
    model.pe.contraction = "stored" if path == "plain" else path
    return kernels.plain() if path == "plain" else nullcontext()


@pytest.mark.parametrize("pe, path", PE_PATHS)
@pytest.mark.parametrize("options", [{}, {"gated": False}, {"share_pe": False}])
def test_code_paths_equal_autograd_path(make_model, tokens, path, pe, options):
    model = make_model(pe, **options).double().train()
    noise = model.draw_positional_noise(tokens.shape[1])
    noise.code_noises = [n.double() for n in noise.code_noises]
    if noise.gate_noises is not None:
        noise.gate_noises = [n.double() for n in noise.gate_noises]
    results = {}
    for mode in ("autograd", path):
        with use_path(model, mode):
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
@pytest.mark.parametrize("path", STORED)  # a step's mix: one compiled call per code, or PyTorch ops
def test_steps_across_code_blocks_equal_parallel_forward(make_model, pe, path):
    model = make_model(pe, max_len=2 * CODE_BLOCK + 8)
    tokens = torch.randint(0, model.cfg.vocab_size, (2, CODE_BLOCK + 9),
                           generator=torch.Generator().manual_seed(4))
    noise = model.draw_positional_noise(tokens.shape[1])
    with torch.no_grad(), use_path(model, path):
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


@pytest.mark.parametrize("pe, batch, grad, length, expected", [
    ("sine_spe", 1, True, 16, FactorisedCode),                        # one sequence
    ("sine_spe", 2, True, 16, SharedCode),                            # rows share the stored code
    ("sine_spe", 1, False, CODE_BLOCK, FactorisedCode),               # a long forward without gradients
    ("conv_spe", 1, True, 16, SharedCode),                            # no factored form
])
def test_default_contraction_choice(make_model, pe, batch, grad, length, expected):
    model = make_model(pe, max_len=2 * CODE_BLOCK)
    noise = model.draw_positional_noise(length)
    with torch.set_grad_enabled(grad):
        assert all(isinstance(code, expected) for code in model.pe.context(noise, 0, length, batch).codes)
        model.pe.contraction = "stored"
        assert isinstance(model.pe.context(noise, 0, length, batch=1).codes[0], SharedCode)


@pytest.mark.parametrize("pe", ["sine_spe", "conv_spe"])
def test_generation_step_context(make_model, pe):
    """A generation step takes the compiled fast path (SPEContext.step: the cached block's code at the
    position) when the kernels are there; spe's plain path, and gates of another dtype than the
    code, take the filters' checked path."""
    model = make_model(pe, max_len=2 * CODE_BLOCK)
    noise = model.draw_positional_noise(2 * CODE_BLOCK)
    with torch.no_grad():
        context = model.pe.context(noise, 130, 1)
        full_q, full_k = model.pe.spes[0].codes(noise.code_noises[0], 0, 2 * CODE_BLOCK)
        if kernels.available():
            assert context.step is not None
            torch.testing.assert_close(context.step.qbar, full_q[:, 130], atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(context.step.kbar, full_k[:, 130], atol=1e-5, rtol=1e-4)
        else:
            assert context.step is None
        with kernels.plain():
            assert model.pe.context(noise, 130, 1).step is None
        model.pe.filters[1].double()
        assert model.pe.context(noise, 130, 1).step is None


def test_large_codes_are_factorised_by_default(make_model, monkeypatch):
    model = make_model("sine_spe")
    noise = model.draw_positional_noise(16)
    code_bytes = 16 * model.cfg.d_model * model.cfg.num_realizations * 4   # one float32 code
    monkeypatch.setattr(positional, "FACTORISED_CODE_BYTES", code_bytes - 1)
    assert isinstance(model.pe.context(noise, 0, 16, batch=4).codes[0], FactorisedCode)
    monkeypatch.setattr(positional, "FACTORISED_CODE_BYTES", code_bytes)
    assert isinstance(model.pe.context(noise, 0, 16, batch=4).codes[0], SharedCode)


@pytest.mark.parametrize("pe, path", PE_PATHS)
def test_code_paths_run_under_bf16_autocast(make_model, tokens, pe, path):
    """Training on CUDA autocasts to bf16 by default: every path runs under autocast (CPU's here),
    gives finite gradients and stays near its float32 result."""
    model = make_model(pe).train()
    noise = model.draw_positional_noise(tokens.shape[1])
    with use_path(model, path):
        with torch.no_grad():
            reference = model(tokens, positional_noise=noise)[0]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(tokens, positional_noise=noise)[0]
        logits.float().square().mean().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert (logits.float() - reference).abs().max() <= 0.05 * reference.abs().max()


@pytest.mark.skipif(not kernels.available(), reason="the factored convSPE gradient needs spe_kernels")
def test_conv_noise_from_its_seed_gives_the_same_training_step(make_model, tokens, monkeypatch):
    """conv_spe draws each code noise from a seed (PositionalNoise.code_seeds): a pass over the whole
    noise then filters its spectra drawn from the seed (`ConvSPE.seeded_code`), forward and backward,
    without the noise. Gradients equal those of the same noise kept (no seeds); a noise changed in
    place is no longer its seed's; the model's own draw is never formed."""
    from dataclasses import replace

    from spe import ConvSPE

    model = make_model("conv_spe").double().train()
    noise = model.draw_positional_noise(tokens.shape[1])
    assert noise.seed(0) is not None
    grads = []
    for positional_noise in (noise, replace(noise, code_seeds=None)):
        model.zero_grad(set_to_none=True)
        logits = model(tokens, positional_noise=positional_noise)[0]
        (logits.square().mean() + logits[:, -1].sum()).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for name, grad in grads[0].items():
        torch.testing.assert_close(grad, grads[1][name], msg=name)
    noise.code_noises[0].mul_(1.0)
    assert noise.seed(0) is None
    assert model.draw_positional_noise(5).seed(0) != model.draw_positional_noise(5).seed(0)
    assert make_model("sine_spe").draw_positional_noise(5).seed(0) is None

    def forming(*args, **kwargs):
        raise AssertionError("the model formed the noise of its own draw")

    monkeypatch.setattr(ConvSPE, "noise_from_seed", forming)
    model(tokens, tokens)[1].backward()                                 # a training step
    with torch.no_grad():                                               # an evaluation pass (a long one:
        model.eval()(tokens.repeat(1, 6))                               # short ones read cached blocks)


def test_unformed_noise_is_formed_from_its_seed_when_needed(make_model):
    """A model's own draw keeps conv_spe's noise as its seed; what needs the noise (here extending
    it) forms it from the seed: the noise `draw_positional_noise` gives for that seed."""
    model = make_model("conv_spe")
    lazy = model.pe.draw_noise(12, torch.Generator().manual_seed(3), formed=False)
    eager = model.pe.draw_noise(12, torch.Generator().manual_seed(3))
    assert lazy.code_noises == [None] and lazy.seed(0) == eager.seed(0)
    longer = model.extend_positional_noise(lazy, 20)
    torch.testing.assert_close(lazy.code_noises[0], eager.code_noises[0], atol=0, rtol=0)
    assert lazy.seed(0) == eager.seed(0)                                # formed, unchanged: still its seed's
    torch.testing.assert_close(longer.code_noises[0][..., :eager.code_noises[0].shape[-1]], eager.code_noises[0])


@pytest.mark.skipif(not kernels.available(), reason="float16 codes need the compiled spe_kernels")
@pytest.mark.parametrize("pe", ["sine_spe", "conv_spe"])
def test_float16_code_storage_changes_a_training_step_by_its_rounding_only(make_model, tokens, pe):
    """code_dtype float16 (the default) against float32: the stored code is half precision, the logits
    and every gradient of a step equal float32 storage's to the rounding's size."""
    results = {}
    for code_dtype in ("float16", "float32"):
        model = make_model(pe, code_dtype=code_dtype, num_realizations=64)  # R 64: the vector paths
        noise = model.draw_positional_noise(tokens.shape[1], torch.Generator().manual_seed(3))
        context = model.pe.context(noise, 0, tokens.shape[1], batch=tokens.shape[0])
        assert context.codes[0].codes[0].dtype == getattr(torch, code_dtype)
        logits = model(tokens, positional_noise=noise)[0]
        (logits.square().mean() + logits[:, -1].sum()).backward()
        results[code_dtype] = [logits.detach()] + [p.grad for p in model.parameters()]
    for got, want in zip(results["float16"], results["float32"]):
        assert (got - want).abs().max() <= 3e-3 * want.abs().max() + 1e-6
