"""A code (qbar, kbar) shared by several SPEFilter calls, with one in-place gradient buffer per code.

Applied with plain autograd, a code used by L layers gets L separate (S, H, D, R) gradients that
are then added: L fresh tensors of the code's size per backward, each costing an allocation, a
write and an add. A `SharedCode` instead hands the filters a detached code. Every filter's backward
hands over its contribution x^T grad as the pair (x, grad), each the size of one activation; the
pairs are accumulated in place into one buffer per code FLUSH_ROWS batch rows at a time (one pass
over the buffer for several layers, `spe.contract.accumulate`), and a link node passes the two
buffers on to whatever produced the code (the generator's parameters) once, after all the filters'
backwards have run. Whatever the depth, a forward keeps one code and a backward one gradient buffer
per code, and the buffer is first allocated only after a few layers' activations have been freed.
A sineSPE code can also be given by its factors (`SharedCode.from_factors`, used by
`SineSPE.shared_code`): the pairs then go straight into the factors' gradients (compiled kernel), and
no code-sized gradient buffer exists at all.

    code = SharedCode(*pe((B, N)))                 # or model code: SharedCode(qbar, kbar)
    qhat, khat = filt(q, k, code)                  # any number of filters / layers

Values and gradients equal those of passing the tuple (qbar, kbar) to every filter (tested).
"""

from __future__ import annotations

import torch

from spe.contract import accumulate, backend_for, compiled_kernels

FLUSH_ROWS = 16  # pending (x, grad) batch rows that trigger an accumulation into the buffer


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
        self.gradients: _Pending = _Gradients(self.codes, self.backend)
        tracked = torch.is_grad_enabled() and (qbar.requires_grad or kbar.requires_grad)
        # a scalar in the autograd graph: the filters take it as an input, its backward hands over
        self.link = _Link.apply(qbar, kbar, self.gradients) if tracked else None

    @classmethod
    def from_factors(cls, omega_q: torch.Tensor, omega_k: torch.Tensor, z: torch.Tensor) -> SharedCode:
        """The sineSPE code qbar = omega_q z, kbar = omega_k z from its factors, (S, H, D, J) each and
        (H, D, J, R), on the compiled backend. The code is built without autograd and its gradient
        goes straight to the factors, 16 batch rows at a time: no (S, H, D, R) gradient buffer."""
        kernels = compiled_kernels()
        if kernels is None or backend_for(z) != "compiled" or omega_q.dtype != z.dtype:
            raise ValueError("SharedCode.from_factors needs the compiled spe_kernels and float32/64 CPU "
                             "factors of one dtype")
        omega_q, omega_k, z = (t.contiguous() for t in (omega_q, omega_k, z))
        factors = (omega_q.detach(), omega_k.detach(), z.detach())
        with torch.no_grad():
            qbar, kbar = (kernels.sine_code(omega, factors[2]) for omega in factors[:2])  # (S, H, D, R)
        self = cls.__new__(cls)
        self.size, self.codes, self.backend = (qbar.shape[0],), (qbar, kbar), "compiled"
        self.gradients = _FactorGradients(factors)
        tracked = torch.is_grad_enabled() and any(t.requires_grad for t in (omega_q, omega_k, z))
        self.link = _FactorLink.apply(omega_q, omega_k, z, self.gradients) if tracked else None
        return self

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

    def add_gradient(self, which: int, x: torch.Tensor, grad: torch.Tensor) -> None:
        """Add x^T grad ((B, S', H, D) and (B, S', H, R), S' <= S) to the gradient of code `which`."""
        self.gradients.add(which, x, grad)


class _Pending:
    """(x, grad) pairs per code, accumulated (`_accumulate`) FLUSH_ROWS batch rows at a time, by
    prefix length. Holds no reference to the autograd graph, so that the graph and this object
    form no reference cycle."""

    def __init__(self) -> None:
        self.pending: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[], []]

    def add(self, which: int, x: torch.Tensor, grad: torch.Tensor) -> None:
        self.pending[which].append((x, grad))
        if sum(x.shape[0] for x, _ in self.pending[which]) >= FLUSH_ROWS:
            self.flush(which)

    def flush(self, which: int) -> None:
        pending, self.pending[which] = self.pending[which], []
        for positions in sorted({x.shape[1] for x, _ in pending}):
            pairs = [(x, g) for x, g in pending if x.shape[1] == positions]
            self._accumulate(which, positions, [x for x, _ in pairs], [g for _, g in pairs])

    def take(self) -> list[torch.Tensor | None]:
        """Flush both codes and hand the accumulated gradients over (then forget them)."""
        self.flush(0)
        self.flush(1)
        return self._hand_over()

    def _accumulate(self, which: int, positions: int, xs: list[torch.Tensor], grads: list[torch.Tensor]):
        raise NotImplementedError

    def _hand_over(self) -> list[torch.Tensor | None]:
        raise NotImplementedError


class _Gradients(_Pending):
    """The two code gradients as buffers shaped like the codes, allocated on the first flush and
    handed over (then forgotten) once."""

    def __init__(self, codes: tuple[torch.Tensor, torch.Tensor], backend: str) -> None:
        super().__init__()
        self.codes = codes
        self.backend = backend
        self.buffers: list[torch.Tensor | None] = [None, None]

    def _accumulate(self, which, positions, xs, grads):
        if self.buffers[which] is None:
            self.buffers[which] = torch.zeros_like(self.codes[which])
        accumulate(self.buffers[which][:positions], xs, grads, self.backend)

    def _hand_over(self) -> list[torch.Tensor | None]:
        buffers, self.buffers = self.buffers, [None, None]
        return buffers


class _FactorGradients(_Pending):
    """The gradients of the sineSPE factors (omega_q, omega_k, z), accumulated from the pairs by the
    compiled kernel, handed over (then forgotten) once."""

    def __init__(self, factors: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> None:
        super().__init__()
        self.factors = factors
        self.grads: list[torch.Tensor | None] = [None, None, None]      # omega_q, omega_k, z

    def _accumulate(self, which, positions, xs, grads):
        omega, z = self.factors[which], self.factors[2]
        if self.grads[which] is None:
            self.grads[which] = torch.zeros_like(omega)
        if self.grads[2] is None:
            self.grads[2] = torch.zeros_like(z)
        xs, grads = [x.to(z.dtype) for x in xs], [g.to(z.dtype) for g in grads]
        compiled_kernels().sine_factor_accumulate(self.grads[which][:positions], self.grads[2],
                                                  omega[:positions], z, xs, grads)

    def _hand_over(self) -> list[torch.Tensor | None]:
        grads, self.grads = self.grads, [None, None, None]
        return grads


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


class _FactorLink(torch.autograd.Function):
    """`_Link` for a code given by its sineSPE factors: backward hands over the factors' gradients."""

    @staticmethod
    def forward(ctx, omega_q, omega_k, z, gradients):
        ctx.gradients = gradients
        return z.new_zeros(())

    @staticmethod
    def backward(ctx, _):
        grad_omega_q, grad_omega_k, grad_z = ctx.gradients.take()
        return grad_omega_q, grad_omega_k, grad_z, None
