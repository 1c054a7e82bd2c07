"""convSPE: a vanishing relative kernel, obtained by filtering one white noise with two learned filters."""

import math
from typing import Optional, Sequence, Tuple, Union

import torch
from torch import nn
from torch.nn import functional as F

from spe import kernels
from spe.random import draw_seed, normal
from spe.shared import PendingGradients, SharedCode, storage_dtype
from spe.spectra import SeededSpectra, WindowSpectra, padded_rfft
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

    def code_parameter(self) -> torch.Tensor:
        """The parameter whose device and dtype the noise and codes take."""
        return self.conv_q.weight

    def draw_noise(self, length: Size, num_realizations: Optional[int] = None,
                   generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """White noise covering positions 0 .. length-1 plus the filter margin: (R, H*D, *(length + P - 1)),
        a counter-based draw (`spe.random`) keyed by a seed taken from `generator`."""
        return self.noise_from_seed(length, draw_seed(generator), num_realizations)

    def noise_from_seed(self, length: Size, seed: int, num_realizations: Optional[int] = None) -> torch.Tensor:
        """`draw_noise`'s noise for a given seed of `spe.random.normal` (the same seed, the same noise).

        1-D: the first length + P - 1 samples of R x H*D white noises of period `_fft_size` of that,
        drawn by their spectra (`spe.spectra.SeededSpectra`), so that `seeded_code` can filter them
        without forming them. 2-D, 3-D: drawn sample by sample."""
        size = self._as_tuple(length, "length")
        r = self.num_realizations if num_realizations is None else num_realizations
        weight = self.conv_q.weight
        padded = [s + p - 1 for s, p in zip(size, self.kernel_size)]
        if self.ndim != 1:
            return normal((r, weight.shape[0], *padded), seed, device=weight.device, dtype=weight.dtype)
        spectra = self._seeded_spectra(seed, r, padded[0])
        return spectra.noise(padded[0], _chunks(spectra))

    def _seeded_spectra(self, seed: int, realizations: int, samples: int) -> SeededSpectra:
        """The spectra `noise_from_seed` draws for noises of `samples` samples (1-D)."""
        weight = self.conv_q.weight
        return SeededSpectra(seed, realizations, weight.shape[0], (_fft_size(samples),), weight.dtype, weight.device)

    def codes(self, noise: torch.Tensor, start: Size, length: Size):
        """(qbar, kbar) at positions start .. start+length-1, each (1, *length, H, D, R), contiguous.

        Raises ValueError for positions beyond those the noise was drawn for.
        """
        z, fft_size, size = self._window(noise, start, length)
        outs = self._outs(size, z.shape[0], z.dtype)
        qbar, kbar = _FilteredNoise.apply(z, fft_size, size, outs, *self._filters(z.shape[0]))  # (S, H*D, R) each
        out_shape = (1, *size, self.num_heads, self.in_features, z.shape[0])
        return qbar.view(out_shape), kbar.view(out_shape)

    def shared_code(self, noise: torch.Tensor, start: Size, length: Size, backend: Optional[str] = None,
                    code_dtype: Optional[torch.dtype] = None) -> SharedCode:
        """`codes(noise, start, length)` as a SharedCode for several filters (the layers of a model).
        1-D with the compiled kernels (backend None or "compiled"): its gradient is taken without
        code-sized buffers, the layers' (x, grad, scale) triples turned into the filters' gradients a
        few heads at a time (`_ConvFactorGradients`), the noise window kept for that. `code_dtype`
        float16 stores float32 codes in half precision on the compiled path (`spe.shared.storage_dtype`)."""
        if not self._factored(noise, backend):
            return SharedCode(*self.codes(noise, start, length), backend)
        z, fft_size, size = self._window(noise, start, length)
        return self._factored_code(WindowSpectra(z, fft_size), size, code_dtype)

    def seeded_code(self, seed: int, length: int, num_realizations: Optional[int] = None,
                    backend: Optional[str] = None, code_dtype: Optional[torch.dtype] = None,
                    noise: Optional[torch.Tensor] = None) -> SharedCode:
        """`shared_code(noise_from_seed(length, seed, R), 0, length, backend, code_dtype)`, equal up to
        float rounding, without ever forming the noise where `shared_code` takes the factored path:
        the forward filters the noise's spectra drawn from the seed, the backward draws them again
        chunk by chunk. Elsewhere, that very call, on `noise` when the caller has it formed."""
        r = self.num_realizations if num_realizations is None else num_realizations
        weight = self.conv_q.weight
        if not self._factored(weight, backend):
            noise = self.noise_from_seed(length, seed, r) if noise is None else noise
            return self.shared_code(noise, 0, length, backend, code_dtype)
        size = self._as_tuple(length, "length")
        if size[0] < 1:
            raise ValueError(f"length must be >= 1, got {length}")
        return self._factored_code(self._seeded_spectra(seed, r, size[0] + self.kernel_size[0] - 1), size,
                                   code_dtype)

    def _factored(self, like: torch.Tensor, backend: Optional[str]) -> bool:
        """Whether a code of tensors like `like` takes its gradient in factored form (1-D, compiled)."""
        return self.ndim == 1 and backend in (None, "compiled") and kernels.kernels_for(like) is not None

    def _factored_code(self, spectra, size: Tuple[int, ...], code_dtype: Optional[torch.dtype]) -> SharedCode:
        """The SharedCode of the noise whose spectra are `spectra` at positions 0 .. size - 1 of them,
        its gradient in factored form (`_ConvFactorGradients`)."""
        R = spectra.realizations
        filters = self._filters(R)
        outs = self._outs(size, R, storage_dtype(spectra.dtype, code_dtype))
        with torch.no_grad():
            codes = _filter_noise(spectra, size, outs, [f.detach() for f in filters])  # (S, H*D, R) each
        shape = (codes[0].shape[0], self.num_heads, self.in_features, codes[0].shape[-1])
        gradients = _ConvFactorGradients(spectra, self.kernel_size, shape)
        return SharedCode.from_parts(tuple(c.view(shape) for c in codes), gradients, tuple(filters))

    def _window(self, noise: torch.Tensor, start: Size, length: Size):
        """(z, fft_size, size) of a code request: the noise window z (R, H*D, *(size + P - 1)),
        checked, and its FFT size."""
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
        return z, fft_size, size

    def _filters(self, realizations: int) -> list[torch.Tensor]:
        """The two filters (H*D, *P), scaled by (R D)^(-1/4) for a code of R realisations."""
        scale = (realizations * self.in_features) ** 0.25
        return [conv.weight[:, 0] / scale for conv in (self.conv_q, self.conv_k)]

    def _outs(self, size: Tuple[int, ...], realizations: int, dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
        """The two (S, H*D, R) workspace tensors of `dtype` to write the codes into."""
        code_shape = (math.prod(size), self.num_heads * self.in_features, realizations)
        weight = self.conv_q.weight                                     # (the device)
        return tuple(self._workspace.empty(name, code_shape, weight, dtype) for name in ("qbar", "kbar"))

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
    is a multiple of FFT_POWER: torch's CPU transforms of sizes with a large odd part cost 2.5-3x
    more per sample than the next size of this form (2187 = 3^7 against 2304, 16875 = 3^3 5^4
    against 17280; bench/README.md), and are never faster by more than the machine's noise."""
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
        return _filter_noise(WindowSpectra(z, fft_size), size, outs, filters)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, *grads):                                          # (S, C, R) each, or None
        (z,) = ctx.saved_tensors
        spectra = WindowSpectra(z, ctx.fft_size)
        grad_filters = [None if g is None else g.new_zeros(z.shape[1], *ctx.kernel_size) for g in grads]
        given = [t for t, g in enumerate(grads) if g is not None]
        for channels in _chunks(spectra):
            z_f = spectra.chunk(channels)                               # (R, c, *F'), again
            g_fs = [padded_rfft(_positions_last(grads[t][:, channels], ctx.size), ctx.fft_size) for t in given]
            for t, part in zip(given, _correlations(z_f, g_fs, ctx.fft_size, ctx.kernel_size)):
                grad_filters[t][channels] = part
        return (None, None, None, None, *grad_filters)


def _filter_noise(spectra: WindowSpectra | SeededSpectra, size: Tuple[int, ...],
                  outs: Tuple[torch.Tensor, ...], filters) -> Tuple[torch.Tensor, ...]:
    """`_FilteredNoise`'s forward on the noise given by its spectra: each filter's code written into
    its (S, C, R) out, a chunk of channels at a time. The spectra's weight (if any) multiplies the
    filters' conjugate spectra, computed once; the last filter's product is formed in place."""
    fft_size = spectra.fft_size
    dims = tuple(range(2, len(size) + 2))
    crop = (slice(None), slice(None), *(slice(0, n) for n in size))
    filter_fs = [torch.fft.rfftn(f, s=fft_size, dim=tuple(d - 1 for d in dims)).conj_physical()
                 for f in filters]                                      # (C, *F') each
    if spectra.weight is not None:
        filter_fs = [f.mul_(spectra.weight) for f in filter_fs]
    for channels in _chunks(spectra):
        z_f = spectra.chunk(channels)                                   # (R, c, *F'), a new tensor
        for t, (filter_f, out) in enumerate(zip(filter_fs, outs)):
            last = t == len(outs) - 1
            product = z_f.mul_(filter_f[channels]) if last else z_f * filter_f[channels]  # (R, c, *F')
            corr = torch.fft.irfftn(product, s=fft_size, dim=dims)[crop]  # (R, c, *size)
            swap_outer(corr.reshape(*corr.shape[:2], -1), out=out[:, channels])  # (S, c, R)
    return tuple(outs)


def _positions_last(grad: torch.Tensor, size: Tuple[int, ...]) -> torch.Tensor:
    """A chunk of a code's gradient (S, c, R) as signals along the positions (R, c, *size)."""
    g = swap_outer(grad)                                                # (R, c, S)
    return g.view(*g.shape[:2], *size)


def _correlations(z_f: torch.Tensor, g_fs: list, fft_size: Tuple[int, ...], kernel_size: Tuple[int, ...],
                  weight: Optional[torch.Tensor] = None) -> list:
    """For each g_f: sum_{r, m} g[r, c, m] z[r, c, m + p] for p < P (c, *P), from the spectra
    weight * z_f and g_f (R, c, *F'). The sum over r in the frequency domain is
    `spe_kernels.spectral_correlation` on CPU (the sums of a tile kept in registers, z_f read once for
    all g_f), else a loop of in-place multiply-adds (equal values); the weight (F') multiplies the sums."""
    compiled = kernels.kernels_for(z_f, dtypes=(torch.complex64, torch.complex128))
    c, spatial = z_f.shape[1], z_f.shape[2:]
    if compiled is not None:
        flat = [x.reshape(x.shape[0], c, -1) for x in (z_f, *g_fs)]    # (R, c, F') views
        spectra = [s.view(c, *spatial) for s in compiled.spectral_correlation(flat[0], flat[1:])]
    else:
        spectra = []
        for g_f in g_fs:
            spectrum = z_f[0] * g_f[0].conj()                           # (c, *F'): sum over r
            for r in range(1, z_f.shape[0]):
                spectrum.addcmul_(z_f[r], g_f[r].conj())
            spectra.append(spectrum)
    if weight is not None:
        spectra = [spectrum.mul_(weight) for spectrum in spectra]
    dims = tuple(range(1, len(fft_size) + 1))
    crop = (slice(None), *(slice(0, p) for p in kernel_size))
    return [torch.fft.irfftn(spectrum, s=fft_size, dim=dims)[crop] for spectrum in spectra]  # (c, *P) each


class _ConvFactorGradients(PendingGradients):
    """A 1-D convSPE code's gradients in factored form: each flush (at the end of the backward, both
    codes together) forms the code gradient of a few heads at a time, the layers' triples summed
    by the compiled kernel straight into the FFT's zero-padded (R, c, F) layout, and turns it into
    the filters' gradients by FFT, as `_FilteredNoise`'s backward does for a whole code gradient.
    The noise's spectra come from `spectra`: a kept window's, or drawn again from a seed.
    Inputs: the two scaled filters (H*D, P)."""

    def __init__(self, spectra: WindowSpectra | SeededSpectra, kernel_size: Tuple[int, ...],
                 shape: Tuple[int, int, int, int]) -> None:
        super().__init__()
        self.spectra, self.kernel_size = spectra, kernel_size
        self.dtype, self.device, self.fft_size = spectra.dtype, spectra.device, spectra.fft_size
        self.shape = shape                                              # (S, H, D, R) of each code
        self.grads: list[Optional[torch.Tensor]] = [None, None]

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
            z_f = self.spectra.chunk(channels)                          # (R, c, F')
            signal = torch.empty(R, (h1 - h0) * D, self.fft_size[0], dtype=self.dtype, device=self.device)
            g_fs = []
            for which, positions, triples in groups:                    # signal: G (R, c, F), zero-padded
                signal[..., positions:].zero_()
                kernels.module().accumulate_positions_last(
                    signal[..., :positions], [x.to(self.dtype) for x, _, _ in triples],
                    [g.to(self.dtype) for _, g, _ in triples],
                    [None if a is None else a.to(self.dtype).contiguous() for _, _, a in triples], h0)
                g_fs.append(torch.fft.rfft(signal))                     # (R, c, F')
            parts = _correlations(z_f, g_fs, self.fft_size, self.kernel_size, self.spectra.weight)
            for (which, _, _), part in zip(groups, parts):
                self.grads[which][channels] += part

    def result(self) -> list[Optional[torch.Tensor]]:
        grads, self.grads = self.grads, [None, None]
        return grads


def _chunks(spectra: WindowSpectra | SeededSpectra) -> list[slice]:
    """Slices of the spectra's channels of `_chunk_channels` channels each."""
    step = _chunk_channels(spectra.realizations, spectra.dtype, spectra.device, spectra.fft_size)
    return [slice(c, min(c + step, spectra.channels)) for c in range(0, spectra.channels, step)]


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
    compiled = kernels.kernels_for(x)
    if compiled is not None:
        return compiled.swap_outer(x, out)
    if out is None:
        return x.permute(2, 1, 0).contiguous()
    return out.copy_(x.permute(2, 1, 0))
