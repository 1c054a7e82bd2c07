"""The gated contraction (spe/contract.py: gated_contract, gated_contract_backward, scaled accumulate):
both backends equal autograd through the effective code a code + c noise, in float64, on values and on
every gradient (x, code buffer, a, c, noise), with and without a gate, odd sizes and strided x; and
the fallback to PyTorch when the loaded spe_kernels predates the gated kernels."""


import pytest
import torch

from spe import SharedCode, SineSPE, SPEFilter
from spe import kernels
from spe.contract import accumulate, gated_compiled, gated_contract, gated_contract_backward
from spe.shared import FLUSH_ROWS

BACKENDS = ["torch"] + (["compiled"] if kernels.available() else [])
# (B, S, H, D, R); R = 64 and 32 run the kernels' fixed-length loops, B = 5 and 6 their 4-row tiles and rest
SIZES = [(3, 11, 2, 4, 6), (1, 5, 3, 7, 5), (4, 9, 1, 16, 3), (2, 1, 2, 1, 1), (5, 3, 2, 5, 64), (6, 2, 3, 4, 32)]


def strided_rows(b, s, h, x):
    """A (B, S, H, X) float64 view with the strides of a (B, S, 3, H, X) qkv split (not contiguous)."""
    return torch.randn(b, s, 3, h, x, dtype=torch.float64)[:, :, 1]


def make_gate(H, D, R):
    """(a, c, noise) as SPEFilter builds them: sqrt(1 - delta), sqrt(delta), eps."""
    delta = torch.sigmoid(torch.randn(H, D, dtype=torch.float64))
    return (1 - delta).sqrt(), delta.sqrt(), torch.randn(H, D, R, dtype=torch.float64)


def reference(x, code, gate, grad):
    """Output and autograd gradients (x, code, a, c, noise) of sum_d x_d (a_d code_d + c_d noise_d)."""
    leaves = [t.detach().clone().requires_grad_() for t in (x, code, *(gate or ()))]
    effective = leaves[1]                                               # (S, H, D, R)
    if gate is not None:
        effective = leaves[2][..., None] * leaves[1] + leaves[3][..., None] * leaves[4]
    out = torch.einsum("bshd,shdr->bshr", leaves[0], effective)
    out.backward(grad)
    return out.detach(), [t.grad for t in leaves]


def case(size, gated):
    """Strided x and grad, a code, a gate or None for size (B, S, H, D, R), and the reference output
    and gradients (x, code, a, c, noise)."""
    torch.manual_seed(sum(size))
    B, S, H, D, R = size
    x, grad = strided_rows(B, S, H, D), strided_rows(B, S, H, R)
    code = torch.randn(S, H, D, R, dtype=torch.float64)
    gate = make_gate(H, D, R) if gated else None
    return (x, grad, code, gate, *reference(x, code, gate, grad))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("gated", [True, False])
@pytest.mark.parametrize("size", SIZES)
def test_gated_contraction_equals_autograd_reference(backend, gated, size):
    x, grad, code, gate, expected, grads = case(size, gated)
    S, H, D, R = code.shape
    torch.testing.assert_close(gated_contract(x, code, gate, backend), expected)
    start = torch.randn(S, H, D, R, dtype=torch.float64)
    buf = start.clone()
    grad_x, grad_a, grad_noise, grad_c = gated_contract_backward(grad, x, code, gate, buf, backend=backend)
    torch.testing.assert_close(grad_x, grads[0])
    torch.testing.assert_close(buf - start, grads[1])
    if gated:
        torch.testing.assert_close(grad_a, grads[2])
        torch.testing.assert_close(grad_c, grads[3])
        torch.testing.assert_close(grad_noise, grads[4])
    else:
        assert grad_a is None and grad_noise is None and grad_c is None


@pytest.mark.parametrize("gated", [True, False])
@pytest.mark.parametrize("size", [(4, 3, 2, 64, 64), (6, 2, 3, 32, 64), (3, 3, 2, 20, 64), (1, 2, 2, 16, 32)])
def test_float32_kernels_equal_float64_reference(gated, size):
    """float32 with R = 64: the kernels' vector paths (16-lane products of D in multiples of 16 with
    a butterfly sum, 4-row register tiles with a remainder), against the float64 reference."""
    if not kernels.available():
        pytest.skip("spe_kernels is not installed")
    x, grad, code, gate, expected, grads = case(size, gated)
    S, H, D, R = code.shape
    single = [t.float() for t in (x, code, grad)]
    gate32 = None if gate is None else tuple(t.float() for t in gate)
    tolerance = {"atol": 1e-4, "rtol": 1e-4}
    torch.testing.assert_close(gated_contract(single[0], single[1], gate32, "compiled").double(), expected, **tolerance)
    buf = torch.zeros(S, H, D, R)
    grad_x, grad_a, grad_noise, grad_c = gated_contract_backward(single[2], single[0], single[1], gate32, buf,
                                                                 backend="compiled")
    got = [grad_x, buf] + ([grad_a, grad_c, grad_noise] if gated else [])
    for g, want in zip(got, grads):
        torch.testing.assert_close(g.double(), want, **tolerance)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gated_backward_computes_only_what_is_needed(backend):
    torch.manual_seed(1)
    B, S, H, D, R = 2, 6, 2, 5, 3
    x, grad = strided_rows(B, S, H, D), strided_rows(B, S, H, R)
    code = torch.randn(S, H, D, R, dtype=torch.float64)
    gate = make_gate(H, D, R)
    _, grads = reference(x, code, gate, grad)
    grad_x, *gate_grads = gated_contract_backward(grad, x, code, gate, need_x=False, backend=backend)
    assert grad_x is None
    torch.testing.assert_close(gate_grads, [grads[2], grads[4], grads[3]])
    buf = torch.zeros(S, H, D, R, dtype=torch.float64)
    grad_x, *gate_grads = gated_contract_backward(grad, x, code, gate, buf, need_gate=False, backend=backend)
    assert gate_grads == [None, None, None]
    torch.testing.assert_close(grad_x, grads[0])
    torch.testing.assert_close(buf, grads[1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_scaled_accumulate(backend):
    torch.manual_seed(2)
    S, H, D, R = 7, 3, 5, 4
    pairs = [(strided_rows(b, S, H, D), strided_rows(b, S, H, R)) for b in (3, 1, 2)]
    scales = [torch.rand(H, D, dtype=torch.float64), None, torch.rand(H, D, dtype=torch.float64)]
    buf = torch.randn(S, H, D, R, dtype=torch.float64)
    expected = buf + sum(torch.einsum("bshd,bshr->shdr", x if a is None else x * a, g)
                         for (x, g), a in zip(pairs, scales))
    accumulate(buf, [x for x, _ in pairs], [g for _, g in pairs], backend, scales)
    torch.testing.assert_close(buf, expected)
    with pytest.raises(ValueError, match="one scale"):
        accumulate(buf, [x for x, _ in pairs], [g for _, g in pairs], backend, scales[:1])


@pytest.mark.skipif(not kernels.available(), reason="the compiled kernels (spe_kernels) are not installed")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("S, D, R, h0, heads", [(37, 5, 7, 1, 2), (16, 8, 4, 0, 3), (50, 16, 64, 2, 1)])
def test_accumulate_positions_last_writes_the_transposed_sum(dtype, S, D, R, h0, heads):
    """convSPE's code gradient written positions-last into a crop of a padded buffer equals the
    scaled sum of outer products, transposed; the padding is left alone (tiles of 16 positions with
    a tail; d and r blocks of 4 with a rest; strided x, scale or none)."""
    torch.manual_seed(8)
    H = h0 + heads + 1
    pairs = [(strided_rows(b, S, H, D).to(dtype), strided_rows(b, S, H, R).to(dtype)) for b in (3, 1, 2)]
    scales = [torch.rand(H, D, dtype=dtype), None, torch.rand(H, D, dtype=dtype)]
    expected = sum(torch.einsum("bshd,bshr->rhds", x if a is None else x * a, g)
                   for (x, g), a in zip(pairs, scales))[:, h0:h0 + heads].reshape(R, heads * D, S)
    padded = torch.full((R, heads * D, S + 9), 7.0, dtype=dtype)
    kernels.module().accumulate_positions_last(
        padded[..., :S], [x for x, _ in pairs], [g for _, g in pairs], scales, h0)
    torch.testing.assert_close(padded[..., :S], expected)
    assert (padded[..., S:] == 7).all()
    with pytest.raises(RuntimeError, match="whole heads"):
        kernels.module().accumulate_positions_last(
            padded[..., :S], [x for x, _ in pairs], [g for _, g in pairs], scales, H - heads + 1)


def test_gated_errors():
    code = torch.randn(4, 2, 3, 5)
    x = torch.randn(1, 4, 2, 3)
    with pytest.raises(ValueError, match="gate"):
        gated_contract(x, code, (torch.ones(2, 3), torch.ones(2, 3), torch.ones(2, 3, 4)))
    with pytest.raises(ValueError, match="buf must be"):
        gated_contract_backward(torch.randn(1, 4, 2, 5), x, code, buf=torch.zeros(4, 2, 3, 5).transpose(0, 1))


def filter_gradients(backend, gated):
    """Outputs and gradients (q, k, gate, code generator) of four SPEFilter layers on one SharedCode
    (4 x 8 rows per code: the buffer is allocated at the second layer's backward, FLUSH_ROWS 16, and
    the compiled kernels add the last two layers' contributions into it directly)."""
    torch.manual_seed(5)
    B, N, H, D, R = 8, 9, 2, 4, 6
    assert 2 * B == FLUSH_ROWS
    pe = SineSPE(H, D, R, 3).double()
    filters = [SPEFilter(gated, (H, D)).double() for _ in range(4)]
    q = torch.randn(B, N, H, D, dtype=torch.float64, requires_grad=True)
    k = torch.randn(B, N, H, D, dtype=torch.float64, requires_grad=True)
    noise = filters[0].draw_gate_noise(R) if gated else None
    code = SharedCode(*pe((B, N)), backend=backend)
    outs = [t for f in filters for t in f(q, k, code, noise)]
    loss = sum((o * torch.linspace(-1, 1, o.numel(), dtype=o.dtype).view(o.shape)).sum() for o in outs)
    params = [q, k, *pe.parameters(), *(p for f in filters for p in f.parameters())]
    return outs, torch.autograd.grad(loss, params)


@pytest.mark.skipif(not kernels.available(), reason="the compiled kernels (spe_kernels) are not installed")
@pytest.mark.parametrize("gated", [True, False])
def test_filter_with_gated_kernels_equals_torch(gated):
    assert gated_compiled(torch.zeros(1, 1, 1, 1, dtype=torch.float64))
    torch.testing.assert_close(filter_gradients("compiled", gated), filter_gradients("torch", gated))


@pytest.mark.parametrize("gated", [True, False])
def test_without_extension_everything_runs_in_torch(monkeypatch, gated):
    """The kernels switched off (as without spe_kernels): the default backend is "torch" and the
    results are the torch backend's."""
    expected = filter_gradients("torch", gated)
    with kernels.plain():
        assert SharedCode(torch.zeros(1, 2, 1, 1, 1), torch.zeros(1, 2, 1, 1, 1)).backend == "torch"
        torch.testing.assert_close(filter_gradients(None, gated), expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gated_backward_code_gradient_only(backend):
    torch.manual_seed(6)
    B, S, H, D, R = 3, 5, 2, 4, 3
    x, grad = strided_rows(B, S, H, D), strided_rows(B, S, H, R)
    code = torch.randn(S, H, D, R, dtype=torch.float64)
    gate = make_gate(H, D, R)
    _, grads = reference(x, code, gate, grad)
    buf = torch.zeros(S, H, D, R, dtype=torch.float64)
    got = gated_contract_backward(grad, x, code, gate, buf, need_x=False, need_gate=False, backend=backend)
    assert got == (None, None, None, None)
    torch.testing.assert_close(buf, grads[1])
