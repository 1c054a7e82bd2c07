"""SPEFilter: applies a positional code (qbar, kbar) to queries and keys, with an optional learned gate."""

import math
from typing import Optional, Tuple, Union

import torch
from torch import nn

from spe.contract import (compute_dtype, gate_backward, gated_compiled, gated_contract, gated_contract_backward,
                          gated_contract_pair)
from spe.factorised import FactorisedCode
from spe.shared import SharedCode

Code = Tuple[torch.Tensor, torch.Tensor]


class SPEFilter(nn.Module):
    """Mixes an SPE code into queries and keys: (B, *size, H, D) -> (B, *size, H, R).

        qhat(m) = sum_d q_d(m) [ sqrt(1 - delta_d) Qbar_d(m) + sqrt(delta_d) eps_d ]     (khat alike)

    with delta = sigmoid(gate) per (head, d) when gated (delta = 0 otherwise) and eps an (H, D, R)
    N(0, 1) / (D R)^(1/4) draw shared by queries and keys, constant over positions. The gated code is
    never built: the two terms are contracted separately, and autograd keeps only the inputs.

    Args:
        gated: learn a gate between positional and position-free attention.
        code_shape: (num_heads, in_features) of the codes (`pe.code_shape`); required when gated.
    """

    def __init__(self, gated: bool = True, code_shape: Optional[Tuple[int, int]] = None):
        super().__init__()
        if gated and code_shape is None:
            raise ValueError("code_shape is required when gated=True")
        self.gated = gated
        self.code_shape = None if code_shape is None else tuple(code_shape)
        if gated:
            # gate logits g; delta = sigmoid(g) is the weight of position-free attention per (head, d)
            self.gate = nn.Parameter(torch.randn(self.code_shape))
        self._inference_gate = None  # (gate's version key, sqrt(1 - delta), sqrt(delta)) for no-grad calls

    def forward(self, queries: torch.Tensor, keys: torch.Tensor, code: Union[Code, SharedCode, FactorisedCode],
                gate_noise: Optional[torch.Tensor] = None):
        """(qhat, khat), each (B, *size, H, R).

        queries, keys: (B, *size, H, D). code: (qbar, kbar), each (1, *code_size, H, D, R) with
        code_size >= size (longer codes are cropped), or a `SharedCode` of them (the fast path when
        several filters use one code, e.g. the layers of a model), or a sineSPE `FactorisedCode` (never
        stored: memory linear in the length, for long inputs in small batches). gate_noise: optional (H, D, R) eps
        (see `draw_gate_noise`), to hold it fixed across calls; drawn afresh when None; ignored when
        not gated.
        """
        if isinstance(code, SharedCode):
            return self._forward_shared(queries, keys, code, gate_noise)
        if isinstance(code, FactorisedCode):
            return self._forward_factorised(queries, keys, code, gate_noise)
        qbar, kbar = code
        if qbar.shape != kbar.shape:
            raise ValueError(f"qbar and kbar must have the same shape, got {tuple(qbar.shape)} and "
                             f"{tuple(kbar.shape)}")
        self._check(queries, keys, tuple(qbar.shape))
        size, code_size = tuple(queries.shape[1:-2]), tuple(qbar.shape[1:-3])
        if any(c < s for s, c in zip(size, code_size)):
            raise ValueError(f"code covers {code_size} positions, shorter than the inputs' {size}")
        if code_size != size:  # crop only when needed: its backward writes a full-size zero grad
            crop = (slice(None), *(slice(0, s) for s in size))
            qbar, kbar = qbar[crop], kbar[crop]                         # (1, *size, H, D, R)
        positions = math.prod(size)
        flat = (queries.shape[0], positions, *queries.shape[-2:])
        code_flat = (positions, *qbar.shape[-3:])
        queries, keys = queries.reshape(flat), keys.reshape(flat)       # (B, S, H, D)
        qbar, kbar = qbar.reshape(code_flat), kbar.reshape(code_flat)   # (S, H, D, R)
        positional, gate_noise, free = self.gate_terms(gate_noise, qbar.shape[-1])
        qhat = _mix_code(queries, qbar, positional, gate_noise, free)
        khat = _mix_code(keys, kbar, positional, gate_noise, free)
        out_shape = (queries.shape[0], *size, *qhat.shape[-2:])
        return qhat.view(out_shape), khat.view(out_shape)               # (B, *size, H, R)

    def _forward_shared(self, queries, keys, code: SharedCode, gate_noise):
        """`forward` for a SharedCode: same values, the code gradient accumulated in place."""
        self._check(queries, keys, code.shape)
        size = tuple(queries.shape[1:-2])
        positions = code.positions(size)                                # checks the size
        flat = (queries.shape[0], positions[0].shape[0], *queries.shape[-2:])
        queries, keys = queries.reshape(flat), keys.reshape(flat)       # (B, S, H, D)
        positional, gate_noise, free = self.gate_terms(gate_noise, code.shape[-1])
        if flat[1] == 1 and not torch.is_grad_enabled():                # a recurrent step
            if gated_compiled(positions[0], code.backend):              # one kernel call per code
                gate = None if positional is None else (positional, free, gate_noise)
                return gated_contract_pair(queries, keys, positions, gate, code.backend)  # (B, 1, H, R) each
            return _mix_one_position(queries, keys, positions, positional, gate_noise, free)
        qhat = _MixSharedCode.apply(queries, code.link, positional, gate_noise, free, code, 0)
        khat = _MixSharedCode.apply(keys, code.link, positional, gate_noise, free, code, 1)
        out_shape = (queries.shape[0], *size, *qhat.shape[-2:])
        return qhat.reshape(out_shape), khat.reshape(out_shape)         # (B, *size, H, R)

    def _forward_factorised(self, queries, keys, code: FactorisedCode, gate_noise):
        """`forward` for a FactorisedCode: same values, the code never built."""
        self._check(queries, keys, code.shape)
        if queries.dim() != 4 or queries.shape[1] > code.shape[1]:
            raise ValueError(f"a FactorisedCode of {code.shape[1]} positions cannot serve inputs of shape "
                             f"{tuple(queries.shape)} (1-D, at most as long as the code)")
        positional, gate_noise, free = self.gate_terms(gate_noise, code.shape[-1])
        return code.mix(0, queries, positional, gate_noise, free), code.mix(1, keys, positional, gate_noise, free)

    def gate_terms(self, gate_noise, num_realizations):
        """(sqrt(1 - delta), eps, sqrt(delta)) of a gated filter (checked or drawn eps); Nones if not.
        Without gradients the two square roots are computed once per value of the gate."""
        if not self.gated:
            return None, None, None
        if gate_noise is None:
            gate_noise = self.draw_gate_noise(num_realizations)
        elif tuple(gate_noise.shape) != (*self.code_shape, num_realizations):
            raise ValueError(f"gate_noise must have shape {(*self.code_shape, num_realizations)}, "
                             f"got {tuple(gate_noise.shape)}")
        if torch.is_grad_enabled():
            delta = torch.sigmoid(self.gate)                            # (H, D)
            return torch.sqrt(1 - delta), gate_noise, torch.sqrt(delta)
        # without gradients (generation steps), computed once per value of the gate
        gate = self.gate                                                # one Module attribute lookup
        key = (gate._version, gate.data_ptr(), gate.dtype, gate.device)
        if self._inference_gate is None or self._inference_gate[0] != key:
            delta = torch.sigmoid(gate)
            self._inference_gate = (key, torch.sqrt(1 - delta), torch.sqrt(delta))
        return self._inference_gate[1], gate_noise, self._inference_gate[2]

    def draw_gate_noise(self, num_realizations: int, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """eps: (H, D, R) i.i.d. N(0, 1) / (D R)^(1/4), so that E[sum_r eps_d eps_d] = sqrt(R / D)."""
        if self.code_shape is None:
            raise ValueError("draw_gate_noise needs the filter's code_shape")
        reference = self.gate if self.gated else None
        device = None if reference is None else reference.device
        dtype = None if reference is None else reference.dtype
        noise = torch.randn(*self.code_shape, num_realizations, generator=generator, device=device, dtype=dtype)
        return noise / (self.code_shape[1] * num_realizations) ** 0.25

    def effective_template(self, template: torch.Tensor) -> torch.Tensor:
        """Kernel seen through this filter: (1 - delta) P + delta, for a template (H, D, M, N)."""
        if not self.gated:
            return template
        delta = torch.sigmoid(self.gate)[..., None, None]               # (H, D, 1, 1)
        return (1 - delta) * template + delta

    def gate_values(self) -> Optional[torch.Tensor]:
        """delta = sigmoid(gate): (H, D), or None when not gated."""
        return torch.sigmoid(self.gate) if self.gated else None

    def _check(self, queries, keys, code_shape: Tuple[int, ...]):
        """ValueError unless queries and keys (B, *size, H, D) suit a code of shape code_shape (that of
        qbar, or of a SharedCode): (1, *code_size, H, D, R). Whether code_size covers size is left
        to the caller (a tuple code is cropped, a SharedCode serves prefixes)."""
        if queries.shape != keys.shape:
            raise ValueError(f"queries and keys must have the same shape, got {tuple(queries.shape)} "
                             f"and {tuple(keys.shape)}")
        if queries.dim() < 3 or len(code_shape) != queries.dim() + 1 or code_shape[0] != 1:
            raise ValueError(f"queries (B, *size, H, D) and code (1, *size, H, D, R) do not match: "
                             f"{tuple(queries.shape)} and {tuple(code_shape)}")
        heads_features = tuple(code_shape[-3:-1])
        if self.code_shape is not None and heads_features != self.code_shape:
            raise ValueError(f"code has (heads, features) {heads_features}, expected {self.code_shape}")
        if heads_features != tuple(queries.shape[-2:]):
            raise ValueError(f"queries have (heads, features) {tuple(queries.shape[-2:])}, "
                             f"but the code has {heads_features}")


def _mix_code(x, code, positional=None, noise=None, free=None):
    """sum_d x_d [positional_d code_d + free_d noise_d]: (B, S, H, D) -> (B, S, H, R)."""
    return _MixCode.apply(x, code, positional, noise, free)


class _MixCode(torch.autograd.Function):
    """out[b,s,h,r] = sum_d x[b,s,h,d] (a[h,d] code[s,h,d,r] + c[h,d] noise[h,d,r]).

    a, noise, c are optional (all None: the ungated filter). Saves only its inputs for backward (x and
    references to the shared code), where plain autograd would also keep scaled and permuted copies of x.
    """

    @staticmethod
    def forward(ctx, x, code, a, noise, c):
        ctx.save_for_backward(x, code, a, noise, c)
        xa = x if a is None else x * a                                  # (B, S, H, D)
        out = torch.einsum("bshd,shdr->bshr", xa, code)                  # (B, S, H, R)
        if noise is not None:
            out = out + torch.einsum("bshd,hdr->bshr", x * c, noise)
        return out.contiguous()

    @staticmethod
    def backward(ctx, grad):                                            # grad: (B, S, H, R)
        # under autocast the forward ran in a lower precision: compute the backward in the grad's dtype
        x, code, a, noise, c = (t if t is None else t.to(grad.dtype) for t in ctx.saved_tensors)
        need_x, need_code, need_a, need_noise, need_c = ctx.needs_input_grad
        grad_code = None
        grad_xa = torch.einsum("bshr,shdr->bshd", grad, code)           # (B, S, H, D)
        if need_code:
            xa = x if a is None else x * a
            grad_code = torch.einsum("bshd,bshr->shdr", xa, grad)       # (S, H, D, R)
        grad_x, grad_a, grad_noise, grad_c = gate_backward(x, grad, grad_xa, a, noise, c, need_x, need_a,
                                                           need_noise, need_c)
        return grad_x, grad_code, grad_a, grad_noise, grad_c


def _own_storage(x: torch.Tensor) -> torch.Tensor:
    """x, or a contiguous copy of it when it is a view of a larger tensor: saving q, a view of a
    model's (B, N, 3, H, D) qkv projection, would keep the keys and values alive with it."""
    return x if x.untyped_storage().nbytes() <= x.numel() * x.element_size() else x.contiguous()


def _mix_one_position(queries, keys, codes, positional, noise, free):
    """Both mixes at a single position without autograd (generation), as few operations as possible:
    the gate folded into one effective (H, D, R) code each for q and k, then one batched product.

    queries, keys (B, 1, H, D); codes: (qbar, kbar) (1, H, D, R) each -> (qhat, khat) (B, 1, H, R)."""
    code = torch.cat(codes).to(compute_dtype(codes[0]))                 # (2, H, D, R)
    if positional is not None:
        code = positional[..., None] * code + free[..., None] * noise   # (2, H, D, R)
    x = torch.cat([queries, keys], dim=1).transpose(1, 2)               # (B, H, 2, D) -> (2 via B)
    out = torch.matmul(x.permute(2, 1, 0, 3), code)                     # (2, H, B, D) @ (2, H, D, R)
    out = out.permute(2, 0, 1, 3).unsqueeze(2)                          # (B, 2, 1, H, R)
    return out[:, 0], out[:, 1]


class _MixSharedCode(torch.autograd.Function):
    """`_MixCode` for one code of a SharedCode: out = sum_d x_d (a_d code_d + c_d noise_d), through
    `spe.contract.gated_contract` (compiled: the gate folded into each (D, R) block, no (x a) tensor).

    The code is read from the SharedCode (not an autograd input); its gradient (x a)^T grad is handed
    to the SharedCode as a pending (x, grad, a) triple until the SharedCode has allocated its buffer,
    after which the compiled backward adds it into the buffer in its own pass (P = x^T grad is then
    computed once; allocating the buffer earlier raised the step's peak memory). `link` (the
    SharedCode's tie to the graph) receives a zero. Saves its inputs and the slice of the code it
    read (freed with the graph's saved tensors after the backward, so that the SharedCode's storage
    can be reused), and the SharedCode's gradients, not the SharedCode itself.
    """

    @staticmethod
    def forward(ctx, x, link, a, noise, c, shared, which):
        ctx.gradients, ctx.which, ctx.backend = shared.gradients, which, shared.backend
        code = shared.codes[which][: x.shape[1]]                        # (S, H, D, R)
        ctx.save_for_backward(_own_storage(x), a, noise, c, code)
        gate = None if a is None else (a, c, noise)
        return gated_contract(x, code, gate, shared.backend)            # (B, S, H, R)

    @staticmethod
    def backward(ctx, grad):                                            # grad: (B, S, H, R)
        x, a, noise, c, code = ctx.saved_tensors
        gradients, which, backend = ctx.gradients, ctx.which, ctx.backend
        need_x, need_link, need_a, need_noise, need_c, _, _ = ctx.needs_input_grad
        gate = None if a is None else (a, c, noise)
        buf = None
        if need_link and gated_compiled(code, backend):                 # added to in the kernel's pass
            buf = gradients.gradient_buffer(which, x.shape[1])          # once allocated (else None)
        if need_link and buf is None:
            gradients.add(which, x, grad.to(compute_dtype(code)), scale=a)
        grad_x, grad_a, grad_noise, grad_c = gated_contract_backward(
            grad, x, code, gate, buf, need_x, need_a or need_noise or need_c, backend)
        grad_link = grad.new_zeros(()) if need_link else None
        return (grad_x, grad_link, grad_a if need_a else None, grad_noise if need_noise else None,
                grad_c if need_c else None, None, None)
