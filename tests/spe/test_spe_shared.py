"""The contraction backends and SharedCode: equal to the reference einsum / tuple path on values and
gradients (float64), in-place accumulation, gradcheck, and errors."""

import pytest
import torch

from spe import ConvSPE, SharedCode, SineSPE, SPEFilter
from spe import kernels
from spe.contract import (accumulate, backend_for, contract, contract_backward,
                          gated_compiled)
from spe.shared import FLUSH_ROWS

BACKENDS = ["torch"] + (["compiled"] if kernels.available() else [])
B, N, H, D, R = 3, 11, 2, 4, 6


def strided_rows(*shape, dtype=torch.float64):
    """A (B, S, H, X) view with the strides of a (B, S, 3, H, X) qkv split (not contiguous)."""
    b, s, h, x = shape
    return torch.randn(b, s, 3, h, x, dtype=dtype)[:, :, 1]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("batch", [1, 4])
def test_contraction_matches_einsum(backend, batch):
    torch.manual_seed(0)
    x, grad = strided_rows(batch, N, H, D), strided_rows(batch, N, H, R)
    code = torch.randn(N, H, D, R, dtype=torch.float64)
    out = contract(x, code, backend)
    torch.testing.assert_close(out, torch.einsum("bshd,shdr->bshr", x, code))
    torch.testing.assert_close(contract_backward(grad, code, backend),
                               torch.einsum("bshr,shdr->bshd", grad, code))
    pairs = [(strided_rows(b, N, H, D), strided_rows(b, N, H, R)) for b in (batch, 2, 1)]
    start = torch.randn(N, H, D, R, dtype=torch.float64)
    buf = start.clone()
    accumulate(buf, [x for x, _ in pairs], [g for _, g in pairs], backend)
    expected = start + sum(torch.einsum("bshd,bshr->shdr", x, g) for x, g in pairs)
    torch.testing.assert_close(buf, expected)


def test_backend_choice_and_errors():
    code = torch.randn(N, H, D, R)
    assert backend_for(code) == ("compiled" if kernels.available() else "torch")
    assert backend_for(code.bfloat16()) == "torch"
    assert backend_for(code.half()) == ("compiled" if kernels.available() else "torch")  # read as float32
    assert backend_for(code, "torch") == "torch"
    with pytest.raises(ValueError, match="unknown contraction backend"):
        backend_for(code, "cuda")
    with pytest.raises(ValueError, match="compiled contraction"):
        backend_for(code.bfloat16(), "compiled")
    with pytest.raises(ValueError, match="must be"):
        contract(torch.randn(2, N, H, D + 1), code)
    with pytest.raises(ValueError, match="contiguous"):
        contract(torch.randn(2, N, H, D), code.transpose(0, 1))
    with pytest.raises(ValueError, match="one grad per x"):
        accumulate(torch.zeros_like(code), [torch.randn(2, N, H, D)], [])
    with pytest.raises(ValueError, match="grad must be"):
        accumulate(torch.zeros_like(code), [torch.randn(2, N, H, D)], [torch.randn(2, N, H, D)])


def generators():
    return [SineSPE(H, D, R, 3), ConvSPE(1, H, D, R, kernel_size=5)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("gated", [True, False])
@pytest.mark.parametrize("make", [0, 1], ids=["sine", "conv"])
def test_shared_code_equals_tuple_path_values_and_gradients(backend, gated, make):
    """Three filters (layers) sharing one code over a prefix of it: outputs and every gradient
    (inputs, gates, generator parameters) equal those of the plain tuple path."""
    torch.manual_seed(1)
    pe = generators()[make].double()
    filters = [SPEFilter(gated, (H, D)).double() for _ in range(3)]
    noise = pe.draw_noise(N + 4, R)
    eps = [f.draw_gate_noise(R).double() for f in filters]
    inputs = [(strided_rows(B, N, H, D).requires_grad_(), strided_rows(B, N, H, D).requires_grad_())
              for _ in filters]
    weights = torch.randn(B, N, H, R, dtype=torch.float64)

    def run(shared):
        code = pe.codes(noise, 0, N + 4)                                # longer than the inputs
        code = SharedCode(*code, backend=backend) if shared else code
        loss = 0
        outs = []
        for filt, (q, k), e in zip(filters, inputs, eps):
            qhat, khat = filt(q, k, code, gate_noise=e if gated else None)
            outs += [qhat, khat]
            loss = loss + (qhat * weights).sum() + (khat * weights.flip(1)).square().sum()
        params = [p for m in [pe, *filters] for p in m.parameters()]
        leaves = [t for pair in inputs for t in pair] + params
        return outs, torch.autograd.grad(loss, leaves)

    reference, shared = run(False), run(True)
    for got, want in zip(shared[0] + list(shared[1]), reference[0] + list(reference[1])):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_shared_code_gradcheck(backend):
    torch.manual_seed(2)
    pe = SineSPE(H, D, R, 2).double()
    filt = SPEFilter(True, (H, D)).double()
    noise, eps = pe.draw_noise(5, R), filt.draw_gate_noise(R).double()
    q = torch.randn(2, 5, H, D, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 5, H, D, dtype=torch.float64, requires_grad=True)

    def function(q, k):
        code = SharedCode(*pe.codes(noise, 0, 5), backend=backend)
        return filt(q, k, code, gate_noise=eps)

    # with respect to the inputs; the parameters' gradients are checked against the tuple path above
    assert torch.autograd.gradcheck(function, (q, k))


@pytest.mark.parametrize("backend", BACKENDS)
def test_shared_code_keeps_one_buffer_per_code(backend):
    """Pending pairs are flushed every FLUSH_ROWS rows into one buffer per code, allocated on the
    first flush (after which the compiled gated kernels add into it directly, leaving nothing
    pending); the buffers are handed over once; nothing is tracked without gradients."""
    torch.manual_seed(3)
    pe, filt = SineSPE(H, D, R, 2), SPEFilter(False)
    code = SharedCode(*pe((B, N)), backend=backend)
    gradients = code.gradients
    assert code.link is not None and gradients.buffers == [None, None]
    q, k = torch.randn(B, N, H, D, requires_grad=True), torch.randn(B, N, H, D)
    flush_at = -(-FLUSH_ROWS // B) - 1                                  # index of the flushing layer
    layers = flush_at + 2
    outputs = [filt(q, k, code) for _ in range(layers)]
    seen = []
    for qhat, khat in reversed(outputs):  # one layer's backward at a time, last layer first
        (qhat.sum() + khat.sum()).backward(retain_graph=True, inputs=[q])
        seen.append((len(gradients.pending[0]), gradients.buffers[0] is not None))
    assert seen[0] == (1, False)                                        # first layer: pending
    assert seen[flush_at - 1] == (flush_at, False)
    assert seen[flush_at] == (0, True)                                  # flushed into a buffer
    assert seen[flush_at + 1] == (0 if gated_compiled(code.codes[0], backend) else 1, True)
    sum(sum(t.sum() for t in pair) for pair in outputs).backward()
    assert gradients.buffers == [None, None] and gradients.pending == [[], []]
    assert pe.freqs.grad is not None and pe.freqs.grad.abs().sum() > 0
    with torch.no_grad():
        assert SharedCode(*pe((B, N))).link is None


def test_shared_code_errors():
    pe = SineSPE(H, D, R, 2)
    qbar, kbar = pe((1, N))
    with pytest.raises(ValueError, match="must both be"):
        SharedCode(qbar, kbar[:, :-1])
    code = SharedCode(qbar, kbar)
    filt = SPEFilter(False)
    with pytest.raises(ValueError, match="cannot serve"):
        filt(torch.randn(1, N + 1, H, D), torch.randn(1, N + 1, H, D), code)
    with pytest.raises(ValueError, match="heads, features"):
        filt(torch.randn(1, N, H, D + 1), torch.randn(1, N, H, D + 1), code)
    conv2d = ConvSPE(2, H, D, R, kernel_size=3)
    code2d = SharedCode(*conv2d((1, 4, 5)))
    out = filt(torch.randn(1, 4, 5, H, D), torch.randn(1, 4, 5, H, D), code2d)
    assert out[0].shape == (1, 4, 5, H, R)
    with pytest.raises(ValueError, match="prefix of a 1-D code"):
        filt(torch.randn(1, 3, 5, H, D), torch.randn(1, 3, 5, H, D), code2d)


@pytest.mark.skipif(not kernels.available(), reason="spe_kernels (the compiled extension) is not installed")
@pytest.mark.parametrize("realizations", [R, 32, 64])  # 32, 64: the kernels' fixed-length loops
def test_compiled_sine_code_equals_einsum_values_and_gradients(realizations):
    from spe.sine import _SineCode

    torch.manual_seed(5)
    omega = torch.randn(N, H, D, 6, dtype=torch.float64, requires_grad=True)
    z = torch.randn(H, D, 6, realizations, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(N, H, D, realizations, dtype=torch.float64)
    compiled = _SineCode.apply(omega, z)
    reference = torch.einsum("shdj,hdjr->shdr", omega, z)
    torch.testing.assert_close(compiled, reference)
    single = _SineCode.apply(omega.detach().float(), z.detach().float())  # float: its own (streaming) path
    torch.testing.assert_close(single, reference.detach().float())
    got = torch.autograd.grad((compiled * weights).sum(), (omega, z))
    want = torch.autograd.grad((reference * weights).sum(), (omega, z))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    assert torch.autograd.gradcheck(_SineCode.apply, (omega[:3], z))
