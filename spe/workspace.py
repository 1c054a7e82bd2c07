"""Large tensors kept from one call to the next and written into again, when nothing else holds them.

A training step computes SPE's codes afresh, 2 x 134 MiB at the paper's width. With glibc's default
allocator every allocation that large is a fresh mapping, so each step pays a page fault per 4 KiB
on first touch and the kernel's zeroing of the pages (bench/README.md measures the system time).
A `Workspace` hands the previous call's tensor back instead, but only when its storage is
referenced by the workspace alone: a code still saved by an autograd graph (a graph kept with
retain_graph=True, a SharedCode the caller holds on to) is never overwritten, a fresh tensor is
allocated in its place.

    workspace = Workspace()
    out = workspace.empty("qbar", (S, H, D, R), like=omega)   # same storage as last call, if free
"""

from __future__ import annotations

import torch


class Workspace:
    """Named tensors, each reused by the next request of the same shape, dtype and device when free."""

    def __init__(self) -> None:
        self._tensors: dict[str, torch.Tensor] = {}

    def empty(self, name: str, shape: tuple[int, ...], like: torch.Tensor,
              dtype: torch.dtype | None = None) -> torch.Tensor:
        """An uninitialised tensor of `shape` with like's device and dtype (or `dtype`): the one kept
        under `name` when it matches and nothing else refers to it, else a new one (then kept
        instead). What is handed out is an alias (its own tensor object on the kept storage), so that
        whoever holds it counts as a reference to the storage."""
        dtype = like.dtype if dtype is None else dtype
        kept = self._tensors.pop(name, None)
        if kept is not None and tuple(kept.shape) == tuple(shape) and kept.dtype == dtype \
                and kept.device == like.device and _only_reference(kept):
            self._tensors[name] = kept
            return kept.detach()
        del kept                                            # its memory can serve the new tensor
        fresh = torch.empty(shape, dtype=dtype, device=like.device)
        self._tensors[name] = fresh
        return fresh.detach()

    def clear(self) -> None:
        """Forget every kept tensor (their memory is freed once nothing else holds them)."""
        self._tensors.clear()

    # a cache, not state: a copied or pickled module (copy.deepcopy(model), torch.save(model)) starts
    # with an empty workspace instead of duplicating or writing out hundreds of MiB of codes
    def __deepcopy__(self, memo) -> Workspace:
        return Workspace()

    def __getstate__(self) -> dict:
        return {"_tensors": {}}


def _only_reference(t: torch.Tensor) -> bool:
    """Whether t's storage is held by t alone (no alias or view handed out is alive, no autograd saved
    copy). Uses PyTorch's use counts (private API); where they are
    missing, answers False: the workspace then always allocates, as if there were none."""
    use_count = getattr(t, "_use_count", None)
    storage_use_count = getattr(torch._C, "_storage_Use_Count", None)
    if use_count is None or storage_use_count is None:
        return False
    # the storage: one reference from t's TensorImpl, one from the Python storage object made here
    return use_count() == 1 and storage_use_count(t.untyped_storage()._cdata) == 2
