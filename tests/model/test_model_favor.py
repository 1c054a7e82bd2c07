"""FAVOR+ features: unbiased softmax-kernel estimate, orthogonality, stabilisation."""

from __future__ import annotations

import torch

from model.favor import FavorFeatures, orthogonal_gaussian


def test_projection_rows_are_orthogonal_within_blocks():
    w = orthogonal_gaussian(10, 4, torch.Generator().manual_seed(0))  # blocks of 4, 4, 2 rows
    assert w.shape == (10, 4)
    for block in (w[0:4], w[4:8], w[8:10]):
        gram = block @ block.T
        off_diagonal = gram - torch.diag(torch.diagonal(gram))
        assert off_diagonal.abs().max() < 1e-5


def test_features_estimate_the_softmax_kernel():
    torch.manual_seed(0)
    features = FavorFeatures(in_dims=4, num_features=200000)
    q, k = 0.3 * torch.randn(6, 4), 0.3 * torch.randn(6, 4)
    estimate = features.exact(q) @ features.exact(k).T  # (6, 6)
    exact = torch.exp(q.double() @ k.double().T)
    torch.testing.assert_close(estimate, exact, rtol=0.05, atol=0.0)


def test_stabilised_features_are_the_exact_ones_up_to_row_and_global_constants():
    torch.manual_seed(1)
    features = FavorFeatures(in_dims=8, num_features=32)
    x = 6.0 * torch.randn(2, 3, 10, 8)  # exp(|x|^2 / 2) alone would overflow float32
    exact = features.exact(x)  # (B, H, N, M), float64
    queries = features.queries(x)
    keys, offset = features.keys(x)
    assert torch.isfinite(queries).all() and torch.isfinite(keys).all()
    assert torch.allclose(queries.amax(-1), torch.ones(2, 3, 10))
    assert torch.allclose(keys.amax(dim=(-2, -1)), torch.ones(2, 3))
    torch.testing.assert_close(keys.double(), exact * torch.exp(-offset.double()), rtol=1e-4, atol=1e-7)
    row_max = exact.amax(dim=-1, keepdim=True)  # each query row divided by its own constant
    torch.testing.assert_close(queries.double(), exact / row_max, rtol=1e-4, atol=1e-7)


def test_running_key_offset_never_decreases():
    features = FavorFeatures(in_dims=4, num_features=8)
    x = torch.randn(1, 1, 1, 4)
    _, first = features.keys(x)
    _, kept = features.keys(0.01 * x, offset=first + 100.0)
    assert torch.equal(kept, first + 100.0)


def test_redraw_replaces_the_buffer_in_place():
    features = FavorFeatures(in_dims=4, num_features=8)
    buffer = features.projection
    before = buffer.clone()
    features.redraw(torch.Generator().manual_seed(3))
    assert features.projection is buffer and not torch.equal(buffer, before)
