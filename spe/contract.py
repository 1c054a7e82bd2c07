"""The per-position code contraction of SPE, behind one interface with two backends.

    forward:   out[b, s, h, r]  = sum_d x[b, s, h, d] code[s, h, d, r]          (B, S, H, R)
    backward:  gx[b, s, h, d]   = sum_r g[b, s, h, r] code[s, h, d, r]          (B, S, H, D)
    accumulate: buf[s, h, d, r] += sum_i sum_b x_i[b, s, h, d] g_i[b, s, h, r]  (in place, for several
               (x_i, g_i) pairs at once: one pass over buf)

Each position and head has its own (D, R) matrix, so this is S*H tiny products. Backends:

- "compiled": the optional C++ extension `spe_kernels` (csrc/spe_kernels, built by `make setup`),
  which reads each (D, R) block once per call for all batch rows (and the buffer once for all
  the pairs of an accumulation); CPU, float32 / float64.
- "torch": the same with batched matrix products (any device or dtype), the reference.

`backend_for(code)` picks "compiled" when it is available and applies, "torch" otherwise.
"""

from __future__ import annotations

import logging

import torch

logger = logging.getLogger(__name__)

try:
    import spe_kernels as _compiled
except ImportError as error:  # the pure-PyTorch backend then runs everything
    logger.debug("spe_kernels unavailable (%s): SPE uses its PyTorch contraction", error)
    _compiled = None

BACKENDS = ("compiled", "torch")


def compiled_available() -> bool:
    """Whether the C++ extension `spe_kernels` was imported."""
    return _compiled is not None


def compiled_kernels():
    """The imported `spe_kernels` module (also holds the sineSPE code kernels), or None."""
    return _compiled


def backend_for(code: torch.Tensor, requested: str | None = None) -> str:
    """The backend that will contract with `code`: `requested` if given (checked), else the best."""
    applies = _compiled is not None and code.device.type == "cpu" and code.dtype in (torch.float32,
                                                                                   torch.float64)
    if requested is None:
        return "compiled" if applies else "torch"
    if requested not in BACKENDS:
        raise ValueError(f"unknown contraction backend {requested!r}; choose from {BACKENDS}")
    if requested == "compiled" and not applies:
        raise ValueError("the compiled contraction needs the spe_kernels extension and a float32/64 "
                         "CPU code" + ("" if _compiled is not None else " (spe_kernels is not installed)"))
    return requested


def contract(x: torch.Tensor, code: torch.Tensor, backend: str | None = None) -> torch.Tensor:
    """x (B, S, H, D), code (S, H, D, R) contiguous -> (B, S, H, R)."""
    _check(x, code, code.shape[2], "x")
    if backend_for(code, backend) == "compiled":
        return _compiled.forward(x.to(code.dtype), code)
    B, S, H, D = x.shape
    rows = x.to(code.dtype).permute(1, 2, 0, 3).reshape(S * H, B, D)      # (S*H, B, D)
    out = torch.bmm(rows, code.view(S * H, D, -1))                         # (S*H, B, R)
    return out.view(S, H, B, -1).permute(2, 0, 1, 3)                       # (B, S, H, R)


def contract_backward(grad: torch.Tensor, code: torch.Tensor, backend: str | None = None
                      ) -> torch.Tensor:
    """grad (B, S, H, R), code (S, H, D, R) contiguous -> (B, S, H, D)."""
    _check(grad, code, code.shape[3], "grad")
    grad = grad.to(code.dtype)
    if backend_for(code, backend) == "compiled":
        return _compiled.backward(grad, code)
    B, S, H, R = grad.shape
    D = code.shape[2]
    rows = grad.permute(1, 2, 0, 3).reshape(S * H, B, R)                   # (S*H, B, R)
    out = torch.bmm(rows, code.view(S * H, D, R).transpose(1, 2))          # (S*H, B, D)
    return out.view(S, H, B, D).permute(2, 0, 1, 3)                        # (B, S, H, D)


def accumulate(buf: torch.Tensor, xs: list[torch.Tensor], grads: list[torch.Tensor],
               backend: str | None = None) -> None:
    """buf (S, H, D, R) += sum over pairs of x^T grad, x (B_i, S, H, D) and grad (B_i, S, H, R)."""
    if len(xs) != len(grads) or not xs:
        raise ValueError("accumulate needs one grad per x, and at least one pair")
    if not buf.is_contiguous():
        raise ValueError("buf must be contiguous")
    for x, grad in zip(xs, grads):
        _check(x, buf, buf.shape[2], "x")
        _check(grad, buf, buf.shape[3], "grad")
    xs = [x.to(buf.dtype) for x in xs]
    grads = [g.to(buf.dtype) for g in grads]
    if backend_for(buf, backend) == "compiled":
        _compiled.accumulate(buf, xs, grads)
        return
    S, H, D, R = buf.shape
    x_rows = torch.cat([x.permute(1, 2, 3, 0).reshape(S * H, D, -1) for x in xs], dim=2)  # (S*H, D, n)
    g_rows = torch.cat([g.permute(1, 2, 0, 3).reshape(S * H, -1, R) for g in grads], dim=1)  # (S*H, n, R)
    blocks = buf.view(S * H, D, R)
    torch.baddbmm(blocks, x_rows, g_rows, out=blocks)                      # in place


def _check(t: torch.Tensor, code: torch.Tensor, last: int, name: str) -> None:
    """ValueError unless t is (B, S, H, last) against a contiguous (S, H, D, R) code."""
    if code.dim() != 4 or not code.is_contiguous():
        raise ValueError(f"code must be a contiguous (S, H, D, R) tensor, got {tuple(code.shape)}")
    if t.dim() != 4 or tuple(t.shape[1:3]) != tuple(code.shape[:2]) or t.shape[3] != last:
        raise ValueError(f"{name} must be (B, {code.shape[0]}, {code.shape[1]}, {last}) for a code "
                         f"{tuple(code.shape)}, got {tuple(t.shape)}")
