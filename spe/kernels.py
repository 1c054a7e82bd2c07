"""The one switch of spe's optional compiled CPU kernels (csrc/spe_kernels, built by `make setup`).

Every spe module asks `kernels_for(tensors...)` and takes the compiled path when it gets the module,
the plain PyTorch path (any device, any dtype: the reference) when it gets None. Nothing outside spe/
names the kernels.

    from spe.kernels import kernels_for
    kernels = kernels_for(code)            # spe_kernels, or None
    with spe.kernels.plain():              # the PyTorch path everywhere (tests, before/after timings)
        ...
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from types import ModuleType
from typing import Iterator

import torch

logger = logging.getLogger(__name__)

try:
    import spe_kernels as _module
except ImportError as error:  # the PyTorch path then serves every call
    logger.debug("spe_kernels unavailable (%s): SPE runs its PyTorch path", error)
    _module = None

FLOATS = (torch.float32, torch.float64)  # what the kernels compute in
STORED = FLOATS + (torch.float16,)  # what they read a stored code in (float16 read back as float32)

_enabled = _module is not None  # the switch: the kernels are installed and not turned off


def available() -> bool:
    """Whether the compiled kernels are installed and switched on."""
    return _enabled


def kernels_for(*tensors: torch.Tensor, dtypes: tuple[torch.dtype, ...] = FLOATS) -> ModuleType | None:
    """The spe_kernels module when it serves a call on `tensors` (switched on, every tensor on the
    CPU in one of `dtypes`), else None."""
    if not _enabled or not all(t.device.type == "cpu" and t.dtype in dtypes for t in tensors):
        return None
    return _module


def module() -> ModuleType | None:
    """The imported spe_kernels, for a call whose compiled path `kernels_for` (or a backend chosen
    by it) already chose."""
    return _module


@contextmanager
def plain() -> Iterator[None]:
    """Within the block, spe runs its plain PyTorch path even where the kernels would serve."""
    global _enabled
    before, _enabled = _enabled, False
    try:
        yield
    finally:
        _enabled = before
