"""Codes stored in float16 (`ModelConfig.code_dtype`, `spe.shared.storage_dtype`): the compiled kernels
read a float16 code exactly as the float32 code of the same (rounded) values, write it exactly as
torch rounds (sineSPE's code, convSPE's transposed code), and a shared code stored in float16 gives
the float32 path's outputs and gradients to the rounding's size."""

import pytest
import torch

from spe import ConvSPE, SineSPE, SPEFilter
from spe import kernels
from spe.contract import (accumulate, compute_dtype, contract,
                          contract_backward, gated_contract, gated_contract_backward)
from spe.shared import storage_dtype
from spe_helpers import layers_loss

pytestmark = pytest.mark.skipif(not kernels.available(), reason="float16 codes are read by the compiled "
                                "spe_kernels extension (make setup builds it)")

# (B, S, H, D, R): R 64 and D a multiple of 16 run the vector paths (in-register conversion), the
# others the loops that convert a block into a buffer first
SIZES = [(4, 5, 2, 64, 64), (5, 3, 3, 16, 64), (3, 4, 2, 7, 24), (1, 2, 1, 5, 32)]


def strided_rows(b, s, h, x):
    """A (B, S, H, X) float32 view with the strides of a (B, S, 3, H, X) qkv split (not contiguous)."""
    return torch.randn(b, s, 3, h, x)[:, :, 1]


@pytest.mark.parametrize("gated", [True, False])
@pytest.mark.parametrize("size", SIZES)
def test_kernels_read_a_float16_code_as_its_float32_values(gated, size):
    torch.manual_seed(sum(size))
    B, S, H, D, R = size
    x, grad = strided_rows(B, S, H, D), strided_rows(B, S, H, R)
    half = torch.randn(S, H, D, R).half()
    exact = half.float()                                                # the same values in float32
    gate = (torch.rand(H, D), torch.rand(H, D), torch.randn(H, D, R)) if gated else None
    assert compute_dtype(half) == torch.float32
    assert torch.equal(gated_contract(x, half, gate, "compiled"), gated_contract(x, exact, gate, "compiled"))
    for got, want in zip(gated_contract_backward(grad, x, half, gate, backend="compiled"),
                         gated_contract_backward(grad, x, exact, gate, backend="compiled")):
        assert (got is None and want is None) or torch.equal(got, want)
    assert torch.equal(contract(x, half, "compiled"), contract(x, exact, "compiled"))
    assert torch.equal(contract_backward(grad, half, "compiled"), contract_backward(grad, exact, "compiled"))
    # the PyTorch backend computes in float32 too (the reference, same values up to summation order)
    torch.testing.assert_close(gated_contract(x, half, gate, "torch"), gated_contract(x, exact, gate, "torch"))


@pytest.mark.parametrize("S, J, R", [(9, 10, 64), (5, 6, 24)])
def test_sine_code_in_float16_equals_the_rounded_float32_code(S, J, R):
    torch.manual_seed(S)
    omega, z = torch.randn(S, 3, 5, J), torch.randn(3, 5, J, R)
    compiled = kernels.module()
    half = compiled.sine_code(omega, z, torch.empty(S, 3, 5, R, dtype=torch.float16))
    assert half.dtype == torch.float16
    assert torch.equal(half, compiled.sine_code(omega, z, None).half())


@pytest.mark.parametrize("A, C, B", [(70, 3, 40), (16, 2, 16), (5, 1, 3)])
def test_swap_outer_into_float16_equals_the_rounded_copy(A, C, B):
    torch.manual_seed(A)
    x = torch.randn(A, C, B + 7)[:, :, 2:B + 2]                          # strided, as a cropped FFT signal
    out = torch.empty(B, C, A, dtype=torch.float16)
    kernels.module().swap_outer(x, out)
    assert torch.equal(out, x.permute(2, 1, 0).half())


def test_storage_dtype_and_errors():
    assert storage_dtype(torch.float32, torch.float16) == torch.float16
    assert storage_dtype(torch.float64, torch.float16) == torch.float64   # only float32 codes are halved
    assert storage_dtype(torch.float32, None) == torch.float32
    with pytest.raises(ValueError, match="float16 or its own dtype"):
        storage_dtype(torch.float32, torch.bfloat16)
    with pytest.raises(ValueError, match="float32 or float64"):
        accumulate(torch.zeros(2, 1, 3, 4, dtype=torch.float16), [torch.randn(1, 2, 1, 3)], [torch.randn(1, 2, 1, 4)])
    with pytest.raises(RuntimeError, match="float32 for a float16"):
        kernels.module().gated_forward(torch.randn(1, 2, 1, 3, dtype=torch.float64),
                                         torch.randn(2, 1, 3, 4).half(), None, None, None)


def run_layers(pe, noise, code_dtype, positions=40, layers=3, B=2):
    """Outputs and gradients (inputs, gates, generator parameters) of a fixed loss over `layers`
    filters sharing one code stored in `code_dtype`."""
    torch.manual_seed(5)
    H, D = pe.code_shape
    R = noise.shape[0] if isinstance(pe, ConvSPE) else noise.shape[-1]
    filters = [SPEFilter(True, (H, D)) for _ in range(layers)]
    inputs = [(strided_rows(B, positions, H, D).requires_grad_(), strided_rows(B, positions, H, D).requires_grad_())
              for _ in filters]
    eps = [f.draw_gate_noise(R) for f in filters]
    weights = torch.randn(B, positions, H, R)
    code = pe.shared_code(noise, 0, positions, code_dtype=code_dtype)
    outs, loss, leaves = layers_loss(pe, filters, inputs, eps, code, weights)
    return code.codes[0].dtype, outs, torch.autograd.grad(loss, leaves)


@pytest.mark.parametrize("conv", [False, True], ids=["sine", "conv"])
def test_shared_code_in_float16_matches_float32_storage(conv):
    torch.manual_seed(0)
    pe = ConvSPE(1, 2, 16, 64, kernel_size=8) if conv else SineSPE(2, 16, 64, 3)
    noise = pe.draw_noise(40, 64)
    dtype16, outs16, grads16 = run_layers(pe, noise, torch.float16)
    dtype32, outs32, grads32 = run_layers(pe, noise, None)
    assert (dtype16, dtype32) == (torch.float16, torch.float32)
    # 11 significant bits per code value: outputs and gradients within a few 1e-3 of their scale
    for got, want in zip(outs16 + list(grads16), outs32 + list(grads32)):
        assert (got - want).abs().max() <= 3e-3 * want.abs().max() + 1e-6
