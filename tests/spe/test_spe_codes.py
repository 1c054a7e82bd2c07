"""Code generators: Monte-Carlo convergence to the analytic template, template structure, evaluation at
arbitrary positions, shapes and errors."""

import math

import pytest
import torch

import spe.conv
from spe import ConvSPE, SineSPE
from spe import kernels
from spe.conv import _correlations, _FilteredNoise, _fft_size, swap_outer

H, D = 2, 3


def empirical_template(qbar, kbar):
    """(1/sqrt(R/D)) sum_r qbar kbar over flattened positions: (H, D, S, S)."""
    r, d = qbar.shape[-1], qbar.shape[-2]
    q = qbar.flatten(1, -4)[0]                                          # (S, H, D, R)
    k = kbar.flatten(1, -4)[0]                                          # (S, H, D, R)
    return torch.einsum("mhdr,nhdr->hdmn", q, k) / math.sqrt(r / d)


def monte_carlo_errors(pe, length, realizations=(64, 4096)):
    """Mean-squared error between the empirical and the exact template, per number of realisations."""
    generator = torch.Generator().manual_seed(0)
    size = length if isinstance(length, int) else math.prod(length)
    start = 0 if isinstance(length, int) else (0,) * len(length)
    with torch.no_grad():
        template = pe.expected_template(length)
        assert template.shape == (H, D, size, size)
        errors = []
        for r in realizations:
            noise = pe.draw_noise(length, num_realizations=r, generator=generator)
            qbar, kbar = pe.codes(noise, start, length)
            errors.append(((empirical_template(qbar, kbar) - template) ** 2).mean().item())
    return errors, template.pow(2).mean().item()


@pytest.mark.parametrize("make_pe, length", [
    (lambda: SineSPE(H, D, num_sines=3), 12),
    (lambda: ConvSPE(1, H, D, kernel_size=5), 12),
    (lambda: ConvSPE(2, H, D, kernel_size=(3, 2)), (4, 5)),
])
def test_monte_carlo_converges_to_template(make_pe, length):
    torch.manual_seed(0)
    pe = make_pe()
    (err_small, err_large), power = monte_carlo_errors(pe, length)
    assert err_large <= err_small / 4
    assert err_large <= 0.01 * power  # converges to this template (a 10% scale error fails)


def test_sine_template_toeplitz_and_periodic():
    torch.manual_seed(1)
    period = 8
    pe = SineSPE(H, D, num_sines=1)
    with torch.no_grad():  # f = sigmoid(raw) / 2 = 1 / period
        pe.freqs.fill_(math.log((2 / period) / (1 - 2 / period)))
    template = pe.expected_template(3 * period)
    torch.testing.assert_close(template[..., period:, :], template[..., :-period, :], atol=1e-5, rtol=0)
    torch.testing.assert_close(template[..., 1:, 1:], template[..., :-1, :-1], atol=1e-5, rtol=0)
    lag = torch.arange(3 * period)[:, None] - torch.arange(3 * period)[None, :]
    theta = pe.offsets[..., 0, None, None]
    gain = torch.nn.functional.softplus(pe.gains[..., 0, None, None])
    expected = gain ** 2 / 2 * torch.cos(2 * math.pi * lag / period + theta)
    torch.testing.assert_close(template, expected.detach(), atol=1e-5, rtol=1e-5)


def test_conv_template_is_filter_correlation_and_vanishes():
    torch.manual_seed(2)
    kernel, length = 4, 11
    pe = ConvSPE(1, H, D, kernel_size=kernel)
    template = pe.expected_template(length).detach()
    phi_q = pe.conv_q.weight.detach().view(H, D, kernel)
    phi_k = pe.conv_k.weight.detach().view(H, D, kernel)
    expected = torch.zeros(H, D, length, length)
    for m in range(length):
        for n in range(length):
            for p in range(kernel):
                if 0 <= p + m - n < kernel:
                    expected[..., m, n] += phi_q[..., p] * phi_k[..., p + m - n]
    torch.testing.assert_close(template, expected)
    far = (torch.arange(length)[:, None] - torch.arange(length)[None, :]).abs() >= kernel
    assert torch.all(template[..., far] == 0)
    assert torch.all(template[..., ~far] > 0)  # uniform [0, 1) filters give positive correlations


def test_sine_codes_at_any_position_match_full_evaluation():
    torch.manual_seed(3)
    pe = SineSPE(H, D, num_realizations=8, num_sines=2)
    with torch.no_grad():
        pe.freqs.add_(3.0)  # faster sinusoids make phase errors visible
        noise = pe.draw_noise(None)
        full_q, full_k = pe.codes(noise, 0, 3005)
        part_q, part_k = pe.codes(noise, 3000, 5)
    assert part_q.shape == (1, 5, H, D, 8)
    torch.testing.assert_close(part_q, full_q[:, 3000:], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(part_k, full_k[:, 3000:], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("ndim", [1, 2])
def test_conv_codes_slice_matches_full_evaluation(ndim):
    torch.manual_seed(4)
    pe = ConvSPE(ndim, H, D, num_realizations=8, kernel_size=3)
    length, start, part = (10,) * ndim, (3,) * ndim, (5,) * ndim
    noise = pe.draw_noise(length)
    full_q, full_k = pe.codes(noise, (0,) * ndim, length)
    part_q, part_k = pe.codes(noise, start, part)
    window = (slice(None), *[slice(3, 8)] * ndim)
    torch.testing.assert_close(part_q, full_q[window], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(part_k, full_k[window], atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="outside"):
        pe.codes(noise, (6,) * ndim, part)


@pytest.mark.parametrize("ndim, kernel, length", [(1, 7, 20), (2, (3, 4), (6, 5))])
def test_conv_codes_equal_direct_grouped_convolution(ndim, kernel, length):
    torch.manual_seed(5)
    pe = ConvSPE(ndim, H, D, 8, kernel)
    noise = pe.draw_noise(length)
    qbar, kbar = pe.codes(noise, (0,) * ndim, length)
    scale = (8 * D) ** 0.25
    for code, conv in [(qbar, pe.conv_q), (kbar, pe.conv_k)]:
        direct = conv(noise).detach() / scale                           # (R, H*D, *length)
        direct = direct.permute(*range(2, ndim + 2), 1, 0)              # (*length, H*D, R)
        torch.testing.assert_close(code[0].flatten(-3, -2).detach(), direct, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("chunk_channels", [None, 3], ids=["one-chunk", "3-channel-chunks"])
@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "torch"])
@pytest.mark.parametrize("ndim, kernel, length", [(1, 7, 20), (2, (3, 4), (6, 5))])
def test_conv_code_gradients_equal_direct_grouped_convolution(ndim, kernel, length, compiled, chunk_channels,
                                                              monkeypatch):
    """The FFT path's own backward (one FFT per code gradient, summed over realisations in the
    spectrum) gives the filters the gradients autograd gives the direct grouped convolution, whether
    the channels go through the FFTs at once or one at a time."""
    if compiled and kernels.module() is None:
        pytest.skip("spe_kernels is not installed (the torch layout path is tested alone)")
    if not compiled:
        monkeypatch.setattr(kernels, "_enabled", False)
    torch.manual_seed(6)
    pe = ConvSPE(ndim, H, D, 8, kernel).double()
    noise = pe.draw_noise(length)
    if chunk_channels is not None:                                      # the last chunk is shorter
        per_channel = 8 * math.prod(_fft_size(n) for n in noise.shape[2:]) * noise.element_size()
        monkeypatch.setattr(spe.conv, "CHUNK_BYTES", chunk_channels * per_channel)
    qbar, kbar = pe.codes(noise, (0,) * ndim, length)
    weights = torch.randn(2, *qbar.shape, dtype=torch.float64)
    params = [pe.conv_q.weight, pe.conv_k.weight]
    grads = torch.autograd.grad((qbar * weights[0]).sum() + (kbar * weights[1]).sum(), params)
    scale = (8 * D) ** 0.25
    loss = 0
    for weight, conv in zip(weights, (pe.conv_q, pe.conv_k)):
        direct = (conv(noise) / scale).permute(*range(2, ndim + 2), 1, 0)  # (*length, H*D, R)
        loss = loss + (direct * weight[0].flatten(-3, -2)).sum()
    expected = torch.autograd.grad(loss, params)
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-9)
    filters = [p.detach()[:, 0].clone().requires_grad_() for p in params]
    fft_size = tuple(_fft_size(n) for n in noise.shape[2:])
    size = (length,) if ndim == 1 else length
    code_shape = (qbar[0, ..., 0].numel() // (H * D), H * D, 8)         # (S, H*D, R)

    def function(fq, fk):
        outs = (noise.new_empty(code_shape), noise.new_empty(code_shape))
        return _FilteredNoise.apply(noise, fft_size, size, outs, fq, fk)

    assert torch.autograd.gradcheck(function, filters)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize("fft_size", [(70,), (64,), (6, 10)])  # tiles with a tail, whole tiles, 2-D
def test_compiled_spectral_correlation_equals_torch_loop(dtype, fft_size, monkeypatch):
    if kernels.module() is None:
        pytest.skip("spe_kernels is not installed")
    torch.manual_seed(0)
    spectra = (13, 5, *fft_size[:-1], fft_size[-1] // 2 + 1)            # (R, c, *F')
    z_f, *g_fs = (torch.randn(spectra, dtype=dtype) for _ in range(4))
    kernel_size = (3,) * len(fft_size)
    compiled = _correlations(z_f, g_fs, fft_size, kernel_size)
    with kernels.plain():
        reference = _correlations(z_f, g_fs, fft_size, kernel_size)
    assert len(compiled) == 3 and compiled[0].shape == (5, *kernel_size)
    for got, want in zip(compiled, reference):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_swap_outer_equals_permuted_copy(dtype):
    if kernels.module() is None:
        pytest.skip("spe_kernels is not installed")
    x = torch.randn(37, 5, 70, dtype=dtype)[:, :, 3:68]                  # (A, C, B), strided
    expected = x.permute(2, 1, 0).contiguous()
    assert torch.equal(swap_outer(x), expected)
    buffer = torch.zeros(65, 5, 40, dtype=dtype)
    swap_outer(x, out=buffer[..., :37])                                  # into a padded buffer
    assert torch.equal(buffer[..., :37], expected) and not buffer[..., 37:].any()
    with pytest.raises(RuntimeError, match="out must be"):
        swap_outer(x, out=torch.empty(65, 5, 36, dtype=dtype))
    # whole 16 x 16 blocks with 64-byte aligned rows (the float path's streaming stores), and edges
    for shape in [(64, 3, 48), (64, 2, 50), (16, 1, 16)]:
        x = torch.randn(*shape, dtype=dtype)
        assert torch.equal(swap_outer(x), x.permute(2, 1, 0))


@pytest.mark.parametrize("make_pe", [lambda: SineSPE(H, D, 16, 2), lambda: ConvSPE(1, H, D, 16, 4)])
def test_call_shapes_override_and_generator(make_pe):
    pe = make_pe()
    assert pe.code_shape == (H, D)
    qbar, kbar = pe((5, 7))
    assert qbar.shape == kbar.shape == (1, 7, H, D, 16)
    assert qbar.is_contiguous() and kbar.is_contiguous()
    qbar, _ = pe((5, 7), num_realizations=3)
    assert qbar.shape == (1, 7, H, D, 3)
    draws = [pe.codes(pe.draw_noise(7, 4, torch.Generator().manual_seed(9)), 0, 7)[0] for _ in range(2)]
    torch.testing.assert_close(draws[0], draws[1])
    assert not torch.allclose(pe((1, 7))[0], pe((1, 7))[0])  # fresh noise at every call


def test_conv_2d_shapes():
    pe = ConvSPE(2, H, D, 4, kernel_size=(2, 3))
    qbar, kbar = pe((1, 5, 6))
    assert qbar.shape == kbar.shape == (1, 5, 6, H, D, 4)


def test_code_generators_reject_bad_shapes():
    with pytest.raises(ValueError):
        SineSPE(H, D)((2, 3, 4))
    with pytest.raises(ValueError):
        ConvSPE(1, H, D)((2, 3, 4))
    with pytest.raises(ValueError):
        ConvSPE(4, H, D)
    with pytest.raises(ValueError):
        ConvSPE(2, H, D, kernel_size=(3, 3, 3))
    sine = SineSPE(H, D, 4, num_sines=2)
    with pytest.raises(ValueError):
        sine.codes(torch.randn(H, D, 3, 4), 0, 5)  # 2K = 4 rows expected
    conv = ConvSPE(1, H, D, 4, kernel_size=3)
    with pytest.raises(ValueError):
        conv.codes(torch.randn(4, H * D + 1, 12), 0, 5)


def test_conv_codes_reuse_their_storage_once_released():
    torch.manual_seed(7)
    pe = ConvSPE(1, H, D, 8, 5)
    noise = pe.draw_noise(12)
    first = pe.codes(noise, 0, 12)
    address, values = first[0].data_ptr(), first[0].detach().clone()
    del first
    qbar, kbar = pe.codes(noise, 0, 12)                                 # the released storage again
    assert qbar.data_ptr() == address
    torch.testing.assert_close(qbar, values)
    assert pe.codes(noise, 0, 12)[0].data_ptr() != address              # qbar is still held


def test_fft_size_is_the_smallest_fast_size():
    """2, 3, 5-smooth, >= n, a multiple of 32 from 512 on (2187 = 3^7 and 16875 = 3^3 5^4 are slow),
    and the smallest such size."""
    def fast(m):
        rest = m
        for prime in (2, 3, 5):
            while rest % prime == 0:
                rest //= prime
        return rest == 1 and (m < 512 or m % 32 == 0)

    assert [_fft_size(n) for n in (1, 7, 227, 1151, 2175, 16511)] == [1, 8, 240, 1152, 2304, 17280]
    for n in range(1, 5000, 7):
        m = _fft_size(n)
        assert m >= n and fast(m) and not any(fast(k) for k in range(n, m))
