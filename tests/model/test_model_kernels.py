"""Causal linear-attention kernels: agreement with the quadratic definition and with each other."""

from __future__ import annotations

import logging
import sys

import pytest
import torch

from model import ModelConfig, MusicPerformer, causal_dot_product_torch, resolve_kernel


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
