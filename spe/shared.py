"""A code (qbar, kbar) shared by several SPEFilter calls, with one in-place gradient buffer per code.

Applied with plain autograd, a code used by L layers gets L separate (S, H, D, R) gradients that
are then added: L fresh tensors of the code's size per backward, each costing an allocation, a
write and an add. A `SharedCode` instead hands the filters a detached code. Every filter's backward
hands over its contribution (x a)^T grad (a: its gate's scale) as (x, grad, a), x and grad each the
size of one activation; these are accumulated in place into one buffer per code FLUSH_ROWS batch
rows at a time (one pass over the buffer for several layers, `spe.contract.accumulate`, with no
(x a) tensor), and a link node passes the two
buffers on to whatever produced the code (the generator's parameters) once, after all the filters'
backwards have run. Whatever the depth, a forward keeps one code and a backward one gradient buffer
per code, and the buffer is first allocated only after a few layers' activations have been freed.
Once it is, the compiled gated backward (spe/filter.py) adds each later contribution into it in its
own pass (`gradient_buffer`) instead of handing over a pair.

    code = SharedCode(*pe((B, N)))                 # or model code: SharedCode(qbar, kbar)
    qhat, khat = filt(q, k, code)                  # any number of filters / layers

A code can also take its gradient in factored form (`SharedCode.from_parts` with `PendingGradients`:
what `SineSPE.shared_code` and, in 1-D, `ConvSPE.shared_code` return when the compiled kernels apply):
the code itself is stored for the forward, but its gradient never is. The pending triples are turned
straight into the gradients of what the code was computed from, FACTOR_FLUSH_ROWS rows at a time:
sineSPE's (omega or, given the phases, straight the frequencies and offsets, and z) by one compiled
pass (`spe_kernels.sine_pairs_backward` / `sine_pairs_phase_backward`) that forms each (D, R) block
of the code gradient in cache (`SharedCode.sine`), convSPE's filters a few heads at a time
(`spe.conv`). No code-sized gradient buffer to allocate, zero and read back.

The filters' autograd nodes keep the code slices they use as saved tensors, not the SharedCode, so
once the backward has run nothing but the caller holds the code (a `Workspace` can then reuse it).

Values and gradients equal those of passing the tuple (qbar, kbar) to every filter (tested).
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from spe import kernels
from spe.contract import accumulate, backend_for, compute_dtype
from spe.workspace import Workspace

FLUSH_ROWS = 16  # pending (x, grad) batch rows that trigger an accumulation into the buffer
# pending batch rows that trigger a factored gradient pass (`PendingGradients`; each pass costs about
# as much as one over a whole code gradient, so it takes as many layers as memory allows)
FACTOR_FLUSH_ROWS = 32


class SharedCode:
    """(qbar, kbar), each (1, *size, H, D, R), prepared for use by several filters.

    Args:
        qbar, kbar: the code, as returned by `SineSPE` / `ConvSPE`; gradients flow back to them.
        backend: contraction backend ("compiled" or "torch"; default: the best available).
    """

    def __init__(self, qbar: torch.Tensor, kbar: torch.Tensor, backend: str | None = None):
        if qbar.shape != kbar.shape or qbar.dim() < 5 or qbar.shape[0] != 1:
            raise ValueError(f"qbar and kbar must both be (1, *size, H, D, R), got {tuple(qbar.shape)} "
                             f"and {tuple(kbar.shape)}")
        self.size = tuple(qbar.shape[1:-3])                              # positions per dimension
        flat = (-1, *qbar.shape[-3:])
        self.codes = (qbar.detach().reshape(flat).contiguous(),         # (S, H, D, R) each
                      kbar.detach().reshape(flat).contiguous())
        self.backend = backend_for(self.codes[0], backend)
        self.gradients = _Gradients(self.codes[0], self.backend)
        tracked = torch.is_grad_enabled() and (qbar.requires_grad or kbar.requires_grad)
        # a scalar in the autograd graph: the filters take it as an input, its backward hands over
        self.link = _Link.apply(qbar, kbar, self.gradients) if tracked else None

    @classmethod
    def sine(cls, omega_q: torch.Tensor, omega_k: torch.Tensor, z: torch.Tensor,
             workspace: Workspace | None = None, phases: tuple[torch.Tensor, torch.Tensor, int] | None = None,
             recompute_omegas: Callable[[], tuple[torch.Tensor, torch.Tensor]] | None = None,
             code_dtype: torch.dtype | None = None) -> SharedCode:
        """The sineSPE code qbar = omega_q z, kbar = omega_k z (omegas (S, H, D, 2K), z (H, D, 2K, R),
        contiguous) shared with its gradient taken in factored form, through the compiled kernels
        (`factored_available`). The two codes are written into `workspace` tensors when given.

        Gradients flow to the omegas, or, with phases = (freqs, offsets, start), to the frequencies
        f (H, D, K, float64) and query offsets theta (H, D, K) that the omegas (then constants) are the
        interleaved cos / sin of: 2 pi f (start + s) (+ theta for the queries), so that no autograd
        graph of the (S, H, D, K) phases is kept through the step. `recompute_omegas` (a function
        returning the same omegas) has the backward compute them again instead of keeping them.
        `code_dtype` float16 stores float32 codes in half precision (`storage_dtype`)."""
        if not factored_available(omega_q, z):
            raise ValueError("SharedCode.sine needs the compiled kernels and float32/64 CPU tensors of one dtype")
        compiled = kernels.module()
        shape = (*omega_q.shape[:3], z.shape[-1])                        # (S, H, D, R)
        dtype = storage_dtype(z.dtype, code_dtype)
        codes = []
        for name, omega in (("qbar", omega_q), ("kbar", omega_k)):
            out = torch.empty(shape, dtype=dtype, device=z.device) if workspace is None else \
                workspace.empty(name, shape, z, dtype)
            codes.append(compiled.sine_code(omega.detach(), z.detach(), out))
        kept = (omega_q.detach(), omega_k.detach()) if recompute_omegas is None else recompute_omegas
        gradients = _SineFactorGradients(kept, z.detach(), None if phases is None else phases[2])
        inputs = (omega_q, omega_k, z) if phases is None else (phases[0], phases[1], z)
        return cls.from_parts(tuple(codes), gradients, inputs)

    @classmethod
    def from_parts(cls, codes: tuple[torch.Tensor, torch.Tensor], gradients: PendingGradients,
                   inputs: tuple[torch.Tensor, ...]) -> SharedCode:
        """A 1-D code (qbar, kbar), each (S, H, D, R) contiguous with no autograd history, whose
        gradient `gradients` takes in factored form and hands to `inputs` (what the code was computed
        from) at the end of the backward. The code generators' `shared_code` methods build theirs
        with it (`SharedCode.sine`, `spe.conv`)."""
        shared = cls.__new__(cls)                                       # the fields __init__ sets
        shared.size = (codes[0].shape[0],)
        shared.codes = codes
        shared.backend = "compiled"
        shared.gradients = gradients
        tracked = torch.is_grad_enabled() and any(t.requires_grad for t in inputs)
        shared.link = _FactorLink.apply(gradients, *inputs) if tracked else None
        return shared

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of qbar (and kbar): (1, *size, H, D, R)."""
        return (1, *self.size, *self.codes[0].shape[1:])

    def positions(self, size: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """The two codes at the first positions of a 1-D code, or all of them: (S', H, D, R) each."""
        if tuple(size) == self.size:
            return self.codes
        if len(size) != 1 or len(self.size) != 1 or size[0] > self.size[0]:
            raise ValueError(f"a SharedCode covering {self.size} positions cannot serve inputs of size "
                             f"{tuple(size)} (only a prefix of a 1-D code can be used)")
        return self.codes[0][: size[0]], self.codes[1][: size[0]]        # contiguous prefixes

    def add_gradient(self, which: int, x: torch.Tensor, grad: torch.Tensor,
                     scale: torch.Tensor | None = None) -> None:
        """Add (x scale)^T grad ((B, S', H, D), (B, S', H, R), S' <= S, scale (H, D) or None) to the
        gradient of code `which`."""
        self.gradients.add(which, x, grad, scale)

    def gradient_buffer(self, which: int, positions: int) -> torch.Tensor | None:
        """The gradient buffer of code `which` at its first `positions` positions (S', H, D, R),
        contiguous, for a caller that adds its contribution itself; None while it is not allocated
        (then hand the contribution to `add_gradient`, which allocates it in time), and always for a
        code whose gradient is taken in factored form."""
        return self.gradients.gradient_buffer(which, positions)


def storage_dtype(dtype: torch.dtype, requested: torch.dtype | None) -> torch.dtype:
    """The dtype a code computed in `dtype` is stored in when `requested`: float16 for a float32 code
    (the compiled kernels read it back as float32: half the memory and half the bytes to read per
    layer; rounding each value to 11 significant bits, a relative change of at most 2^-11 to a random
    draw), else the code's own dtype."""
    if requested not in (None, torch.float16, dtype):
        raise ValueError(f"a code can be stored in float16 or its own dtype, got {requested}")
    return torch.float16 if requested == torch.float16 and dtype == torch.float32 else dtype


def factored_available(omega: torch.Tensor, z: torch.Tensor) -> bool:
    """Whether `SharedCode.sine` can serve these factors: the compiled kernels serve float32/64 CPU
    tensors of one dtype."""
    return kernels.kernels_for(omega, z) is not None and z.dtype == omega.dtype


class _Gradients:
    """The two gradient buffers: pending (x, grad) pairs, accumulated FLUSH_ROWS rows at a time into
    buffers allocated on first use, handed over (then forgotten) once. Holds no reference to the
    autograd graph, so that the graph and this object form no reference cycle."""

    def __init__(self, code: torch.Tensor, backend: str) -> None:
        self.shape, self.dtype, self.device = code.shape, compute_dtype(code), code.device  # of each code
        self.backend = backend
        self.buffers: list[torch.Tensor | None] = [None, None]
        self.pending: list[list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]] = [[], []]

    def add(self, which: int, x: torch.Tensor, grad: torch.Tensor, scale: torch.Tensor | None) -> None:
        self.pending[which].append((x, grad, scale))
        if sum(x.shape[0] for x, _, _ in self.pending[which]) >= FLUSH_ROWS:
            self.flush(which)

    def gradient_buffer(self, which: int, positions: int) -> torch.Tensor | None:
        """`SharedCode.gradient_buffer`."""
        buffer = self.buffer(which)
        return None if buffer is None else buffer[:positions]

    def buffer(self, which: int) -> torch.Tensor | None:
        """Code `which`'s buffer (S, H, D, R) with its pending pairs added, or None if not allocated."""
        if self.buffers[which] is not None:
            self.flush(which)
        return self.buffers[which]

    def flush(self, which: int) -> None:
        """Accumulate the pending pairs of code `which` into its buffer, by prefix length."""
        pending, self.pending[which] = self.pending[which], []
        if not pending:
            return
        if self.buffers[which] is None:
            self.buffers[which] = torch.zeros(self.shape, dtype=self.dtype, device=self.device)
        for positions in sorted({x.shape[1] for x, _, _ in pending}):
            pairs = [p for p in pending if p[0].shape[1] == positions]
            accumulate(self.buffers[which][:positions], [x for x, _, _ in pairs], [g for _, g, _ in pairs],
                       self.backend, [a for _, _, a in pairs])

    def take(self) -> list[torch.Tensor | None]:
        self.flush(0)
        self.flush(1)
        buffers, self.buffers = self.buffers, [None, None]
        return buffers


class _Link(torch.autograd.Function):
    """Forward: a scalar zero that ties the filters to (qbar, kbar). Backward: the buffers."""

    @staticmethod
    def forward(ctx, qbar, kbar, gradients):
        ctx.gradients = gradients
        ctx.shape = qbar.shape
        return qbar.new_zeros(())

    @staticmethod
    def backward(ctx, _):
        buffers = ctx.gradients.take()
        grads = tuple(None if b is None else b.view(ctx.shape) for b in buffers)
        return grads[0], grads[1], None


class PendingGradients:
    """Gradients of a SharedCode taken in factored form (`SharedCode.from_parts`): the filters' (x,
    grad, scale) triples are kept pending and handed, FACTOR_FLUSH_ROWS batch rows at a time and
    grouped by prefix length, to `add_groups` (by default `add_triples` per group), which adds their
    contribution to the gradients of the code's inputs; `result` returns those, one per input (None
    where unused). No code-sized buffer is ever handed to the filters."""

    def __init__(self) -> None:
        self.pending: list[list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]] = [[], []]

    def add(self, which: int, x: torch.Tensor, grad: torch.Tensor, scale: torch.Tensor | None) -> None:
        self.pending[which].append((x, grad, scale))
        if sum(x.shape[0] for x, _, _ in self.pending[which]) >= FACTOR_FLUSH_ROWS:
            self.flush(which)

    def gradient_buffer(self, which: int, positions: int) -> None:
        return None

    def flush(self, *codes: int) -> None:
        """Hand the pending triples of these codes (0: qbar, 1: kbar) to `add_groups` in one call."""
        groups = []
        for which in codes:
            pending, self.pending[which] = self.pending[which], []
            groups += [(which, positions, [t for t in pending if t[0].shape[1] == positions])
                       for positions in sorted({x.shape[1] for x, _, _ in pending})]
        if groups:
            self.add_groups(groups)

    def take(self) -> list[torch.Tensor | None]:
        """The inputs' gradients, all pending triples included; then starts afresh."""
        self.flush(0, 1)
        return self.result()

    def add_groups(self, groups: list) -> None:
        """Add the contribution of (which, positions, triples) groups."""
        for which, positions, triples in groups:
            self.add_triples(which, positions, triples)

    def add_triples(self, which: int, positions: int, triples: list) -> None:
        raise NotImplementedError

    def result(self) -> list[torch.Tensor | None]:
        raise NotImplementedError


class _SineFactorGradients(PendingGradients):
    """A sineSPE code's gradients: each flush adds the gradients of omega `which` and z through the
    compiled pass that forms each (D, R) block of the code gradient in cache. Inputs (omega_q,
    omega_k, z), or with `start` (the omegas then constants) (freqs, offsets, z): omega's gradient is
    then taken on to its phases in the same pass (`sine_pairs_phase_backward`), which leaves two
    (H, D, K) sums per code instead of an (S, H, D, 2K) gradient."""

    def __init__(self, omegas: tuple[torch.Tensor, torch.Tensor] | Callable[[], tuple[torch.Tensor, torch.Tensor]],
                 z: torch.Tensor, start: int | None) -> None:
        super().__init__()
        # the omegas, or a function that computes them again in the backward (then not kept through
        # the step: 2 x 21 MiB at the paper's width), held from the first flush to the result
        self._omegas, self.z, self.start = omegas, z, start
        self._kept = None if callable(omegas) else omegas
        # per code: omega's gradient (S, H, D, 2K), or with `start` its phases' sums (2, H, D, K) float64:
        # sum_s d loss / d phase and sum_s s d loss / d phase
        self.grad_omegas: list[torch.Tensor | None] = [None, None]
        self.grad_z: list[torch.Tensor | None] = [None, None]

    @property
    def omegas(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._kept is None:
            self._kept = self._omegas()
        return self._kept

    def add_triples(self, which: int, positions: int, triples: list) -> None:
        omega, dtype = self.omegas[which], self.z.dtype
        compiled = kernels.module()
        if self.grad_omegas[which] is None:
            self.grad_omegas[which] = torch.zeros_like(omega) if self.start is None else \
                torch.zeros(2, *omega.shape[1:-1], omega.shape[-1] // 2, dtype=torch.float64, device=omega.device)
            self.grad_z[which] = torch.zeros_like(self.z)
        pairs = ([x.to(dtype) for x, _, _ in triples], [g.to(dtype) for _, g, _ in triples],
                 [None if a is None else a.to(dtype) for _, _, a in triples], omega[:positions], self.z)
        if self.start is None:
            compiled.sine_pairs_backward(self.grad_omegas[which][:positions], self.grad_z[which], *pairs)
        else:
            compiled.sine_pairs_phase_backward(self.grad_omegas[which], self.grad_z[which], *pairs)

    def result(self) -> list[torch.Tensor | None]:
        grad_z = [g for g in self.grad_z if g is not None]
        grad_z = sum(grad_z) if grad_z else None
        grad_q, grad_k = self.grad_omegas
        self.grad_omegas, self.grad_z = [None, None], [None, None]
        if callable(self._omegas):
            self._kept = None
        if self.start is None:
            return [grad_q, grad_k, grad_z]
        sums = [g for g in (grad_q, grad_k) if g is not None]          # (2, H, D, K) each
        if not sums:
            return [None, None, grad_z]
        plain, weighted = sum(sums)                                     # over positions s = 0, 1, ..
        # phase = 2 pi f (start + s) (+ theta for the queries)
        grad_freqs = 2 * math.pi * (self.start * plain + weighted)      # (H, D, K) float64
        grad_offsets = None if grad_q is None else grad_q[0].to(self.z.dtype)  # the queries' phases
        return [grad_freqs, grad_offsets, grad_z]


class _FactorLink(torch.autograd.Function):
    """`_Link` of a SharedCode whose gradient is taken in factored form. Forward: a scalar zero that
    ties the filters to the code's inputs. Backward: `gradients.take()`, one per input."""

    @staticmethod
    def forward(ctx, gradients, *inputs):
        ctx.gradients = gradients
        return inputs[-1].new_zeros(())

    @staticmethod
    def backward(ctx, _):
        return (None, *ctx.gradients.take())
