"""The per-position code contraction of SPE, behind one interface with two backends.

    forward:   out[b, s, h, r]  = sum_d x[b, s, h, d] code[s, h, d, r]          (B, S, H, R)
    backward:  gx[b, s, h, d]   = sum_r g[b, s, h, r] code[s, h, d, r]          (B, S, H, D)
    accumulate: buf[s, h, d, r] += sum_i sum_b x_i[b, s, h, d] g_i[b, s, h, r]  (in place, for several
               (x_i, g_i) pairs at once: one pass over buf; x_i optionally scaled by an (H, D) a_i)

and the same with SPEFilter's gate folded in (`gated_contract`, `gated_contract_backward`): the code
seen by x is the effective E[s, h, d, r] = a[h, d] code[s, h, d, r] + c[h, d] noise[h, d, r], with
a, c (H, D) and noise (H, D, R); its backward also returns the gate's gradients and can add the code
gradient a x^T g into a buffer in the same pass.

Each position and head has its own (D, R) matrix, so this is S*H tiny products. Backends:

- "compiled": the optional compiled kernels (`spe.kernels`), which read each (D, R) block once per
  call for all batch rows (and the buffer once for all the pairs of an accumulation); CPU, float32 /
  float64, and codes stored in float16 (read as float32: half the bytes to read; `compute_dtype`).
  The gated entry points form each effective (D, R) block in a small local buffer, never a tensor.
- "torch": the same with batched matrix products (any device or dtype), the reference.

`backend_for(code)` picks "compiled" when `spe.kernels` serves the code, "torch" otherwise.
"""

from __future__ import annotations

import torch

from spe import kernels

Gate = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # (a (H, D), c (H, D), noise (H, D, R))

BACKENDS = ("compiled", "torch")


def compute_dtype(code: torch.Tensor) -> torch.dtype:
    """The dtype a contraction with `code` computes in (and its other tensors have): the code's own,
    or float32 for a code stored in float16 (its values exactly, half the bytes to read)."""
    return torch.float32 if code.dtype == torch.float16 else code.dtype


def backend_for(code: torch.Tensor, requested: str | None = None) -> str:
    """The backend that will contract with `code`: `requested` if given (checked), else the best."""
    applies = kernels.kernels_for(code, dtypes=kernels.STORED) is not None
    if requested is None:
        return "compiled" if applies else "torch"
    if requested not in BACKENDS:
        raise ValueError(f"unknown contraction backend {requested!r}; choose from {BACKENDS}")
    if requested == "compiled" and not applies:
        raise ValueError("the compiled contraction needs the compiled kernels (installed and switched on) "
                         "and a float32/64/16 CPU code")
    return requested


def gated_compiled(code: torch.Tensor, backend: str | None = None) -> bool:
    """Whether the gated entry points run compiled for `code` and `backend`."""
    return backend_for(code, backend) == "compiled"


def contract(x: torch.Tensor, code: torch.Tensor, backend: str | None = None) -> torch.Tensor:
    """x (B, S, H, D), code (S, H, D, R) contiguous -> (B, S, H, R) (from the compiled kernel a view
    of a (B, H, S, R) tensor, the layout the attention reads)."""
    _check(x, code, code.shape[2], "x")
    dtype = compute_dtype(code)
    if backend_for(code, backend) == "compiled":
        return kernels.module().forward(x.to(dtype), code)
    B, S, H, D = x.shape
    code = code.to(dtype)
    rows = x.to(dtype).permute(1, 2, 0, 3).reshape(S * H, B, D)           # (S*H, B, D)
    out = torch.bmm(rows, code.view(S * H, D, -1))                         # (S*H, B, R)
    return out.view(S, H, B, -1).permute(2, 0, 1, 3)                       # (B, S, H, R)


def contract_backward(grad: torch.Tensor, code: torch.Tensor, backend: str | None = None
                      ) -> torch.Tensor:
    """grad (B, S, H, R), code (S, H, D, R) contiguous -> (B, S, H, D)."""
    _check(grad, code, code.shape[3], "grad")
    grad = grad.to(compute_dtype(code))
    if backend_for(code, backend) == "compiled":
        return kernels.module().backward(grad, code)
    code = code.to(grad.dtype)
    B, S, H, R = grad.shape
    D = code.shape[2]
    rows = grad.permute(1, 2, 0, 3).reshape(S * H, B, R)                   # (S*H, B, R)
    out = torch.bmm(rows, code.view(S * H, D, R).transpose(1, 2))          # (S*H, B, D)
    return out.view(S, H, B, D).permute(2, 0, 1, 3)                        # (B, S, H, D)


def accumulate(buf: torch.Tensor, xs: list[torch.Tensor], grads: list[torch.Tensor],
               backend: str | None = None, scales: list[torch.Tensor | None] | None = None) -> None:
    """buf (S, H, D, R) += sum over pairs of (x a)^T grad, x (B_i, S, H, D), grad (B_i, S, H, R) and
    a the pair's scale (H, D) (none: 1)."""
    if len(xs) != len(grads) or not xs:
        raise ValueError("accumulate needs one grad per x, and at least one pair")
    scales = [None] * len(xs) if scales is None else list(scales)
    if len(scales) != len(xs):
        raise ValueError("accumulate needs one scale (or None) per x")
    if not buf.is_contiguous() or buf.dtype == torch.float16:
        raise ValueError("buf must be contiguous, float32 or float64")
    for x, grad in zip(xs, grads):
        _check(x, buf, buf.shape[2], "x")
        _check(grad, buf, buf.shape[3], "grad")
    xs = [x.to(buf.dtype) for x in xs]
    grads = [g.to(buf.dtype) for g in grads]
    scales = [None if a is None else a.to(buf.dtype).contiguous() for a in scales]
    if backend_for(buf, backend) == "compiled":
        kernels.module().accumulate(buf, xs, grads, scales)
        return
    xs = [x if a is None else x * a for x, a in zip(xs, scales)]           # (B_i, S, H, D)
    S, H, D, R = buf.shape
    x_rows = torch.cat([x.permute(1, 2, 3, 0).reshape(S * H, D, -1) for x in xs], dim=2)  # (S*H, D, n)
    g_rows = torch.cat([g.permute(1, 2, 0, 3).reshape(S * H, -1, R) for g in grads], dim=1)  # (S*H, n, R)
    blocks = buf.view(S * H, D, R)
    torch.baddbmm(blocks, x_rows, g_rows, out=blocks)                      # in place


def gated_contract(x: torch.Tensor, code: torch.Tensor, gate: Gate | None = None,
                   backend: str | None = None) -> torch.Tensor:
    """x (B, S, H, D), code (S, H, D, R) contiguous, gate (a, c, noise) or None -> (B, S, H, R):
    out = sum_d x_d (a_d code_d + c_d noise_d), or `contract(x, code)` without a gate (compiled: a view
    of a (B, H, S, R) tensor)."""
    _check(x, code, code.shape[2], "x")
    if gate is not None:
        _check_gate(gate, code)
    if gated_compiled(code, backend):
        dtype = compute_dtype(code)
        a, c, noise = (None, None, None) if gate is None else _as_dtype(gate, dtype)
        return kernels.module().gated_forward(_as_dtype((x,), dtype)[0], code, a, c, noise)
    if gate is None:
        return contract(x, code, backend)
    a, c, noise = gate
    out = contract(x * a, code, backend)                                   # (B, S, H, R)
    return out + torch.einsum("bshd,hdr->bshr", x * c, noise).to(out.dtype)


def gated_contract_pair(queries: torch.Tensor, keys: torch.Tensor, codes: tuple[torch.Tensor, torch.Tensor],
                        gate: Gate | None = None, backend: str | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """(gated_contract(queries, qbar, gate), gated_contract(keys, kbar, gate)) for codes (qbar, kbar),
    checked and converted once for both (generation steps call it in every layer)."""
    qbar, kbar = codes
    if keys.shape != queries.shape or kbar.shape != qbar.shape or not kbar.is_contiguous():
        raise ValueError(f"queries and keys, qbar and kbar must have the same shapes (contiguous codes), got "
                         f"{tuple(queries.shape)}, {tuple(keys.shape)}, {tuple(qbar.shape)}, {tuple(kbar.shape)}")
    if not gated_compiled(qbar, backend):
        return gated_contract(queries, qbar, gate, backend), gated_contract(keys, kbar, gate, backend)
    _check(queries, qbar, qbar.shape[2], "queries")
    if gate is not None:
        _check_gate(gate, qbar)
    dtype = compute_dtype(qbar)
    queries, keys = _as_dtype((queries, keys), dtype)
    return compiled_step(queries, keys, codes, None if gate is None else _as_dtype(gate, dtype))


def compiled_step(queries: torch.Tensor, keys: torch.Tensor, codes: tuple[torch.Tensor, torch.Tensor],
                  gate: Gate | None) -> tuple[torch.Tensor, torch.Tensor]:
    """`gated_contract_pair` through the compiled kernel without the Python checks, for a caller that
    made sure once that the backend is compiled and that the gate has the codes' compute dtype (the model's
    generation steps, where the checks cost more than the kernel); the kernel still checks shapes
    and dtypes (RuntimeError)."""
    a, c, noise = (None, None, None) if gate is None else gate
    return (kernels.module().gated_forward(queries, codes[0], a, c, noise),
            kernels.module().gated_forward(keys, codes[1], a, c, noise))


def gated_contract_backward(grad: torch.Tensor, x: torch.Tensor, code: torch.Tensor,
                            gate: Gate | None = None, buf: torch.Tensor | None = None,
                            need_x: bool = True, need_gate: bool = True, backend: str | None = None):
    """Gradients of `gated_contract` for grad (B, S, H, R): (grad_x (B, S, H, D), grad_a (H, D),
    grad_noise (H, D, R), grad_c (H, D)), None where not needed (the gate's three without a gate).
    With buf (S, H, D, R, contiguous, the code's compute dtype), adds the code gradient (x a)^T grad into it."""
    _check(grad, code, code.shape[3], "grad")
    _check(x, code, code.shape[2], "x")
    if gate is not None:
        _check_gate(gate, code)
    dtype = compute_dtype(code)
    if buf is not None and (buf.shape != code.shape or buf.dtype != dtype or not buf.is_contiguous()):
        raise ValueError(f"buf must be a contiguous {tuple(code.shape)} {dtype} tensor")
    need_gate = need_gate and gate is not None
    if gated_compiled(code, backend):
        a, c, noise = (None, None, None) if gate is None else (t.to(dtype) for t in gate)
        grad_x, grad_a, grad_c, grad_noise = kernels.module().gated_backward(
            grad.to(dtype), x.to(dtype), code, a, c, noise, buf, need_x, need_gate)
        if need_gate:
            grad_a, grad_c, grad_noise = (g.to(t.dtype) for g, t in zip((grad_a, grad_c, grad_noise), gate))
        return None if grad_x is None else grad_x.to(x.dtype), grad_a, grad_noise, grad_c
    a, c, noise = (None, None, None) if gate is None else gate
    if buf is not None:
        accumulate(buf, [x], [grad], backend, [a])
    if not (need_x or need_gate):
        return None, None, None, None
    grad_xa = contract_backward(grad, code, backend).to(x.dtype)           # (B, S, H, D)
    noise = None if noise is None else noise.to(x.dtype)
    return gate_backward(x, grad.to(x.dtype), grad_xa, a, noise, c, need_x, need_gate, need_gate, need_gate)


def gate_backward(x, grad, grad_xa, a, noise, c, need_x, need_a, need_noise, need_c):
    """Gradients of out = contract(x a, code) + (x c) . noise, given grad (B, S, H, R) and
    grad_xa = grad . code^T (B, S, H, D): (grad_x, grad_a, grad_noise, grad_c), None where not needed
    (the PyTorch reference of the gated backward; a, noise, c all None for the ungated contraction)."""
    grad_x = grad_a = grad_noise = grad_c = None
    if need_a and a is not None:
        grad_a = (grad_xa * x).sum(dim=(0, 1))                             # (H, D)
    grad_xc = None
    if noise is not None:
        grad_xc = torch.einsum("bshr,hdr->bshd", grad, noise)              # (B, S, H, D)
        if need_noise:
            grad_noise = torch.einsum("bshd,bshr->hdr", x * c, grad)       # (H, D, R)
        if need_c:
            grad_c = (grad_xc * x).sum(dim=(0, 1))                         # (H, D)
    if need_x:
        grad_x = grad_xa if a is None else grad_xa * a
        if grad_xc is not None:
            grad_x = grad_x + grad_xc * c
    return grad_x, grad_a, grad_noise, grad_c


def _as_dtype(tensors: tuple[torch.Tensor, ...], dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """The tensors in `dtype`, as they are when they have it already (a generation step calls this
    for every layer: the no-op conversions were a fifth of the filters' Python time)."""
    if all(t.dtype == dtype for t in tensors):
        return tensors
    return tuple(t.to(dtype) for t in tensors)


def _check_gate(gate: Gate, code: torch.Tensor) -> None:
    """ValueError unless gate = (a (H, D), c (H, D), noise (H, D, R)) suits a code (S, H, D, R)."""
    a, c, noise = gate
    H, D, R = code.shape[1:]
    if tuple(a.shape) != (H, D) or tuple(c.shape) != (H, D) or tuple(noise.shape) != (H, D, R):
        raise ValueError(f"gate (a, c, noise) must be ({H}, {D}), ({H}, {D}), ({H}, {D}, {R}), got "
                         f"{tuple(a.shape)}, {tuple(c.shape)}, {tuple(noise.shape)}")


def _check(t: torch.Tensor, code: torch.Tensor, last: int, name: str) -> None:
    """ValueError unless t is (B, S, H, last) against a contiguous (S, H, D, R) code."""
    if code.dim() != 4 or not code.is_contiguous():
        raise ValueError(f"code must be a contiguous (S, H, D, R) tensor, got {tuple(code.shape)}")
    if t.dim() != 4 or tuple(t.shape[1:3]) != tuple(code.shape[:2]) or t.shape[3] != last:
        raise ValueError(f"{name} must be (B, {code.shape[0]}, {code.shape[1]}, {last}) for a code "
                         f"{tuple(code.shape)}, got {tuple(t.shape)}")
