"""convSPE's noise drawn by its spectrum (`spe.spectra.SeededSpectra`, `ConvSPE.noise_from_seed`):
the definition (irfft of the weighted draw), white unit-variance samples at every position, the same
noise whatever the chunking, and the rfft of a window equal to a padded transform."""

import math

import pytest
import torch

import spe.conv
from spe import ConvSPE, kernels
from spe.random import normal
from spe.spectra import SeededSpectra, WindowSpectra, padded_rfft


def reference_noise(seed, realizations, channels, size, length):
    """The definition, in one piece: R C F' complex N(0, 1) draws (real, imaginary) in (r, c, k)
    order, scaled by sqrt(F / 2) inside and sqrt(F) where irfft reads only the real part."""
    half = size // 2 + 1
    zeta = torch.view_as_complex(normal((realizations, channels, half, 2), seed, dtype=torch.float64))
    weight = torch.full((half,), math.sqrt(size / 2), dtype=torch.float64)
    weight[0] = math.sqrt(size)
    if size % 2 == 0:
        weight[-1] = math.sqrt(size)
    return torch.fft.irfft(zeta * weight, size)[..., :length]


@pytest.mark.parametrize("length", [1, 18, 300])                       # FFT sizes 8, 25 (odd), 320
def test_conv_noise_from_a_seed_is_its_spectrum_inverted(monkeypatch, length):
    monkeypatch.setattr(spe.conv, "CHUNK_BYTES", 1)                     # one channel at a time
    pe = ConvSPE(1, 2, 3, 5, kernel_size=8).double()
    noise = pe.noise_from_seed(length, 11, 4)
    samples = length + 7
    assert noise.shape == (4, 6, samples)
    torch.testing.assert_close(noise, reference_noise(11, 4, 6, spe.conv._fft_size(samples), samples))


def test_conv_noise_from_a_seed_ignores_the_chunking(monkeypatch):
    pe = ConvSPE(1, 4, 8, 6, kernel_size=16)
    whole = pe.noise_from_seed(100, 5)
    monkeypatch.setattr(spe.conv, "CHUNK_BYTES", 3 * 6 * 120 * 4)     # 3 channels of R 6, FFT 120
    torch.testing.assert_close(pe.noise_from_seed(100, 5), whole, atol=0, rtol=0)
    assert not torch.equal(pe.noise_from_seed(100, 6), whole)


def test_seeded_noise_is_white_with_unit_variance_at_every_position():
    """4096 noises of period 64 (even) and 45 (odd): each sample N(0, 1) (the first and last
    positions included, where the zero and highest frequencies weigh most), uncorrelated with its
    neighbours, and periodic."""
    for size in (64, 45):
        spectra = SeededSpectra(3, 64, 64, (size,), torch.float64, torch.device("cpu"))
        x = spectra.noise(size, [slice(0, 64)]).reshape(-1, size)      # (4096, size)
        count = x.shape[0]
        assert float(x.mean(0).abs().max()) < 5 / math.sqrt(count)
        assert float((x.var(0) - 1).abs().max()) < 6 * math.sqrt(2 / count)
        for lag in (1, 2, size // 2):
            correlation = (x * x.roll(lag, dims=1)).mean(0)
            assert float(correlation.abs().max()) < 5 / math.sqrt(count)
        first = spectra.noise(size, [slice(0, 64)])
        torch.testing.assert_close(first, x.view(64, 64, size), atol=0, rtol=0)


def test_seeded_spectra_are_one_dimensional_and_bounded():
    with pytest.raises(ValueError, match="1-D"):
        SeededSpectra(0, 2, 2, (8, 8), torch.float32, torch.device("cpu"))
    spectra = SeededSpectra(0, 2, 2, (8,), torch.float32, torch.device("cpu"))
    with pytest.raises(ValueError, match="period 8"):
        spectra.noise(9, [slice(0, 2)])


def test_window_spectra_are_padded_transforms():
    z = torch.randn(3, 4, 10, dtype=torch.float64)
    spectra = WindowSpectra(z, (16,))
    torch.testing.assert_close(spectra.chunk(slice(1, 3)), torch.fft.rfft(z[:, 1:3], 16))
    image = torch.randn(2, 3, 5, 6, dtype=torch.float64)
    torch.testing.assert_close(padded_rfft(image, (8, 9)), torch.fft.rfftn(image, s=(8, 9), dim=(2, 3)))


def test_seeded_code_off_the_factored_path_reads_the_noise_given(monkeypatch):
    """Where the factored path does not apply (here the torch backend), `seeded_code` is `shared_code`
    on the noise of that seed: the caller's formed noise when given, else formed from the seed."""
    pe = ConvSPE(1, 2, 3, 5, kernel_size=4).double()
    noise = pe.noise_from_seed(10, 7)
    qbar, kbar = pe.codes(noise, 0, 10)
    formed = pe.seeded_code(7, 10, backend="torch")

    def forming(*args, **kwargs):
        raise AssertionError("formed the noise again")

    monkeypatch.setattr(ConvSPE, "noise_from_seed", forming)
    given = pe.seeded_code(7, 10, backend="torch", noise=noise)
    for code in (formed, given):
        assert code.backend == "torch"
        torch.testing.assert_close(code.codes[0], qbar.view(10, 2, 3, 5))
        torch.testing.assert_close(code.codes[1], kbar.view(10, 2, 3, 5))


def test_noise_from_a_seed_without_the_kernel(monkeypatch):
    """Without the compiled draw (other devices, no extension) the spectra come from the PyTorch
    reference, rows spaced out in the draw: the same noise to float32 rounding."""
    import spe.random

    pe = ConvSPE(1, 2, 3, 5, kernel_size=8)
    compiled = pe.noise_from_seed(40, 11)
    with kernels.plain():
        torch.testing.assert_close(pe.noise_from_seed(40, 11), compiled, atol=1e-5, rtol=1e-5)
