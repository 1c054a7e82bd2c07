"""The per-position code contraction of SPE, behind one interface with two backends.

    forward:   out[b, s, h, r]  = sum_d x[b, s, h, d] code[s, h, d, r]          (B, S, H, R)
    backward:  gx[b, s, h, d]   = sum_r g[b, s, h, r] code[s, h, d, r]          (B, S, H, D)
               buf[s, h, d, r] += sum_b x[b, s, h, d] g[b, s, h, r]             (in place, optional)

Each position and head has its own (D, R) matrix, so this is S*H tiny products. Backends:

- "compiled": the optional C++ extension `spe_kernels` (csrc/spe_kernels, built by `make setup`),
  which reads each (D, R) block once per call for all batch rows and does the backward's two
  products in one pass over the code and the gradient buffer; CPU, float32 / float64.
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


def contract_backward(grad: torch.Tensor, code: torch.Tensor, x: torch.Tensor | None = None,
                      buf: torch.Tensor | None = None, backend: str | None = None) -> torch.Tensor:
    """grad (B, S, H, R) -> (B, S, H, D); with x and buf (S, H, D, R), also buf += x^T grad."""
    _check(grad, code, code.shape[3], "grad")
    if buf is not None:
        if x is None or buf.shape != code.shape or not buf.is_contiguous():
            raise ValueError("accumulating needs x and a contiguous buf shaped like the code")
        _check(x, code, code.shape[2], "x")
    grad = grad.to(code.dtype)
    x = None if x is None else x.to(code.dtype)
    if backend_for(code, backend) == "compiled":
        return _compiled.backward(grad, code, x, buf)
    B, S, H, R = grad.shape
    D = code.shape[2]
    rows = grad.permute(1, 2, 0, 3).reshape(S * H, B, R)                   # (S*H, B, R)
    code_blocks = code.view(S * H, D, R)                                   # (S*H, D, R)
    out = torch.bmm(rows, code_blocks.transpose(1, 2))                     # (S*H, B, D)
    if buf is not None:
        x_rows = x.permute(1, 2, 3, 0).reshape(S * H, D, B)                # (S*H, D, B)
        blocks = buf.view(S * H, D, R)
        torch.baddbmm(blocks, x_rows, rows, out=blocks)                    # in place
    return out.view(S, H, B, D).permute(2, 0, 1, 3)                        # (B, S, H, D)


def _check(t: torch.Tensor, code: torch.Tensor, last: int, name: str) -> None:
    """ValueError unless t is (B, S, H, last) against a contiguous (S, H, D, R) code."""
    if code.dim() != 4 or not code.is_contiguous():
        raise ValueError(f"code must be a contiguous (S, H, D, R) tensor, got {tuple(code.shape)}")
    if t.dim() != 4 or tuple(t.shape[1:3]) != tuple(code.shape[:2]) or t.shape[3] != last:
        raise ValueError(f"{name} must be (B, {code.shape[0]}, {code.shape[1]}, {last}) for a code "
                         f"{tuple(code.shape)}, got {tuple(t.shape)}")
