"""spe.random: Philox4x32-10 + Box-Muller, compiled and PyTorch, and convSPE's noise drawn with it."""

import math

import pytest
import torch

from spe import ConvSPE
from spe import kernels
from spe.random import BLOCK, _normal_reference, draw_seed, normal, philox

KERNELS = kernels.module()
needs_kernel = pytest.mark.skipif(not kernels.available(),
                                  reason="the compiled kernels (spe_kernels) are not installed")

# Random123's known-answer vectors of philox4x32-10: (counter, key, output)
KNOWN_ANSWERS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("counter, key, expected", KNOWN_ANSWERS)
def test_philox_known_answers(counter, key, expected):
    words = philox([torch.tensor([c]) for c in counter], key)
    assert tuple(int(w) for w in words) == expected
    if kernels.available():
        assert tuple(KERNELS.philox4x32(list(counter), list(key))) == expected


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("seed", [0, 5, 2**63 + 12345, 2**64 - 1])
def test_compiled_draw_equals_reference(dtype, seed):
    """Same integers; samples equal to float32 rounding (polynomial log / sine in the kernel); any
    offset and length, blocks cut anywhere."""
    for offset, count in ((0, 1), (0, 4 * BLOCK), (37, 1000), (4 * BLOCK - 1, 3), (10**6 + 3, 700)):
        got = normal((count,), seed, offset, dtype=dtype)
        expected = _normal_reference(seed, offset, count, torch.device("cpu")).to(dtype)
        assert got.dtype == dtype and got.shape == (count,)
        torch.testing.assert_close(got, expected, atol=2e-6, rtol=2e-6)


def test_reference_runs_when_the_kernel_is_absent():
    with kernels.plain():
        a = normal((3, 50), 11, 7)
    assert a.shape == (3, 50) and a.dtype == torch.float32
    torch.testing.assert_close(a.view(-1), _normal_reference(11, 7, 150, torch.device("cpu")))


def test_samples_depend_on_seed_and_index_only():
    whole = normal((5000,), 3)
    torch.testing.assert_close(normal((2, 100), 3, 1234).view(-1), whole[1234:1434], atol=0, rtol=0)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        single = normal((5000,), 3)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(single, whole)
    assert not torch.equal(normal((5000,), 4), whole)


def test_samples_are_standard_normal_and_uncorrelated():
    """Moments, a Kolmogorov-Smirnov test against the normal law (1% level) and lag correlations
    of 2^21 samples."""
    x = normal((2**21,), 2024).double()
    n = x.numel()
    assert abs(float(x.mean())) < 4 / math.sqrt(n)
    assert abs(float(x.var()) - 1) < 6 * math.sqrt(2 / n)
    assert abs(float((x**4).mean()) - 3) < 6 * math.sqrt(96 / n)
    ordered = x.sort().values
    cdf = 0.5 * (1 + torch.erf(ordered / math.sqrt(2)))
    rank = torch.arange(1, n + 1, dtype=torch.float64)
    distance = max(float((rank / n - cdf).max()), float((cdf - (rank - 1) / n).max()))
    assert distance < 1.63 / math.sqrt(n)
    for lag in (1, 2, 3, 4, BLOCK, 4 * BLOCK):
        assert abs(float((x[:-lag] * x[lag:]).mean())) < 5 / math.sqrt(n)


def test_bad_seed_or_offset():
    with pytest.raises(ValueError, match="seed"):
        normal((3,), -1)
    with pytest.raises(ValueError, match="offset"):
        normal((3,), 1, -2)


def test_conv_noise_follows_the_generator():
    pe = ConvSPE(1, 2, 3, 4, 5)
    first = pe.draw_noise(20, generator=torch.Generator().manual_seed(1))
    again = pe.draw_noise(20, generator=torch.Generator().manual_seed(1))
    other = pe.draw_noise(20, generator=torch.Generator().manual_seed(2))
    assert first.shape == (4, 6, 24) and torch.equal(first, again) and not torch.equal(first, other)
    torch.manual_seed(7)
    seed = draw_seed()
    torch.manual_seed(7)
    torch.testing.assert_close(pe.draw_noise(20), pe.noise_from_seed(20, seed), atol=0, rtol=0)
    image = ConvSPE(2, 2, 3, 4, 5)                                      # 2-D: drawn sample by sample
    torch.manual_seed(7)
    torch.testing.assert_close(image.draw_noise((6, 7)), normal((4, 6, 10, 11), seed), atol=0, rtol=0)


@pytest.mark.parametrize("compiled", [True, False], ids=["kernel", "reference"])
def test_rows_spaced_out_in_the_draw(monkeypatch, compiled):
    """row_stride: row r holds the samples from offset + r row_stride, as separate draws of each row."""
    if compiled and not kernels.available():
        pytest.skip("spe_kernels is not installed")
    if not compiled:
        monkeypatch.setattr(kernels, "_enabled", False)
    out = torch.empty(5, 3, 70)                                         # rows of 210 samples, 4 kernel blocks
    normal(out.shape, 9, 33, out=out, row_stride=1000)
    for r in range(5):
        torch.testing.assert_close(out[r], normal((3, 70), 9, 33 + r * 1000), atol=0, rtol=0)
    torch.testing.assert_close(normal((5, 3, 70), 9, 33, row_stride=210), normal((5, 3, 70), 9, 33), atol=0, rtol=0)
    with pytest.raises(ValueError, match="row_stride"):
        normal((5, 3, 70), 9, row_stride=100)


def test_reference_at_any_index_equals_the_ranges():
    """The per-sample reference (rows spaced out, on devices without the kernel) gives the samples
    of the range reference exactly, words 0-3 of a counter included."""
    from spe.random import _normal_reference_at

    index = torch.tensor([[0, 1, 63, 64, 127, 128, 255], [256, 300, 4 * BLOCK * 7 + 200, 5, 6, 7, 8]])
    for seed in (3, 2**63 + 11):
        whole = _normal_reference(seed, 0, int(index.max()) + 1, torch.device("cpu"))
        torch.testing.assert_close(_normal_reference_at(seed, index), whole[index], atol=0, rtol=0)
