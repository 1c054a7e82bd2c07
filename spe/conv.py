"""convSPE: a vanishing relative kernel, obtained by filtering one white noise with two learned filters."""

import math
from typing import Optional, Sequence, Tuple, Union

import torch
from torch import nn
from torch.nn import functional as F

Size = Union[int, Sequence[int]]

_CONV_MODULES = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}
_CONV_FUNCTIONS = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}  # for the (small) exact template


class ConvSPE(nn.Module):
    """Code generator for convolutive SPE on regularly sampled signals of `ndim` dimensions.

    One white noise Z per (head, d) and realisation is cross-correlated with two learned filters of
    size P (no padding; the noise has P - 1 extra samples per dimension, so that position m uses
    Z[m .. m+P-1]). The filters are held in Conv modules `conv_q`, `conv_k` (as in the reference
    package) and applied by FFT, which is much faster than grouped convolutions for P ~ 100s:

        Qbar(m) = sum_p phi_Q(p) Z(m + p),   Kbar(n) = sum_p phi_K(p) Z(n + p)
        P_d(m, n) = sum_p phi_Q(p) phi_K(p + m - n)   (zero whenever |m - n| >= P in some dimension)

    Args:
        ndim: number of signal dimensions (1 = sequence, 2 = image, 3 = volume).
        num_heads: number of attention heads H.
        in_features: features per head D.
        num_realizations: default number of realisations R.
        kernel_size: filter size P (an int, or one per dimension).
    """

    def __init__(self, ndim: int = 1, num_heads: int = 8, in_features: int = 64, num_realizations: int = 256,
                 kernel_size: Size = 200):
        super().__init__()
        if ndim not in _CONV_MODULES:
            raise ValueError(f"ndim must be 1, 2 or 3, got {ndim}")
        self.ndim = ndim
        self.num_heads = num_heads
        self.in_features = in_features
        self.num_realizations = num_realizations
        self.kernel_size = self._as_tuple(kernel_size, "kernel_size")
        self.code_shape = (num_heads, in_features)
        channels = num_heads * in_features
        scale = math.sqrt(math.prod(self.kernel_size) / 2)
        # phi_Q and phi_K: one filter per (head, d) channel, weights (H*D, 1, *P), uniform [0, 1) / sqrt(P / 2)
        self.conv_q = _CONV_MODULES[ndim](channels, channels, self.kernel_size, groups=channels, bias=False)
        self.conv_k = _CONV_MODULES[ndim](channels, channels, self.kernel_size, groups=channels, bias=False)
        for conv in (self.conv_q, self.conv_k):
            nn.init.uniform_(conv.weight, 0.0, 1.0)
            conv.weight.data /= scale

    def forward(self, shape: Sequence[int], num_realizations: Optional[int] = None):
        """One fresh draw for inputs of outer shape (batch, *size): (qbar, kbar), each (1, *size, H, D, R)."""
        if len(shape) != self.ndim + 1:
            raise ValueError(f"ConvSPE(ndim={self.ndim}) expects shape (batch, *size) of length {self.ndim + 1}, "
                             f"got {tuple(shape)}")
        size = tuple(shape[1:])
        noise = self.draw_noise(size, num_realizations)
        return self.codes(noise, (0,) * self.ndim, size)

    def draw_noise(self, length: Size, num_realizations: Optional[int] = None,
                   generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """White noise covering positions 0 .. length-1 plus the filter margin: (R, H*D, *(length + P - 1))."""
        size = self._as_tuple(length, "length")
        r = self.num_realizations if num_realizations is None else num_realizations
        weight = self.conv_q.weight
        padded = [s + p - 1 for s, p in zip(size, self.kernel_size)]
        return torch.randn(r, weight.shape[0], *padded, generator=generator, device=weight.device,
                           dtype=weight.dtype)

    def codes(self, noise: torch.Tensor, start: Size, length: Size):
        """(qbar, kbar) at positions start .. start+length-1, each (1, *length, H, D, R), contiguous.

        Raises ValueError for positions beyond those the noise was drawn for.
        """
        channels = self.num_heads * self.in_features
        if noise.dim() != self.ndim + 2 or noise.shape[1] != channels:
            raise ValueError(f"noise must have shape (R, {channels}, *padded size) with {self.ndim} size "
                             f"dimension(s), got {tuple(noise.shape)}")
        start, size = self._as_tuple(start, "start"), self._as_tuple(length, "length")
        window = [slice(None), slice(None)]
        for dim, (s, n, p) in enumerate(zip(start, size, self.kernel_size)):
            drawn = noise.shape[2 + dim] - p + 1
            if s < 0 or n < 1 or s + n > drawn:
                raise ValueError(f"positions {s} .. {s + n - 1} (dimension {dim}) are outside the "
                                 f"{drawn} positions this noise was drawn for")
            window.append(slice(s, s + n + p - 1))
        z = noise[tuple(window)]                                        # (R, H*D, *(size + P - 1))
        r = noise.shape[0]
        dims = tuple(range(2, self.ndim + 2))
        fft_size = [_fft_size(n) for n in z.shape[2:]]                  # >= size + P - 1: no wrap-around
        z_f = torch.fft.rfftn(z, s=fft_size, dim=dims)                  # (R, H*D, *F'), shared by q and k
        scale = (r * self.in_features) ** 0.25
        order = (*range(2, self.ndim + 2), 1, 0)                        # (*size, H*D, R)
        out_shape = (1, *size, self.num_heads, self.in_features, r)
        crop = (slice(None), slice(None), *(slice(0, n) for n in size))
        pair = []  # cross-correlation with phi: multiply by the conjugate spectrum
        for conv in (self.conv_q, self.conv_k):
            filt = conv.weight[:, 0] / scale                            # (H*D, *P): phi / (R D)^(1/4)
            filt_f = torch.fft.rfftn(filt, s=fft_size, dim=tuple(d - 1 for d in dims))  # (H*D, *F')
            corr = torch.fft.irfftn(z_f * filt_f.conj(), s=fft_size, dim=dims)[crop]  # (R, H*D, *size)
            pair.append(corr.permute(order).contiguous().view(out_shape))  # (1, *size, H, D, R)
        return pair[0], pair[1]

    def expected_template(self, length: Size) -> torch.Tensor:
        """Exact R -> infinity kernel P_d(m, n) over the flattened positions: (H, D, S, S), S = prod(length)."""
        size = self._as_tuple(length, "length")
        channels = self.num_heads * self.in_features
        conv = _CONV_FUNCTIONS[self.ndim]
        # cross-correlation of the filters: c[lag + P - 1] = sum_p phi_Q(p) phi_K(p + lag), lag = m - n
        padding = tuple(p - 1 for p in self.kernel_size)
        corr = conv(self.conv_k.weight.transpose(0, 1), self.conv_q.weight, padding=padding,
                    groups=channels)[0]                                 # (H*D, *(2P - 1))
        grids = torch.meshgrid(*[torch.arange(s, device=corr.device) for s in size], indexing="ij")
        positions = torch.stack([g.reshape(-1) for g in grids], dim=-1)  # (S, ndim)
        lags = positions[:, None, :] - positions[None, :, :]            # (S, S, ndim): m - n
        bound = torch.tensor(self.kernel_size, device=corr.device)
        inside = (lags.abs() < bound).all(dim=-1)                       # (S, S)
        index = (lags + bound - 1).clamp(min=0)
        index = torch.minimum(index, 2 * bound - 2)                     # (S, S, ndim), valid where inside
        template = corr[(slice(None), *index.unbind(-1))] * inside       # (H*D, S, S)
        return template.view(self.num_heads, self.in_features, *inside.shape)  # (H, D, S, S)

    def _as_tuple(self, value: Size, name: str) -> Tuple[int, ...]:
        """An int, or a sequence of ndim ints, as a tuple of ndim ints."""
        if isinstance(value, int):
            return (value,) * self.ndim
        value = tuple(int(v) for v in value)
        if len(value) != self.ndim:
            raise ValueError(f"{name} must be an int or {self.ndim} ints, got {value}")
        return value


def _fft_size(n: int) -> int:
    """Smallest integer >= n whose prime factors are 2, 3 and 5 (fast FFT sizes)."""
    while True:
        rest = n
        for prime in (2, 3, 5):
            while rest % prime == 0:
                rest //= prime
        if rest == 1:
            return n
        n += 1
