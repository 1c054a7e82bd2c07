"""convSPE: a vanishing relative kernel, obtained by filtering one white noise with two learned filters."""

import math
from typing import Optional, Sequence, Tuple, Union

import torch
from torch import nn
from torch.nn import functional as F

from spe.contract import backend_for, compiled_kernels
from spe.random import draw_seed, normal
from spe.shared import PendingGradients, SharedCode, storage_dtype
from spe.workspace import Workspace

Size = Union[int, Sequence[int]]
# bytes of one channel chunk's signal (R, channels, *fft_size): the FFTs run chunk by chunk, so that
# their temporaries stay small enough for the allocator to reuse (below glibc's 32 MiB mmap threshold)
CHUNK_BYTES = 8 * 2**20
FFT_POWER, FFT_POWER_FROM = 32, 512  # FFT sizes from 512 on are multiples of 32 (`_fft_size`)

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
        self._workspace = Workspace()  # the last call's two codes, reused when free

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
        """White noise covering positions 0 .. length-1 plus the filter margin: (R, H*D, *(length + P - 1)),
        a counter-based draw (`spe.random`) keyed by a seed taken from `generator`."""
        return self.noise_from_seed(length, draw_seed(generator), num_realizations)

    def noise_from_seed(self, length: Size, seed: int, num_realizations: Optional[int] = None) -> torch.Tensor:
        """`draw_noise`'s noise for a given seed of `spe.random.normal` (the same seed, the same noise)."""
        size = self._as_tuple(length, "length")
        r = self.num_realizations if num_realizations is None else num_realizations
        weight = self.conv_q.weight
        padded = [s + p - 1 for s, p in zip(size, self.kernel_size)]
        return normal((r, weight.shape[0], *padded), seed, device=weight.device, dtype=weight.dtype)

    def codes(self, noise: torch.Tensor, start: Size, length: Size):
        """(qbar, kbar) at positions start .. start+length-1, each (1, *length, H, D, R), contiguous.

        Raises ValueError for positions beyond those the noise was drawn for.
        """
        z, fft_size, size, filters, outs = self._prepare(noise, start, length)
        qbar, kbar = _FilteredNoise.apply(z, fft_size, size, outs, *filters)  # (S, H*D, R) each
        out_shape = (1, *size, self.num_heads, self.in_features, z.shape[0])
        return qbar.view(out_shape), kbar.view(out_shape)

    def shared_code(self, noise: torch.Tensor, start: Size, length: Size, backend: Optional[str] = None,
                    seed: Optional[int] = None, code_dtype: Optional[torch.dtype] = None) -> SharedCode:
        """`codes(noise, start, length)` as a SharedCode for several filters (the layers of a model).
        1-D with the compiled kernels (backend None or "compiled"): its gradient is taken without
        code-sized buffers, the layers' (x, grad, scale) triples turned into the filters' gradients a
        few heads at a time (`_ConvFactorGradients`). With `seed`, the seed `noise` was drawn from
        (`noise_from_seed`; not checked), and positions covering the whole noise, the backward draws
        the noise again chunk by chunk instead of keeping it through the step. `code_dtype` float16
        stores float32 codes in half precision on the compiled path (`spe.shared.storage_dtype`)."""
        if self.ndim != 1 or backend not in (None, "compiled") or backend_for(noise) != "compiled" \
                or not hasattr(compiled_kernels(), "accumulate_positions_last"):  # (or an older build)
            return SharedCode(*self.codes(noise, start, length), backend)
        z, fft_size, size, filters, outs = self._prepare(noise, start, length, storage_dtype(noise.dtype, code_dtype))
        with torch.no_grad():
            codes = _filter_noise(z, fft_size, size, outs, [f.detach() for f in filters])  # (S, H*D, R) each
        shape = (codes[0].shape[0], self.num_heads, self.in_features, codes[0].shape[-1])
        whole = z.shape == noise.shape                                  # the window is all of the noise
        gradients = _ConvFactorGradients(z, fft_size, size, self.kernel_size, shape, seed if whole else None)
        return SharedCode.from_parts(tuple(c.view(shape) for c in codes), gradients, tuple(filters))

    def _prepare(self, noise: torch.Tensor, start: Size, length: Size, dtype: Optional[torch.dtype] = None):
        """(z, fft_size, size, filters, outs) of a code request: the noise window z (R, H*D,
        *(size + P - 1)), checked, its FFT size, the filters (H*D, *P) scaled, the two (S, H*D, R)
        workspace tensors to write the codes into (of the noise's dtype, or `dtype`)."""
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
        fft_size = tuple(_fft_size(n) for n in z.shape[2:])             # >= size + P - 1: no wrap-around
        scale = (z.shape[0] * self.in_features) ** 0.25
        filters = [conv.weight[:, 0] / scale for conv in (self.conv_q, self.conv_k)]  # (H*D, *P) each
        code_shape = (math.prod(size), channels, z.shape[0])            # (S, H*D, R)
        outs = tuple(self._workspace.empty(name, code_shape, z, dtype) for name in ("qbar", "kbar"))
        return z, fft_size, size, filters, outs

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
    """Smallest integer >= n whose prime factors are 2, 3 and 5 and which, from FFT_POWER_FROM on,
    is a multiple of FFT_POWER: torch's CPU transforms of sizes with a large odd part took 2.5-3x
    longer per sample than the next size of this form (2187 = 3^7 against 2304, 16875 = 3^3 5^4
    against 17280; bench/README.md), and were never faster by more than the machine's noise."""
    while True:
        rest = n
        for prime in (2, 3, 5):
            while rest % prime == 0:
                rest //= prime
        if rest == 1 and (n < FFT_POWER_FROM or n % FFT_POWER == 0):
            return n
        n += 1


class _FilteredNoise(torch.autograd.Function):
    """Both codes from the noise: cross-correlation with each filter as a product of spectra (the
    noise's by the filter's conjugate), one inverse FFT, then the positions-first layout of the
    contraction, a chunk of channels at a time (`CHUNK_BYTES`).

    Forward: z (R, C, *(size + P - 1)) the noise window (no gradient), fft_size, size, outs (two
    (S, C, R) tensors to write the codes into, S = prod(size), C = H*D), filters (C, *P) -> the two
    codes. Per chunk, the noise's spectrum is shared by both filters; no temporary is larger than
    a chunk (a fresh 100+ MiB tensor costs a page fault per 4 KiB: training/memory.py).
    Backward: grad_filter[c, p] = sum_{r, m} g[m, c, r] z[r, c, m + p], i.e. the inverse FFT of
    sum_r z_f[r, c] conj(g_f[r, c]), cropped to the filter: one FFT per chunk of each code gradient,
    the noise's spectrum computed again rather than kept through the step (it would be the size of
    a code).
    """

    @staticmethod
    def forward(ctx, z, fft_size, size, outs, *filters):
        ctx.save_for_backward(z)                                        # a view of the caller's noise
        ctx.fft_size, ctx.size, ctx.kernel_size = fft_size, size, filters[0].shape[1:]
        return _filter_noise(z, fft_size, size, outs, filters)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, *grads):                                          # (S, C, R) each, or None
        (z,) = ctx.saved_tensors
        grad_filters = [None if g is None else g.new_zeros(z.shape[1], *ctx.kernel_size) for g in grads]
        given = [t for t, g in enumerate(grads) if g is not None]
        for channels in _chunks(z, ctx.fft_size):
            z_f = _padded_rfft(z[:, channels], ctx.fft_size)            # (R, c, *F'), again
            g_fs = [_padded_rfft(_positions_last(grads[t][:, channels], ctx.size), ctx.fft_size) for t in given]
            for t, part in zip(given, _correlations(z_f, g_fs, ctx.fft_size, ctx.kernel_size)):
                grad_filters[t][channels] = part
        return (None, None, None, None, *grad_filters)


def _filter_noise(z: torch.Tensor, fft_size: Tuple[int, ...], size: Tuple[int, ...],
                  outs: Tuple[torch.Tensor, ...], filters) -> Tuple[torch.Tensor, ...]:
    """`_FilteredNoise`'s forward: each filter's code written into its (S, C, R) out, a chunk of
    channels at a time."""
    dims = tuple(range(2, len(size) + 2))
    crop = (slice(None), slice(None), *(slice(0, n) for n in size))
    filter_fs = [torch.fft.rfftn(f, s=fft_size, dim=tuple(d - 1 for d in dims)) for f in filters]  # (C, *F')
    for channels in _chunks(z, fft_size):
        z_f = _padded_rfft(z[:, channels], fft_size)                    # (R, c, *F')
        for filter_f, out in zip(filter_fs, outs):
            product = z_f * filter_f[channels].conj()                   # (R, c, *F')
            corr = torch.fft.irfftn(product, s=fft_size, dim=dims)[crop]  # (R, c, *size)
            swap_outer(corr.reshape(*corr.shape[:2], -1), out=out[:, channels])  # (S, c, R)
    return tuple(outs)


def _positions_last(grad: torch.Tensor, size: Tuple[int, ...]) -> torch.Tensor:
    """A chunk of a code's gradient (S, c, R) as signals along the positions (R, c, *size)."""
    g = swap_outer(grad)                                                # (R, c, S)
    return g.view(*g.shape[:2], *size)


def _correlations(z_f: torch.Tensor, g_fs: list, fft_size: Tuple[int, ...], kernel_size: Tuple[int, ...]
                  ) -> list:
    """For each g_f: sum_{r, m} g[r, c, m] z[r, c, m + p] for p < P (c, *P), from the spectra z_f and
    g_f (R, c, *F'). The sum over r in the frequency domain is `spe_kernels.spectral_correlation` on
    CPU (the sums of a tile kept in registers, z_f read once for all g_f), else a loop of in-place
    multiply-adds (equal values)."""
    kernels = compiled_kernels()
    c, spatial = z_f.shape[1], z_f.shape[2:]
    if kernels is not None and hasattr(kernels, "spectral_correlation") and z_f.device.type == "cpu" \
            and z_f.dtype in (torch.complex64, torch.complex128):
        flat = [x.reshape(x.shape[0], c, -1) for x in (z_f, *g_fs)]    # (R, c, F') views
        spectra = [s.view(c, *spatial) for s in kernels.spectral_correlation(flat[0], flat[1:])]
    else:
        spectra = []
        for g_f in g_fs:
            spectrum = z_f[0] * g_f[0].conj()                           # (c, *F'): sum over r
            for r in range(1, z_f.shape[0]):
                spectrum.addcmul_(z_f[r], g_f[r].conj())
            spectra.append(spectrum)
    dims = tuple(range(1, len(fft_size) + 1))
    crop = (slice(None), *(slice(0, p) for p in kernel_size))
    return [torch.fft.irfftn(spectrum, s=fft_size, dim=dims)[crop] for spectrum in spectra]  # (c, *P) each


class _ConvFactorGradients(PendingGradients):
    """A 1-D convSPE code's gradients in factored form: each flush (at the end of the backward, both
    codes together) forms the code gradient of a few heads at a time, the layers' triples summed
    by the compiled kernel straight into the FFT's zero-padded (R, c, F) layout, and turns it into
    the filters' gradients by FFT, as `_FilteredNoise`'s backward does for a whole code gradient.
    Inputs: the two scaled filters (H*D, P)."""

    def __init__(self, z: torch.Tensor, fft_size: Tuple[int, ...], size: Tuple[int, ...],
                 kernel_size: Tuple[int, ...], shape: Tuple[int, int, int, int], seed: Optional[int] = None) -> None:
        super().__init__()
        # the noise z (R, C, n): kept, or drawn again from its seed (`spe.random.normal`) when given
        self.z, self.seed = (None, seed) if seed is not None else (z, None)
        self.noise_shape, self.dtype, self.device = tuple(z.shape), z.dtype, z.device
        self.fft_size, self.size, self.kernel_size = fft_size, size, kernel_size
        self.shape = shape                                              # (S, H, D, R) of each code
        self.grads: list[Optional[torch.Tensor]] = [None, None]

    def noise(self, channels: slice) -> torch.Tensor:
        """The noise's channels (R, c, n): a view of the kept noise, or drawn again (the rows of
        realisation r start at sample (r C + c0) n of the draw)."""
        if self.z is not None:
            return self.z[:, channels]
        R, C, n = self.noise_shape
        out = torch.empty(R, channels.stop - channels.start, n, dtype=self.dtype, device=self.device)
        for r in range(R):
            normal(out.shape[1:], self.seed, (r * C + channels.start) * n, out=out[r])
        return out

    def add_groups(self, groups: list) -> None:
        """Each chunk of heads: the noise's spectrum there once, then for each (which, positions,
        triples) group the code gradient's chunk, formed positions-last straight into a padded
        signal (`spe_kernels.accumulate_positions_last`), and its filter gradient."""
        S, H, D, R = self.shape
        for which, _, _ in groups:
            if self.grads[which] is None:
                self.grads[which] = torch.zeros(H * D, *self.kernel_size, dtype=self.dtype, device=self.device)
        step = max(1, _chunk_channels(R, self.dtype, self.device, self.fft_size) // D)  # whole heads per chunk
        for h0 in range(0, H, step):
            h1 = min(H, h0 + step)
            channels = slice(h0 * D, h1 * D)
            z_f = _padded_rfft(self.noise(channels), self.fft_size)     # (R, c, F')
            signal = torch.empty(R, (h1 - h0) * D, self.fft_size[0], dtype=self.dtype, device=self.device)
            g_fs = []
            for which, positions, triples in groups:                    # signal: G (R, c, F), zero-padded
                signal[..., positions:].zero_()
                compiled_kernels().accumulate_positions_last(
                    signal[..., :positions], [x.to(self.dtype) for x, _, _ in triples],
                    [g.to(self.dtype) for _, g, _ in triples],
                    [None if a is None else a.to(self.dtype).contiguous() for _, _, a in triples], h0)
                g_fs.append(torch.fft.rfft(signal))                     # (R, c, F')
            for (which, _, _), part in zip(groups, _correlations(z_f, g_fs, self.fft_size, self.kernel_size)):
                self.grads[which][channels] += part

    def result(self) -> list[Optional[torch.Tensor]]:
        grads, self.grads = self.grads, [None, None]
        return grads


def _chunks(z: torch.Tensor, fft_size: Tuple[int, ...]):
    """Slices of z's channels (dimension 1) of `_chunk_channels` channels each."""
    step = _chunk_channels(z.shape[0], z.dtype, z.device, fft_size)
    return [slice(c, min(c + step, z.shape[1])) for c in range(0, z.shape[1], step)]


def _chunk_channels(realizations: int, dtype: torch.dtype, device: torch.device, fft_size: Tuple[int, ...]) -> int:
    """Channels of a noise (R, C, ...) whose padded signal holds about CHUNK_BYTES on the CPU
    (glibc's allocator is the reason); elsewhere no limit (a bound above any C: all at once)."""
    if device.type != "cpu":
        return 2**62
    return max(1, CHUNK_BYTES // (realizations * math.prod(fft_size) * dtype.itemsize))


def swap_outer(x: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """(A, C, B) -> (B, C, A): a new contiguous tensor, or written into `out` (its last dimension
    contiguous). The compiled tiled copy on CPU (float32 / float64), torch's permuted copy otherwise
    (equal values)."""
    kernels = compiled_kernels()
    if kernels is not None and x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64):
        return kernels.swap_outer(x, out)
    if out is None:
        return x.permute(2, 1, 0).contiguous()
    return out.copy_(x.permute(2, 1, 0))


def _padded_rfft(x: torch.Tensor, fft_size: Tuple[int, ...]) -> torch.Tensor:
    """rfftn over the trailing len(fft_size) dimensions of x, zero-padded to fft_size. In 1-D the
    signal is copied into a padded buffer first (what rfft's own padding does with an extra pass)."""
    if len(fft_size) > 1:
        return torch.fft.rfftn(x, s=fft_size, dim=tuple(range(x.dim() - len(fft_size), x.dim())))
    n = x.shape[-1]
    padded = x.new_empty(*x.shape[:-1], fft_size[0])
    padded[..., :n].copy_(x)
    padded[..., n:].zero_()
    return torch.fft.rfft(padded)
