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

Values and gradients equal those of passing the tuple (qbar, kbar) to every filter (tested).
"""

from __future__ import annotations

import torch

from spe.contract import accumulate, backend_for

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
        self.gradients = _Gradients(self.codes, self.backend)
        tracked = torch.is_grad_enabled() and (qbar.requires_grad or kbar.requires_grad)
        # a scalar in the autograd graph: the filters take it as an input, its backward hands over
        self.link = _Link.apply(qbar, kbar, self.gradients) if tracked else None

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
        (then hand the contribution to `add_gradient`, which allocates it in time)."""
        buffer = self.gradients.buffer(which)
        return None if buffer is None else buffer[:positions]


class _Gradients:
    """The two gradient buffers: pending (x, grad) pairs, accumulated FLUSH_ROWS rows at a time into
    buffers allocated on first use, handed over (then forgotten) once. Holds no reference to the
    autograd graph, so that the graph and this object form no reference cycle."""

    def __init__(self, codes: tuple[torch.Tensor, torch.Tensor], backend: str) -> None:
        self.codes = codes
        self.backend = backend
        self.buffers: list[torch.Tensor | None] = [None, None]
        self.pending: list[list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]] = [[], []]

    def add(self, which: int, x: torch.Tensor, grad: torch.Tensor, scale: torch.Tensor | None) -> None:
        self.pending[which].append((x, grad, scale))
        if sum(x.shape[0] for x, _, _ in self.pending[which]) >= FLUSH_ROWS:
            self.flush(which)

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
            self.buffers[which] = torch.zeros_like(self.codes[which])
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
