"""SPEFilter: agreement with the explicit gated-code formula, gate limits, effective template,
gradients, what autograd keeps, and errors."""

import math

import pytest
import torch

from spe import ConvSPE, SineSPE, SPEFilter
from spe.filter import _MixCode

B, N, H, D, R = 3, 9, 2, 4, 16


def explicit_filter(filt, queries, keys, code, gate_noise):
    """The filter written naively: build the gated code, multiply, sum over d."""
    qbar, kbar = (c[:, :queries.shape[1]] for c in code)                # (1, N, H, D, R)
    if filt.gated:
        delta = torch.sigmoid(filt.gate)[..., None]                     # (H, D, 1)
        qbar = torch.sqrt(1 - delta) * qbar + torch.sqrt(delta) * gate_noise
        kbar = torch.sqrt(1 - delta) * kbar + torch.sqrt(delta) * gate_noise
    return (qbar * queries[..., None]).sum(-2), (kbar * keys[..., None]).sum(-2)


@pytest.mark.parametrize("gated", [True, False])
def test_filter_matches_explicit_formula_and_crops(gated):
    torch.manual_seed(0)
    pe, filt = SineSPE(H, D, R, 2), SPEFilter(gated, (H, D))
    code = pe((B, N + 5))                                               # longer than the inputs
    queries, keys = torch.randn(B, N, H, D), torch.randn(B, N, H, D)
    eps = filt.draw_gate_noise(R)
    assert eps.shape == (H, D, R)
    qhat, khat = filt(queries, keys, code, gate_noise=eps)
    assert qhat.shape == khat.shape == (B, N, H, R)
    expected_q, expected_k = explicit_filter(filt, queries, keys, code, eps)
    torch.testing.assert_close(qhat, expected_q, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(khat, expected_k, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("gated", [True, False])
def test_mix_code_gradients(gated):
    torch.manual_seed(1)
    double = dict(dtype=torch.float64, requires_grad=True)
    x, code = torch.randn(2, 5, H, D, **double), torch.randn(5, H, D, 3, **double)
    extra = (torch.rand(H, D, **double), torch.randn(H, D, 3, **double), torch.rand(H, D, **double))
    inputs = (x, code, *extra) if gated else (x, code, None, None, None)
    assert torch.autograd.gradcheck(_MixCode.apply, inputs)


def test_open_gate_gives_position_free_attention():
    torch.manual_seed(2)
    r = 20000
    filt = SPEFilter(True, (H, D))
    with torch.no_grad():
        filt.gate.fill_(30.0)                                           # delta = 1 in float32
    code = SineSPE(H, D, r, 3)((1, N))
    queries, keys = torch.randn(1, N, H, D), torch.randn(1, N, H, D)
    eps = filt.draw_gate_noise(r, generator=torch.Generator().manual_seed(3))
    qhat, khat = filt(queries, keys, code, gate_noise=eps)
    # the positional code no longer enters: the same formula with the noise alone
    torch.testing.assert_close(qhat, torch.einsum("bnhd,hdr->bnhr", queries, eps), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(khat, torch.einsum("bnhd,hdr->bnhr", keys, eps), atol=1e-4, rtol=1e-4)
    logits = torch.einsum("bmhr,bnhr->bhmn", qhat, khat) / math.sqrt(r)
    plain = torch.einsum("bmhd,bnhd->bhmn", queries, keys) / math.sqrt(D)  # softmax-attention logits
    assert (logits - plain).abs().max() < 0.06 * plain.abs().max()


def test_closed_gate_gives_pure_spe():
    torch.manual_seed(4)
    gated, plain = SPEFilter(True, (H, D)), SPEFilter(False, (H, D))
    with torch.no_grad():
        gated.gate.fill_(-30.0)                                         # delta ~ 1e-13
    code = ConvSPE(1, H, D, R, 3)((B, N))
    queries, keys = torch.randn(B, N, H, D), torch.randn(B, N, H, D)
    for got, want in zip(gated(queries, keys, code), plain(queries, keys, code)):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_effective_template_is_the_gated_kernel():
    torch.manual_seed(5)
    r, length = 8192, 6
    pe, filt = SineSPE(H, D, r, 2), SPEFilter(True, (H, D))
    with torch.no_grad():
        code = pe((1, length))
        eye = torch.eye(D).expand(length, H, D, D)                      # query/key d' = one-hot in d
        ones = eye.permute(2, 0, 1, 3).reshape(D, length, H, D)         # batch of D one-hot inputs
        qhat, khat = filt(ones, ones, code)                             # (D, L, H, R)
        empirical = torch.einsum("dmhr,dnhr->hdmn", qhat, khat) / math.sqrt(r / D)
        expected = filt.effective_template(pe.expected_template(length))
    assert ((empirical - expected) ** 2).mean() < 0.01 * (expected ** 2).mean()
    plain = SPEFilter(False, (H, D))
    template = pe.expected_template(length)
    assert plain.effective_template(template) is template


@pytest.mark.parametrize("make_pe", [lambda: SineSPE(H, D, R, 2), lambda: ConvSPE(1, H, D, R, 3)])
def test_gradients_reach_spe_parameters_and_gate(make_pe):
    torch.manual_seed(6)
    pe, filt = make_pe(), SPEFilter(True, pe_shape := (H, D))
    assert pe.code_shape == pe_shape
    queries = torch.randn(B, N, H, D, requires_grad=True)
    keys = torch.randn(B, N, H, D, requires_grad=True)
    qhat, khat = filt(queries, keys, pe((B, N)))
    torch.einsum("bmhr,bnhr->", qhat, khat).backward()
    for name, param in [*pe.named_parameters(), *filt.named_parameters(), ("queries", queries), ("keys", keys)]:
        assert param.grad is not None and torch.isfinite(param.grad).all(), name
        assert param.grad.abs().sum() > 0, name


def test_filter_keeps_no_copy_of_the_code_for_backward():
    torch.manual_seed(7)
    pe, filt = SineSPE(H, D, R, 2), SPEFilter(True, (H, D))
    qbar, kbar = pe((B, N))
    queries = torch.randn(B, N, H, D, requires_grad=True)
    keys = torch.randn(B, N, H, D, requires_grad=True)
    saved = []

    def pack(tensor):
        saved.append(tensor)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        filt(queries, keys, (qbar, kbar))
    storages = {qbar.untyped_storage().data_ptr(), kbar.untyped_storage().data_ptr()}
    copies = [t for t in saved if t.untyped_storage().data_ptr() not in storages]
    assert sum(t.numel() for t in copies) <= 2 * queries.numel() + 4 * H * D * R


def test_filter_under_autocast_backward():
    torch.manual_seed(8)
    pe, filt = SineSPE(H, D, R, 2), SPEFilter(True, (H, D))
    queries = torch.randn(B, N, H, D, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        qhat, khat = filt(queries, queries, pe((B, N)))
        loss = torch.einsum("bmhr,bnhr->", qhat, khat).float()
    loss.backward()
    for param in [*pe.parameters(), filt.gate, queries]:
        assert param.grad is not None and param.grad.dtype == param.dtype
        assert torch.isfinite(param.grad).all()


def test_filter_on_2d_inputs():
    torch.manual_seed(9)
    pe, filt = ConvSPE(2, H, D, R, 2), SPEFilter(True, (H, D))
    code = pe((B, 5, 6))
    queries, keys = torch.randn(B, 4, 6, H, D), torch.randn(B, 4, 6, H, D)
    eps = filt.draw_gate_noise(R)
    qhat, khat = filt(queries, keys, code, gate_noise=eps)
    assert qhat.shape == khat.shape == (B, 4, 6, H, R)
    delta = torch.sigmoid(filt.gate)[..., None]
    qbar = torch.sqrt(1 - delta) * code[0][:, :4] + torch.sqrt(delta) * eps
    torch.testing.assert_close(qhat, (qbar * queries[..., None]).sum(-2), atol=1e-5, rtol=1e-5)


def test_filter_rejects_bad_shapes():
    filt = SPEFilter(True, (H, D))
    code = SineSPE(H, D, R)((B, N))
    x = torch.randn(B, N, H, D)
    cases = [
        (x, torch.randn(B, N + 1, H, D), code),                         # queries vs keys
        (torch.randn(B, N + 1, H, D),) * 2 + (code,),                   # code shorter than inputs
        (torch.randn(B, N, H, D + 1),) * 2 + (code,),                   # inputs vs code features
        (torch.randn(B, N, 3, H, D),) * 2 + (code,),                    # wrong number of dimensions
        (x, x, (code[0], code[1][:, :-1])),                             # qbar vs kbar
    ]
    for queries, keys, bad in cases:
        with pytest.raises(ValueError):
            filt(queries, keys, bad)
    other = SineSPE(H + 1, D, R)((B, N))
    with pytest.raises(ValueError):
        filt(torch.randn(B, N, H + 1, D), torch.randn(B, N, H + 1, D), other)  # code_shape mismatch
    with pytest.raises(ValueError):
        filt(x, x, code, gate_noise=torch.randn(H, D, R + 1))
    with pytest.raises(ValueError):
        SPEFilter(True, None)


def test_gate_terms_cached_without_gradients_follow_the_gate():
    torch.manual_seed(7)
    filt = SPEFilter(True, (H, D))
    eps = filt.draw_gate_noise(R)
    q, k = torch.randn(1, 1, H, D), torch.randn(1, 1, H, D)
    code = SineSPE(H, D, R, 2)((1, 1))
    with torch.no_grad():
        first = filt(q, k, code, gate_noise=eps)[0]
        filt.gate.add_(1.0)                                             # in place: a new version
        changed = filt(q, k, code, gate_noise=eps)[0]
    filt.double()                                                       # new storage and dtype
    with torch.no_grad():
        again = filt(q.double(), k.double(), tuple(c.double() for c in code), gate_noise=eps.double())[0]
    assert (first - changed).abs().max() > 1e-4
    torch.testing.assert_close(again, changed.double(), atol=1e-5, rtol=1e-5)
