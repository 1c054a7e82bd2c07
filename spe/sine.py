"""sineSPE: a periodic relative kernel, evaluable at any position without building the sequence."""

import math
from typing import Optional, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from spe import kernels
from spe.factorised import FactorisedCode
from spe.shared import SharedCode, factored_available
from spe.workspace import Workspace

ROTATION_BLOCK = 128  # positions per fine table of `SineSPE._rotated_omegas`


class SineSPE(nn.Module):
    """Code generator for sinusoidal SPE.

    Per (head, feature d), K sinusoids with frequency f_k = sigmoid(freqs) / 2 in [0, 1/2], phase
    offset theta_k (queries only) and gain lambda_k = softplus(gains):

        Qbar(m) = Omega_q(m) Z,  Kbar(n) = Omega_k(n) Z,  Z ~ N(0, 1) lambda / sqrt(2K)   (2K x R)
        P_d(m, n) = (1 / 2K) sum_k lambda_k^2 cos(2 pi f_k (m - n) + theta_k)

    Args:
        num_heads: number of attention heads H.
        in_features: features per head D.
        num_realizations: default number of realisations R.
        num_sines: number of sinusoids K.
    """

    def __init__(self, num_heads: int = 8, in_features: int = 64, num_realizations: int = 256,
                 num_sines: int = 1):
        super().__init__()
        self.num_heads = num_heads
        self.in_features = in_features
        self.num_realizations = num_realizations
        self.num_sines = num_sines
        self.code_shape = (num_heads, in_features)
        shape = (num_heads, in_features, num_sines)
        # raw frequencies: N(0, 1) - 4 favours low frequencies (long-range kernels)
        self.freqs = nn.Parameter(torch.randn(shape) - 4.0)
        # phase offsets theta_k applied to the queries' sinusoids
        self.offsets = nn.Parameter(torch.randn(shape))
        # raw gains (softplus gives lambda_k); N(0, 1) rescaled per (head, d) by 2 / sqrt(norm over k)
        gains = torch.randn(shape)
        self.gains = nn.Parameter(2.0 * gains / gains.norm(dim=-1, keepdim=True).sqrt())
        self._workspace = Workspace()  # the last shared_code's two codes, reused when free

    def forward(self, shape: Sequence[int], num_realizations: Optional[int] = None):
        """One fresh draw for inputs of outer shape (batch, length): (qbar, kbar), each (1, L, H, D, R)."""
        if len(shape) != 2:
            raise ValueError(f"SineSPE supports 1-D inputs only: shape must be (batch, length), got {tuple(shape)}")
        noise = self.draw_noise(shape[1], num_realizations)
        return self.codes(noise, 0, shape[1])

    def code_parameter(self) -> torch.Tensor:
        """The parameter whose device and dtype the noise and codes take."""
        return self.freqs

    def draw_noise(self, length: Optional[int] = None, num_realizations: Optional[int] = None,
                   generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """The random part of one realisation: (H, D, 2K, R) i.i.d. N(0, 1).

        It does not depend on `length` (accepted for a uniform API): any position can be evaluated.
        """
        r = self.num_realizations if num_realizations is None else num_realizations
        return torch.randn(self.num_heads, self.in_features, 2 * self.num_sines, r, generator=generator,
                           device=self.freqs.device, dtype=self.freqs.dtype)

    def codes(self, noise: torch.Tensor, start: int, length: int):
        """(qbar, kbar) at positions start .. start+length-1, each (1, length, H, D, R), contiguous."""
        omega_q, omega_k, z = self._factors(noise, start, length)
        qbar, kbar = sine_code(omega_q, z), sine_code(omega_k, z)       # (L, H, D, R) each
        return qbar.unsqueeze(0), kbar.unsqueeze(0)                     # (1, L, H, D, R)

    def shared_code(self, noise: torch.Tensor, start: int, length: int, backend: Optional[str] = None,
                    code_dtype: Optional[torch.dtype] = None) -> SharedCode:
        """`codes(noise, start, length)` as a SharedCode for several filters (the layers of a model).
        With the compiled kernels (backend None or "compiled"), its gradient is taken in factored form
        (`SharedCode.sine`: no code-sized gradient buffer, no autograd graph of the phases) and the two
        codes are written into this generator's workspace, reused from the previous call once nothing
        else holds them; `code_dtype` float16 then stores float32 codes in half precision
        (`spe.shared.storage_dtype`; ignored on the other paths)."""
        self._check_request(noise, start, length)
        z = self._scaled_noise(noise)                                   # (H, D, 2K, R)
        if backend in (None, "compiled") and factored_available(self.freqs, z):
            versions = (self.freqs._version, self.offsets._version)

            def omegas() -> tuple[torch.Tensor, torch.Tensor]:          # (L, H, D, 2K) each, no autograd
                if (self.freqs._version, self.offsets._version) != versions:
                    raise RuntimeError("SineSPE's freqs or offsets were modified in place between the forward "
                                       "and the backward of a shared code")
                with torch.no_grad():
                    return self._omegas_at(start, length)

            return SharedCode.sine(*omegas(), z.contiguous(), self._workspace,
                                   phases=(self._frequencies(), self.offsets, start),
                                   recompute_omegas=omegas if torch.is_grad_enabled() else None,
                                   code_dtype=code_dtype)
        omega_q, omega_k, z = self._factors(noise, start, length)
        qbar, kbar = sine_code(omega_q, z), sine_code(omega_k, z)       # (L, H, D, R) each
        return SharedCode(qbar.unsqueeze(0), kbar.unsqueeze(0), backend)

    def factorised(self, noise: torch.Tensor, start: int, length: int) -> FactorisedCode:
        """The code at positions start .. start+length-1 in factored form, never stored
        (`spe.factorised`): qbar[s, h] = omega_q[h, s] z[h], kbar alike. The omegas are computed
        without autograd; the filters' backward takes the frequencies' and offsets' gradients itself."""
        self._check_request(noise, start, length)
        with torch.no_grad():
            omega_q, omega_k = self._rotated_omegas(start, length)      # (H, L, D, 2K) each
        return FactorisedCode(omega_q, omega_k, self._scaled_noise(noise), self._frequencies(), self.offsets, start)

    def _factors(self, noise: torch.Tensor, start: int, length: int):
        """(omega_q, omega_k, z): the omegas (L, H, D, 2K), z (H, D, 2K, R)."""
        self._check_request(noise, start, length)
        positions = torch.arange(start, start + length, device=noise.device)
        omega_q, omega_k = self._omegas(positions)                      # (L, H, D, 2K) each
        return omega_q, omega_k, self._scaled_noise(noise)

    def _check_request(self, noise: torch.Tensor, start: int, length: int) -> None:
        expected = (self.num_heads, self.in_features, 2 * self.num_sines)
        if noise.dim() != 4 or tuple(noise.shape[:3]) != expected:
            raise ValueError(f"noise must have shape {expected + ('R',)}, got {tuple(noise.shape)}")
        if start < 0 or length < 1:
            raise ValueError(f"need start >= 0 and length >= 1, got start={start}, length={length}")

    def _scaled_noise(self, noise: torch.Tensor) -> torch.Tensor:
        """z = noise lambda / (sqrt(2K) (R D)^(1/4)): (H, D, 2K, R)."""
        gains = F.softplus(self.gains).repeat_interleave(2, dim=-1)      # (H, D, 2K), one per cos/sin
        scale = math.sqrt(2 * self.num_sines) * (noise.shape[-1] * self.in_features) ** 0.25
        return noise * (gains / scale).unsqueeze(-1)                    # (H, D, 2K, R)

    def expected_template(self, length: int) -> torch.Tensor:
        """Exact R -> infinity kernel P_d(m, n) for m, n < length: (H, D, length, length)."""
        lags = torch.arange(1 - length, length, device=self.freqs.device)  # (2L-1,): m - n
        cycles = self._cycles(lags)                                     # (H, D, 2L-1, K)
        phases = 2 * math.pi * cycles + self.offsets[:, :, None, :]     # (H, D, 2L-1, K)
        weights = F.softplus(self.gains) ** 2 / (2 * self.num_sines)    # (H, D, K)
        kernel = (torch.cos(phases) * weights[:, :, None, :]).sum(-1)   # (H, D, 2L-1): P_d per lag
        positions = torch.arange(length, device=self.freqs.device)
        index = positions[:, None] - positions[None, :] + length - 1    # (L, L): lag m - n, shifted
        return kernel[:, :, index]                                      # (H, D, L, L)

    def _omegas(self, positions: torch.Tensor):
        """Interleaved cos/sin features of the queries (with offsets) and keys: (L, H, D, 2K) each."""
        phases_k = 2 * math.pi * self._cycles(positions).permute(2, 0, 1, 3)  # (L, H, D, K)
        phases_q = phases_k + self.offsets                              # (L, H, D, K)
        omega_q = torch.stack([torch.cos(phases_q), torch.sin(phases_q)], dim=-1).flatten(-2)  # (L, H, D, 2K)
        omega_k = torch.stack([torch.cos(phases_k), torch.sin(phases_k)], dim=-1).flatten(-2)  # (L, H, D, 2K)
        return omega_q, omega_k

    def _omegas_at(self, start: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """`_omegas` at positions start .. start+length-1, contiguous, for use without autograd: one
        compiled pass for float32 on CPU (`spe_kernels.sine_omegas`, equal within 2e-6: its cosine and
        sine are polynomials), else the reference."""
        compiled = kernels.kernels_for(self.offsets, dtypes=(torch.float32,))
        if compiled is not None:
            return tuple(compiled.sine_omegas(self._frequencies().detach(), self.offsets.detach(), start, length))
        positions = torch.arange(start, start + length, device=self.freqs.device)
        omega_q, omega_k = self._omegas(positions)
        return omega_q.contiguous(), omega_k.contiguous()

    def _rotated_omegas(self, start: int, length: int):
        """`_omegas(start .. start+length-1)` in the factored code's (H, L, D, 2K) layout, without
        autograd, as products of unit complex numbers:
        exp(i 2 pi f (start + m T + l)) = exp(i 2 pi f (start + m T)) exp(i 2 pi f l) for l < T = ROTATION_BLOCK,
        each factor's phase reduced in float64; one complex product per entry instead of a cos and a sin.
        The query table's coarse factor carries the offsets."""
        block = min(ROTATION_BLOCK, length)
        blocks = -(-length // block)
        device = self.freqs.device
        complex_dtype = torch.complex128 if self.freqs.dtype == torch.float64 else torch.complex64

        def unit(phases: torch.Tensor) -> torch.Tensor:                 # (H, n, D, K) radians
            return torch.polar(torch.ones_like(phases), phases).to(complex_dtype)

        fine = unit(2 * math.pi * self._cycles(torch.arange(block, device=device), torch.float64
                                               ).permute(0, 2, 1, 3).contiguous())  # (H, T, D, K)
        firsts = start + block * torch.arange(blocks, device=device)    # (M,)
        coarse_k = 2 * math.pi * self._cycles(firsts, torch.float64).permute(0, 2, 1, 3).contiguous()  # (H, M, D, K)
        coarse_q = coarse_k + self.offsets.double()[:, None]            # (H, M, D, K)
        omegas = []
        for coarse in (coarse_q, coarse_k):
            product = unit(coarse)[:, :, None] * fine[:, None]          # (H, M, T, D, K) complex
            omega = torch.view_as_real(product).flatten(-2).flatten(1, 2)  # (H, M*T, D, 2K): cos, sin
            omegas.append(omega[:, :length])                            # (H, L, D, 2K), a view
        return omegas

    def _frequencies(self) -> torch.Tensor:
        """The frequencies f_k = sigmoid(freqs) / 2 in float64: (H, D, K)."""
        return torch.sigmoid(self.freqs.double()) / 2

    def _cycles(self, positions: torch.Tensor, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
        """f_k * position modulo 1 (its fractional part), computed in float64 so that far positions keep
        their phase: (H, D, L, K)."""
        cycles = self._frequencies()[:, :, None, :] * positions.double()[:, None]  # (H, D, L, K)
        return torch.frac(cycles).to(dtype or self.freqs.dtype)         # (-1, 1): the same cos / sin


def sine_code(omega: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """code[s, h, d, r] = sum_j omega[s, h, d, j] z[h, d, j, r]: (S, H, D, 2K), (H, D, 2K, R) ->
    (S, H, D, R), contiguous. The compiled kernel (when available, on CPU) writes this layout
    directly and takes its gradient in one pass; the einsum is the reference."""
    if kernels.kernels_for(omega, z) is not None and z.dtype == omega.dtype:
        return _SineCode.apply(omega.contiguous(), z.contiguous())
    return torch.einsum("shdj,hdjr->shdr", omega, z).contiguous()


class _SineCode(torch.autograd.Function):
    """`sine_code` through the spe_kernels extension."""

    @staticmethod
    def forward(ctx, omega, z):
        ctx.save_for_backward(omega, z)
        return kernels.module().sine_code(omega, z)

    @staticmethod
    def backward(ctx, grad):
        omega, z = ctx.saved_tensors
        grad_omega, grad_z = kernels.module().sine_code_backward(grad.contiguous(), omega, z)
        return grad_omega, grad_z
