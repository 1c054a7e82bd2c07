"""A sineSPE code kept in factored form, applied without ever storing it: memory linear in N.

A sineSPE code is a product, code[s, h, d, r] = sum_j omega[s, h, d, j] z[h, d, j, r], with omega
the 2K cos/sin features of position s (`SineSPE.factorised`) and z the scaled noise (H, D, 2K, R). So
the filter's contraction regroups as one dense product per head:

    out[b, s, h, r] = sum_d x[b, s, h, d] (a[h, d] code[s, h, d, r] + c[h, d] noise[h, d, r])
                    = sum_(d, j) y[b, s, h, (d, j)] w[h, (d, j), r]
    y = [x * omega_j for j < 2K] + [x]   (B, S, H, D, 2K + 1),   w = [a z, c noise]   (H, D, 2K + 1, R)

The stored code is S*H*D*R floats per code whatever the batch (1 GiB at N 16384, d_model 256,
R 64), read by every layer and whose gradient buffer is written by every layer: at batch 1 and
long N the step becomes memory-bound. In factored form a forward keeps omega (2K/R of the code's
size) and each layer costs (2K + 1) times the contraction's multiply-adds as GEMMs, with
temporaries bounded by ROWS (batch row, position) pairs. The stored code wins when a batch of several rows shares
its reads; `model.positional` chooses per call. Values equal the stored path's (tested).

    code = sine.factorised(noise, 0, N)               # a FactorisedCode
    qhat, khat = filt(q, k, code)
"""

from __future__ import annotations

import math

import torch

ROWS = 512  # (batch row, position) pairs per block of the factored product: cache-sized temporaries


class FactorisedCode:
    """A sineSPE code (qbar, kbar) at positions start .. start+S-1 in factored form
    (`SineSPE.factorised`): qbar[s, h, d] = omega_q[h, s, d] z[h, d], kbar alike.

    omega_q, omega_k (H, S, D, 2K): the interleaved cos / sin of the phases 2 pi (f pos mod 1)
    (+ offsets for the queries), given without autograd; freqs f (H, D, K, float64) and offsets
    (H, D, K) are the tensors they were computed from, to which the filters' backward hands
    d loss / d phase summed over positions (and weighted by the positions, for f), never an
    (H, S, D, 2K) gradient. z (H, D, 2K, R) takes its gradient through autograd.
    """

    def __init__(self, omega_q: torch.Tensor, omega_k: torch.Tensor, z: torch.Tensor, freqs: torch.Tensor,
                 offsets: torch.Tensor, start: int = 0):
        if omega_q.shape != omega_k.shape or omega_q.dim() != 4 or omega_q.shape[-1] % 2:
            raise ValueError(f"omega_q and omega_k must both be (H, S, D, 2K), got {tuple(omega_q.shape)} "
                             f"and {tuple(omega_k.shape)}")
        H, _, D, J = omega_q.shape
        if z.dim() != 4 or tuple(z.shape[:3]) != (H, D, J):
            raise ValueError(f"z must be (H, D, 2K, R) = {(H, D, J)} + (R,), got {tuple(z.shape)}")
        if tuple(freqs.shape) != (H, D, J // 2) or tuple(offsets.shape) != (H, D, J // 2):
            raise ValueError(f"freqs and offsets must be (H, D, K) = {(H, D, J // 2)}, got "
                             f"{tuple(freqs.shape)} and {tuple(offsets.shape)}")
        self.omegas = (omega_q.detach(), omega_k.detach())              # (H, S, D, 2K) each
        self.z, self.freqs, self.offsets, self.start = z, freqs, offsets, start

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of the code it stands for: (1, S, H, D, R)."""
        H, S, D, _ = self.omegas[0].shape
        return (1, S, H, D, self.z.shape[-1])

    def materialise(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(qbar, kbar), each (1, S, H, D, R): the stored code (values only: no frequency gradients)."""
        return tuple(torch.einsum("hsdj,hdjr->shdr", omega, self.z).unsqueeze(0)  # (1, S, H, D, R)
                     for omega in self.omegas)

    def mix(self, which: int, x: torch.Tensor, a: torch.Tensor | None = None, noise: torch.Tensor | None = None,
            c: torch.Tensor | None = None) -> torch.Tensor:
        """sum_d x_d (a_d code_d + c_d noise_d) for code `which` (0: qbar, 1: kbar), never built:
        x (B, S', H, D) with S' <= S, gate terms a, c (H, D) and noise (H, D, R), or all None ->
        (B, S', H, R)."""
        omega = self.omegas[which]
        if omega.shape[1] != x.shape[1]:
            omega = omega[:, : x.shape[1]]                              # (H, S', D, 2K)
        w = self.z if a is None else self.z * a[..., None, None]        # (H, D, 2K, R)
        free = None if noise is None else noise * c[..., None]          # (H, D, R)
        offsets = self.offsets if which == 0 else None                  # the keys' phases have none
        with torch.autocast(x.device.type, enabled=False):  # under autocast: products in the code's dtype
            return _FactorisedMix.apply(x, omega, w, free, self.freqs, offsets, self.start)


def _blocks(batch: int, positions: int):
    """Position ranges (s0, s1) of about ROWS (batch row, position) pairs each."""
    step = max(1, ROWS // batch)
    return [(s0, min(positions, s0 + step)) for s0 in range(0, positions, step)]


class _FactorisedMix(torch.autograd.Function):
    """out[b, s, h, r] = sum_(d, j) x[b, s, h, d] omega[h, s, d, j] w[h, d, j, r]
                        + sum_d x[b, s, h, d] free[h, d, r]   (free optional)

    in blocks of positions, on heads-first copies of x and the gradient (one each per call); the
    features y = x * omega are recomputed in the backward (only x, omega, w and free are saved)."""

    @staticmethod
    def forward(ctx, x, omega, w, free, freqs, offsets, start):
        ctx.save_for_backward(x, omega, w, free)
        ctx.start = start
        B, S, H, D = x.shape
        J, R = omega.shape[-1], w.shape[-1]
        w_rows = w.reshape(H, D * J, R)                                 # (H, D*J, R)
        xh = x.to(w.dtype).permute(2, 0, 1, 3).contiguous()             # (H, B, S, D)
        oh = omega.to(w.dtype)[:, None]                                 # (H, 1, S, D, J)
        out = x.new_empty((H, B, S, R), dtype=w.dtype)
        for s0, s1 in _blocks(B, S):
            rows = B * (s1 - s0)
            xb = xh[:, :, s0:s1]                                        # (H, B, c, D)
            y = xb[..., None] * oh[:, :, s0:s1]                         # (H, B, c, D, J)
            part = torch.bmm(y.view(H, rows, D * J), w_rows)            # (H, B*c, R)
            if free is not None:
                part.baddbmm_(xb.reshape(H, rows, D), free.to(w.dtype))
            out[:, :, s0:s1] = part.view(H, B, s1 - s0, R)
        return out.permute(1, 2, 0, 3).contiguous()                     # (B, S, H, R)

    @staticmethod
    def backward(ctx, grad):                                            # grad: (B, S, H, R)
        with torch.autocast(grad.device.type, enabled=False):
            return _FactorisedMix._backward(ctx, grad)

    @staticmethod
    def _backward(ctx, grad):
        x, omega, w, free = ctx.saved_tensors
        need_x, _, need_w, need_free, need_freqs, need_offsets, _ = ctx.needs_input_grad
        need_omega = need_freqs or need_offsets
        B, S, H, D = x.shape
        J, R = omega.shape[-1], w.shape[-1]
        dtype = grad.dtype
        w_rows = w.to(dtype).reshape(H, D * J, R)                       # (H, D*J, R)
        free = None if free is None else free.to(dtype)                 # (H, D, R)
        xh = x.to(dtype).permute(2, 0, 1, 3).contiguous()               # (H, B, S, D)
        gh = grad.permute(2, 0, 1, 3).contiguous()                      # (H, B, S, R)
        oh = omega.to(dtype)[:, None]                                   # (H, 1, S, D, J)
        grad_x = xh.new_empty(xh.shape) if need_x else None             # (H, B, S, D)
        grad_w = torch.zeros_like(w_rows) if need_w or need_omega else None  # (H, D*J, R): y^T g
        moment = torch.zeros_like(w_rows, dtype=torch.float64) if need_freqs else None  # (pos y)^T g
        grad_free = torch.zeros_like(free) if need_free else None       # (H, D, R)
        for s0, s1 in _blocks(B, S):
            rows = B * (s1 - s0)
            g = gh[:, :, s0:s1].reshape(H, rows, R)                     # (H, B*c, R)
            xb, ob = xh[:, :, s0:s1], oh[:, :, s0:s1]                   # (H, B, c, D), (H, 1, c, D, J)
            if grad_w is not None:
                y = (xb[..., None] * ob).view(H, rows, D * J)           # (H, B*c, D*J)
                block = torch.bmm(y.transpose(1, 2), g)                 # (H, D*J, R)
                grad_w += block
                if moment is not None:  # positions within the block here, its start added in float64
                    local = torch.arange(s1 - s0, device=g.device, dtype=g.dtype).repeat(B)  # (B*c,)
                    moment += torch.bmm(y.transpose(1, 2), g * local[:, None]).double()
                    moment += (ctx.start + s0) * block.double()
            if need_free:
                grad_free.baddbmm_(xb.reshape(H, rows, D).transpose(1, 2), g)
            if need_x:
                grad_y = torch.bmm(g, w_rows.transpose(1, 2)).view(H, B, s1 - s0, D, J)  # (H, B, c, D, J)
                gx = grad_y.mul_(ob).sum(-1)                            # (H, B, c, D)
                if free is not None:
                    gx.view(H, rows, D).baddbmm_(g, free.transpose(1, 2))
                grad_x[:, :, s0:s1] = gx
        # d loss / d phase[s] = (d loss / d sin) cos - (d loss / d cos) sin, and d loss / d omega[s] =
        # x[s] (g[s] w^T): its sum over positions (weighted by them for the frequencies) is a pairing
        # of w with y^T g (with (pos y)^T g), computed once, never per position
        # d phase / d f = 2 pi pos
        grad_freqs = None if moment is None else 2 * math.pi * _phase_pairing(w.double(), moment)
        grad_offsets = _phase_pairing(w_rows.view(w.shape), grad_w.view(w.shape)) if need_offsets else None
        return (None if grad_x is None else grad_x.permute(1, 2, 0, 3).to(x.dtype), None,
                grad_w.view(w.shape).to(w.dtype) if need_w else None,
                None if grad_free is None else grad_free.to(free.dtype),
                grad_freqs, None if grad_offsets is None else grad_offsets.to(omega.dtype), None)


def _phase_pairing(w: torch.Tensor, moments: torch.Tensor) -> torch.Tensor:
    """sum_r (w[.., 2k+1, r] m[.., 2k, r] - w[.., 2k, r] m[.., 2k+1, r]): (H, D, 2K, R) x2 -> (H, D, K).

    With m = sum_s y[s]^T g[s] (y = x omega), this is sum_s d loss / d phase[s] of the filter's
    output through omega's cos / sin pairs."""
    moments = moments.view(w.shape)
    return (w[:, :, 1::2] * moments[:, :, 0::2] - w[:, :, 0::2] * moments[:, :, 1::2]).sum(-1)
