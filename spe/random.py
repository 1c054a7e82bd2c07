"""Counter-based Gaussian noise: convSPE's white noise, drawn fast, in parallel and reproducibly.

torch draws normal samples on the CPU on one thread from one Mersenne-Twister stream; convSPE's
noise, R x H*D x (N + P - 1) samples, is then a sixth of a training step at N 16384, batch 1
(bench/README.md). Here sample i of a draw keyed by a 64-bit `seed` is a function of (seed, i)
alone, so a draw runs on all threads, in any order, with the same values:

- Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011), key = the
  seed's two 32-bit halves, turns counter k = (k mod 2^32, k div 2^32, 0, 0) into four 32-bit
  words w0..w3;
- Box-Muller turns (w0, w1) and (w2, w3) into two samples each, in float32: u = (w >> 8 + 1) 2^-24
  in (0, 1], v = (w' >> 8) 2^-24, sqrt(-2 log u) (cos 2 pi v, sin 2 pi v);
- sample i is word (i mod 4B) div B of counter (i div 4B) B + i mod B, B = BLOCK = 64 counters (the
  compiled kernel's block: its samples are its counters' words 0, then 1, 2, 3).

`normal` runs the compiled kernel where `spe.kernels` serves (`normal_fill`, vectorised and
multi-threaded: a fresh draw costs 1.6-2x less CPU time and 2.6-3x less wall time than
`torch.randn`, bench/README.md), on float32 / float64 CPU tensors, and this module's PyTorch
implementation elsewhere (other devices and dtypes, or without the kernels): the same integers, and
samples equal to float32 rounding (the kernel's logarithm and sine are polynomials).
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch

from spe import kernels

BLOCK = 64  # counters per block of the sample order (the compiled kernel's block)
MASK = 0xFFFFFFFF
PHILOX_M = (0xD2511F53, 0xCD9E8D57)  # Philox4x32 multipliers
PHILOX_W = (0x9E3779B9, 0xBB67AE85)  # Weyl increments of the key
SEED_BOUND = 2**63 - 1  # `draw_seed` draws seeds in [0, SEED_BOUND)


def draw_seed(generator: Optional[torch.Generator] = None) -> int:
    """A seed for `normal` from `generator` (or torch's default generator)."""
    device = generator.device if generator is not None else "cpu"
    return int(torch.randint(0, SEED_BOUND, (), generator=generator, device=device))


def normal(shape: Sequence[int], seed: int, offset: int = 0, device: Optional[torch.device] = None,
           dtype: Optional[torch.dtype] = None, out: Optional[torch.Tensor] = None,
           row_stride: Optional[int] = None) -> torch.Tensor:
    """Samples offset .. offset + prod(shape) - 1 of the draw keyed by `seed`, as a `shape` tensor
    (new, or `out`: contiguous, of that shape; its device and dtype then). With `row_stride`, row r
    (the first dimension, of L values) holds samples offset + r row_stride .. + L - 1 instead: rows
    spaced out in the draw, in one call."""
    if not 0 <= seed < 2**64 or offset < 0:
        raise ValueError(f"seed must be in [0, 2^64) and offset >= 0, got {seed} and {offset}")
    shape = tuple(int(s) for s in shape)
    if out is None:
        device = torch.device("cpu") if device is None else torch.device(device)
        out = torch.empty(shape, dtype=torch.get_default_dtype() if dtype is None else dtype, device=device)
    elif tuple(out.shape) != shape or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous {shape} tensor, got {tuple(out.shape)}")
    rows = shape[0] if shape and shape[0] > 0 else 1
    row = out.numel() // rows
    if row_stride is None:
        row_stride = row
    elif rows > 1 and row_stride < row:
        raise ValueError(f"row_stride must be at least a row's {row} values, got {row_stride}")
    compiled = kernels.kernels_for(out)
    if compiled is not None:
        signed = seed - 2**64 if seed >= 2**63 else seed                # the 64 bits, signed
        compiled.normal_fill(out, signed, offset, row_stride)
        return out
    if row_stride == row:
        return out.copy_(_normal_reference(seed, offset, out.numel(), out.device).view(shape))
    starts = offset + row_stride * torch.arange(rows, device=out.device)  # (rows,)
    index = starts[:, None] + torch.arange(row, device=out.device)       # (rows, row)
    return out.copy_(_normal_reference_at(seed, index).view(shape))


def philox(counter: Sequence[torch.Tensor], key: Sequence[int]) -> tuple[torch.Tensor, ...]:
    """Philox4x32-10 of counters given as four int64 tensors of 32-bit words, key two ints."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for _ in range(10):
        hi0, lo0 = _mulhilo(PHILOX_M[0], c0)
        hi1, lo1 = _mulhilo(PHILOX_M[1], c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0, k1 = (k0 + PHILOX_W[0]) & MASK, (k1 + PHILOX_W[1]) & MASK
    return c0, c1, c2, c3


def _mulhilo(m: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(high, low) 32-bit words of m x for m < 2^32 and x an int64 tensor of values < 2^32, without
    overflowing int64: m = mh 2^16 + ml, both partial products < 2^48."""
    low_part, high_part = x * (m & 0xFFFF), x * (m >> 16)
    low = (low_part + ((high_part & 0xFFFF) << 16)) & MASK
    high = (high_part + (low_part >> 16)) >> 16
    return high, low


def _counter_words(seed: int, counters: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The four Philox words of each counter (an int64 tensor of values < 2^64) under key `seed`."""
    zero = torch.zeros_like(counters)
    return philox((counters & MASK, counters >> 32, zero, zero), (seed & MASK, (seed >> 32) & MASK))


def _polar(w: torch.Tensor, w2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Box-Muller's (radius, angle) of a pair of words: u = (w >> 8 + 1) 2^-24 in (0, 1],
    v = (w2 >> 8) 2^-24 in [0, 1); radius sqrt(-2 log u) (float32), angle 2 pi v (float64)."""
    u = ((w >> 8) + 1).to(torch.float32) * 2.0**-24
    v = (w2 >> 8).to(torch.float32) * 2.0**-24
    return torch.sqrt(-2.0 * torch.log(u)), 2.0 * math.pi * v.to(torch.float64)


def _normal_reference_at(seed: int, index: torch.Tensor) -> torch.Tensor:
    """Samples `index` (an int64 tensor of sample numbers, any shape) by the module's definition, as
    float32 of that shape: Philox of each sample's own counter (the samples of a counter are not
    shared, unlike `_normal_reference`, which serves contiguous ranges)."""
    block, within = index // (4 * BLOCK), index % (4 * BLOCK)
    word, lane = within // BLOCK, within % BLOCK                        # sample = word `word` of its counter
    w0, w1, w2, w3 = _counter_words(seed, block * BLOCK + lane)
    first = word < 2                                                    # words 0, 1: the pair (w0, w1)
    radius, angle = _polar(torch.where(first, w0, w2), torch.where(first, w1, w3))
    return radius * torch.where(word % 2 == 0, torch.cos(angle), torch.sin(angle)).to(torch.float32)


def _normal_reference(seed: int, offset: int, count: int, device: torch.device) -> torch.Tensor:
    """Samples offset .. offset + count - 1 (float32, on device) by the module's definition."""
    first, last = offset // (4 * BLOCK), (offset + count + 4 * BLOCK - 1) // (4 * BLOCK)
    counters = torch.arange(first * BLOCK, last * BLOCK, device=device, dtype=torch.int64)  # (blocks * B)
    words = _counter_words(seed, counters)
    samples = []
    for w, w2 in ((words[0], words[1]), (words[2], words[3])):
        radius, angle = _polar(w, w2)
        samples += [radius * torch.cos(angle).to(torch.float32), radius * torch.sin(angle).to(torch.float32)]
    order = torch.stack([s.view(-1, BLOCK) for s in samples], dim=1)    # (blocks, 4, B): the sample order
    start = offset - first * 4 * BLOCK
    return order.reshape(-1)[start:start + count]
