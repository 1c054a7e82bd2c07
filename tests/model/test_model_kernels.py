"""Causal linear-attention kernels: agreement with the quadratic definition and with each other."""

from __future__ import annotations

import logging
import sys

import pytest
import torch

from model import ModelConfig, MusicPerformer, causal_dot_product_torch, resolve_kernel
from model.kernels import decay_rates, decayed_causal_product


def quadratic(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The definition: masked (Q K^T) V, (B, H, N, M) x (B, H, N, M) x (B, H, N, E) -> (B, H, N, E)."""
    return (q @ k.transpose(-1, -2)).tril() @ v


def random_inputs(length: int, seed: int = 0, dtype: torch.dtype = torch.float32):
    generator = torch.Generator().manual_seed(seed)
    q = torch.rand(2, 3, length, 6, generator=generator, dtype=dtype)
    k = torch.rand(2, 3, length, 6, generator=generator, dtype=dtype)
    v = torch.randn(2, 3, length, 5, generator=generator, dtype=dtype)
    return q, k, v


@pytest.mark.parametrize("length,chunk", [(1, 4), (7, 4), (16, 4), (33, 8), (50, 64)])
def test_torch_kernel_matches_quadratic_definition(length, chunk):
    q, k, v = (t.requires_grad_() for t in random_inputs(length, dtype=torch.float64))
    out = causal_dot_product_torch(q, k, v, chunk=chunk)
    expected = quadratic(q, k, v)
    torch.testing.assert_close(out, expected)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    expected_grads = torch.autograd.grad(expected.square().sum(), (q, k, v))
    for grad, expected_grad in zip(grads, expected_grads):
        torch.testing.assert_close(grad, expected_grad)


def decayed_quadratic(q, k, v, log_decay, past):
    """The definition of the decayed product: out and final state, from explicit powers of gamma."""
    N = q.shape[2]
    n = torch.arange(N, dtype=q.dtype)
    gamma = log_decay.to(q.dtype).exp().view(1, -1, 1, 1)  # (1, H, 1, 1)
    lags = (n[:, None] - n[None, :]).clamp_min(0)  # (N, N)
    weights = (q @ k.transpose(-1, -2)).tril() * gamma ** lags  # (B, H, N, N)
    out = weights @ v + (q * gamma ** (n[:, None] + 1)) @ past
    state = gamma ** N * past + (k * gamma ** (N - 1 - n)[:, None]).transpose(-1, -2) @ v
    return out, state


@pytest.mark.parametrize("length,chunk", [(1, 4), (7, 4), (16, 4), (33, 8), (50, 64)])
@pytest.mark.parametrize("with_past", [False, True])
def test_decayed_kernel_matches_its_definition(length, chunk, with_past):
    q, k, v = (t.requires_grad_() for t in random_inputs(length, dtype=torch.float64))
    log_decay = torch.log(torch.tensor([0.5, 0.9, 0.99], dtype=torch.float64))
    past = torch.rand(2, 3, 6, 5, dtype=torch.float64) * with_past  # (B, H, M, E); zeros without
    out, state = decayed_causal_product(q, k, v, log_decay, past if with_past else None, chunk=chunk)
    expected, expected_state = decayed_quadratic(q, k, v, log_decay, past)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(state, expected_state)
    grads = torch.autograd.grad(out.square().sum() + state.sum(), (q, k, v))
    expected_grads = torch.autograd.grad(expected.square().sum() + expected_state.sum(), (q, k, v))
    for grad, expected_grad in zip(grads, expected_grads):
        torch.testing.assert_close(grad, expected_grad)


def test_decay_horizons_are_geometric_from_32_tokens_to_the_horizon():
    horizons = 1.0 / (1.0 - decay_rates(8, 512).double().exp())  # (H,)
    torch.testing.assert_close(horizons[[0, -1]], torch.tensor([32.0, 512.0], dtype=torch.float64),
                               rtol=1e-3, atol=0.0)
    ratios = horizons[1:] / horizons[:-1]
    torch.testing.assert_close(ratios, ratios[:1].expand_as(ratios), rtol=1e-3, atol=0.0)
    assert (decay_rates(2, 8).exp() < 1).all()  # a horizon below 32 tokens: every head at most that


def test_a_decayed_model_forgets_the_far_past():
    cfg = dict(vocab_size=11, n_layer=1, n_head=2, d_model=8, d_ff=16, dropout=0.0, pe="none",
               num_realizations=4, num_sines=2, kernel_size=3, feature_dims=8, attention="torch", max_len=64)
    torch.manual_seed(0)
    model = MusicPerformer(ModelConfig(**cfg, decay_horizon=4)).eval()
    tokens = torch.randint(0, 11, (1, 200))
    changed = tokens.clone()
    changed[0, 0] = (tokens[0, 0] + 1) % 11
    with torch.no_grad():
        a, b = model(tokens)[0], model(changed)[0]
    assert (a[0, 1] - b[0, 1]).abs().max() > 1e-4  # the next position sees the change
    torch.testing.assert_close(a[0, -1], b[0, -1], atol=1e-6, rtol=0.0)  # 200 tokens later: forgotten
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="decay_horizon"):
            ModelConfig(**cfg, decay_horizon=bad)


def test_ft_and_torch_kernels_agree():
    pytest.importorskip("fast_transformers.causal_product")
    name, ft = resolve_kernel("ft")
    assert name == "ft"
    q, k, v = (t.requires_grad_() for t in random_inputs(100, seed=3))
    out_ft = ft(q, k, v)
    out_torch = causal_dot_product_torch(q, k, v)
    torch.testing.assert_close(out_ft, out_torch, atol=1e-4, rtol=1e-4)
    weights = torch.randn_like(out_ft)
    grads_ft = torch.autograd.grad((out_ft * weights).sum(), (q, k, v))
    grads_torch = torch.autograd.grad((out_torch * weights).sum(), (q, k, v))
    for grad_ft, grad_torch in zip(grads_ft, grads_torch):
        torch.testing.assert_close(grad_ft, grad_torch, atol=1e-4, rtol=1e-4)


def test_models_with_ft_and_torch_kernels_agree(make_model, tokens):
    pytest.importorskip("fast_transformers.causal_product")
    model_ft = make_model("sine_spe", attention="ft")
    model_torch = make_model("sine_spe", attention="torch")
    assert model_ft.attention_kernel == "ft"
    noise = model_ft.draw_positional_noise(tokens.shape[1])
    with torch.no_grad():
        torch.testing.assert_close(model_ft(tokens, positional_noise=noise)[0],
                                   model_torch(tokens, positional_noise=noise)[0],
                                   atol=1e-4, rtol=1e-4)


def test_unknown_kernel_is_a_value_error():
    with pytest.raises(ValueError, match="unknown attention kernel"):
        resolve_kernel("flash")


def test_import_failure_falls_back_to_torch(monkeypatch, caplog, tokens):
    # a None entry in sys.modules makes `import` raise ImportError
    monkeypatch.setitem(sys.modules, "fast_transformers", None)
    monkeypatch.setitem(sys.modules, "fast_transformers.causal_product", None)
    with caplog.at_level(logging.WARNING, logger="model.kernels"):
        name, kernel = resolve_kernel("ft")
    assert name == "torch" and kernel is causal_dot_product_torch
    assert "fast_transformers cannot be imported" in caplog.text

    cfg = ModelConfig(vocab_size=23, n_layer=1, n_head=2, d_model=8, d_ff=16, attention="ft",
                      num_realizations=4, feature_dims=8)
    model = MusicPerformer(cfg).eval()
    assert model.attention_kernel == "torch" and cfg.attention == "ft"
    logits, _ = model(tokens)
    assert logits.shape == (*tokens.shape, 23) and torch.isfinite(logits).all()
