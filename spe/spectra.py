"""convSPE's noise in the frequency domain, a chunk of channels at a time.

convSPE filters one white noise Z (R, C, *n) with two filters by products of spectra. Its FFT code
path needs the noise only as a spectrum Z_f (R, C, *F'), F' the rfft's half size of F >= n. Two
sources give it chunk by chunk, so that no temporary is larger than a chunk:

- `WindowSpectra`: the rfft of a noise window held in memory, zero-padded to F;
- `SeededSpectra` (1-D): the spectrum of a white noise of period F drawn directly from a seed of
  `spe.random.normal`, Z_f = weight * zeta, zeta i.i.d. complex with N(0, 1) real and imaginary
  parts. weight is sqrt(F / 2) at the inner frequencies and sqrt(F) at 0 (and F / 2 for an even F),
  where the inverse transform reads only the real part: irfft(Z_f) is then exactly i.i.d. N(0, 1)
  over its F samples. A training pass filters this spectrum without ever forming the noise, and
  its backward draws the same chunks again: two forward FFTs of noise-sized signals fewer per step
  than transforming a noise drawn sample by sample (bench/README.md).

`weight` is the real factor (F',) that multiplies `chunk`'s values to give the true spectrum (None:
they are the spectrum): the callers fold it into the filters' spectra (forward) and into the
correlations' sums (backward) instead of scaling noise-sized chunks.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch

from spe.random import normal


class WindowSpectra:
    """Spectra of a noise window z (R, C, *n) held in memory, each zero-padded to fft_size."""

    weight: Optional[torch.Tensor] = None

    def __init__(self, z: torch.Tensor, fft_size: Tuple[int, ...]) -> None:
        self.z, self.fft_size = z, fft_size
        self.realizations, self.channels = z.shape[:2]
        self.dtype, self.device = z.dtype, z.device

    def chunk(self, channels: slice) -> torch.Tensor:
        """The spectra of these channels: (R, c, *F'), a new tensor."""
        return padded_rfft(self.z[:, channels], self.fft_size)


class SeededSpectra:
    """Spectra of R x C white noises of period fft_size (1-D) drawn from `seed` (module docstring):
    the values of realisation r, channel c are the 2 F' samples from (r C + c) 2 F' on, read as F'
    complex numbers (real, imaginary)."""

    def __init__(self, seed: int, realizations: int, channels: int, fft_size: Tuple[int, ...],
                 dtype: torch.dtype, device: torch.device) -> None:
        if len(fft_size) != 1:
            raise ValueError(f"noise spectra drawn from a seed are 1-D, got FFT size {fft_size}")
        self.seed, self.fft_size = seed, fft_size
        self.realizations, self.channels = realizations, channels
        self.dtype, self.device = dtype, torch.device(device)
        size = fft_size[0]
        weight = torch.full((size // 2 + 1,), math.sqrt(size / 2), dtype=dtype, device=device)
        weight[0] = math.sqrt(size)
        if size % 2 == 0:
            weight[-1] = math.sqrt(size)
        self.weight = weight                                            # (F',)

    def chunk(self, channels: slice) -> torch.Tensor:
        """zeta of these channels: (R, c, F') complex, a new tensor (drawn again at each call)."""
        half = self.fft_size[0] // 2 + 1
        R, C, c0 = self.realizations, self.channels, channels.start
        out = torch.empty(R, channels.stop - c0, half, 2, dtype=self.dtype, device=self.device)
        normal(out.shape, self.seed, c0 * 2 * half, out=out, row_stride=C * 2 * half)
        return torch.view_as_complex(out)                              # (R, c, F')

    def noise(self, length: int, channel_chunks: list[slice]) -> torch.Tensor:
        """The first `length` samples of the noises: (R, C, length) real, a chunk at a time."""
        size = self.fft_size[0]
        if not 0 < length <= size:
            raise ValueError(f"a noise of period {size} has no {length} first samples")
        out = torch.empty(self.realizations, self.channels, length, dtype=self.dtype, device=self.device)
        for channels in channel_chunks:
            spectrum = self.chunk(channels).mul_(self.weight)          # (R, c, F')
            out[:, channels] = torch.fft.irfft(spectrum, size)[..., :length]
        return out


def padded_rfft(x: torch.Tensor, fft_size: Tuple[int, ...]) -> torch.Tensor:
    """rfftn over the trailing len(fft_size) dimensions of x, zero-padded to fft_size. In 1-D the
    signal is copied into a padded buffer first (what rfft's own padding does with an extra pass)."""
    if len(fft_size) > 1:
        return torch.fft.rfftn(x, s=fft_size, dim=tuple(range(x.dim() - len(fft_size), x.dim())))
    n = x.shape[-1]
    padded = x.new_empty(*x.shape[:-1], fft_size[0])
    padded[..., :n].copy_(x)
    padded[..., n:].zero_()
    return torch.fft.rfft(padded)
