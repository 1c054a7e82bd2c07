"""Checkpoints without pickle: safetensors for tensors, JSON for everything else.

    run_dir/checkpoints/step_000500/
        model.safetensors       weights (model.state_dict(), FAVOR+ feature buffers included)
        optimizer.safetensors   optimizer state tensors, flattened as "state.<param index>.<name>"
        rng.safetensors         tensor RNG states of every process, "<rank>.<name>"
        meta.json               step, epoch, resolved config, tokenizer, scheduler, optimizer
                                structure, JSON RNG states, model class and parameter count
        manifest.json           every file's size, written last
    run_dir/checkpoints/latest  text file naming the newest checkpoint directory

The folders are written, listed and pruned by `training.checkpoint_store`, so that a crash at any
instant leaves only complete checkpoints under step_* names (each with a manifest, written last).

    save_checkpoint(run_dir, model=..., tokenizer=..., config=..., step=..., optimizer=...)
    ckpt = load_checkpoint(run_dir_or_checkpoint_dir, device="cpu")   # model + tokenizer rebuilt
    state = restore_training(path, model, optimizer)                    # resume into live objects
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from training.checkpoint_store import POINTER, is_complete, newest_complete, write_checkpoint
from training.checkpoint_store import list_complete as list_checkpoints  # complete ones, oldest first
from training.checkpoint_checks import check_meta, check_optimizer, check_weight_shapes, shape_mismatch
from training.config import RunConfig
from model import MusicPerformer
from model.shipped import PRETRAINED, shipped_model, shipped_models  # noqa: F401  (the commands' lookup)
from tokenization import BaseTokenizer, tokenizer_from_dict

logger = logging.getLogger(__name__)

# The shipped models, one folder each (pretrained/NAME/); pretrained/latest names the default one.
FORMAT_VERSION = 1

RngState = dict[str, Any]  # one process's RNG states: name -> uint8 tensor or JSON-able value


@dataclass
class Checkpoint:
    model: MusicPerformer  # rebuilt from the config, weights loaded, in eval mode
    tokenizer: BaseTokenizer  # rebuilt from its saved dict
    config: RunConfig  # the resolved config of the run
    step: int  # optimisation steps done when it was saved
    meta: dict[str, Any]  # the whole meta.json
    path: Path  # the checkpoint directory


@dataclass
class TrainingState:
    step: int  # optimisation steps done
    epoch: int  # data epoch in progress
    scheduler: dict[str, Any]  # learning-rate schedule state
    extra: dict[str, Any]  # training-loop state saved by the caller (e.g. data position)
    rng: list[RngState]  # RNG states, one per process (rank order)
    meta: dict[str, Any]  # the whole meta.json


# ------------------------------------------------------------------------------------ saving
def save_checkpoint(run_dir: str | Path, *, model: torch.nn.Module, tokenizer: BaseTokenizer,
                    config: RunConfig, step: int, epoch: int = 0,
                    optimizer: torch.optim.Optimizer | None = None,
                    scheduler: dict[str, Any] | None = None, extra: dict[str, Any] | None = None,
                    rng: list[RngState] | None = None, keep: int = 0) -> Path:
    """Write run_dir/checkpoints/step_<step>/ atomically, point `latest` at it, keep the newest
    `keep` checkpoints (0: all). Returns the checkpoint directory."""
    meta: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "step": step,
        "epoch": epoch,
        "config": config.to_dict(),
        "tokenizer": tokenizer.to_dict(),
        "scheduler": scheduler or {},
        "extra": extra or {},
        "model_class": type(model).__name__,
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "torch_version": torch.__version__,
        "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }

    def write_files(folder: Path) -> None:
        try:
            write_all(folder)
        except SafetensorError as error:  # a full disk: an OSError (exit 1, one line); older checkpoints stay
            raise OSError(f"cannot write checkpoint {folder.name}: {error}") from None

    def write_all(folder: Path) -> None:
        save_file(_cpu_tensors(model.state_dict()), str(folder / "model.safetensors"))
        if optimizer is not None:
            tensors, meta["optimizer"] = _flatten_optimizer(optimizer.state_dict())
            save_file(tensors, str(folder / "optimizer.safetensors"))
        if rng is not None:
            tensors, meta["rng"] = _split_rng(rng)
            save_file(tensors, str(folder / "rng.safetensors"))
        (folder / "meta.json").write_text(json.dumps(meta, indent=1))

    final = write_checkpoint(run_dir, step, write_files, keep)
    logger.info("saved checkpoint %s", final)
    return final


def run_dir_of(checkpoint_dir: Path) -> Path | None:
    """The run directory a checkpoint directory was saved in (run/checkpoints/step_x -> run), None for
    a checkpoint outside a run (e.g. a shipped model)."""
    return checkpoint_dir.parent.parent if checkpoint_dir.parent.name == "checkpoints" else None


def _cpu_tensors(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Detached, contiguous CPU copies (safetensors refuses shared or strided storage)."""
    return {k: v.detach().to("cpu", copy=True).contiguous() for k, v in tensors.items()}


def _flatten_optimizer(state_dict: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """torch.optim state_dict -> ({"state.<i>.<name>": tensor}, JSON structure of the rest)."""
    tensors, scalars = {}, {}
    for index, values in state_dict["state"].items():
        for key, value in values.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{index}.{key}"] = value
            else:
                scalars.setdefault(str(index), {})[key] = value
    groups = [{k: list(v) if isinstance(v, tuple) else v for k, v in group.items()}
              for group in state_dict["param_groups"]]
    tuple_keys = sorted({k for group in state_dict["param_groups"] for k, v in group.items()
                         if isinstance(v, tuple)})
    structure = {"param_groups": groups, "scalars": scalars, "tuple_keys": tuple_keys}
    return _cpu_tensors(tensors), structure


def _split_rng(states: list[RngState]) -> tuple[dict[str, torch.Tensor], list[dict[str, Any]]]:
    tensors, values = {}, []
    for rank, state in enumerate(states):
        values.append({})
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{rank}.{key}"] = value
            else:
                values[rank][key] = value
    return _cpu_tensors(tensors), values


# ----------------------------------------------------------------------------------- loading
def resolve_checkpoint(path: str | Path) -> Path:
    """The checkpoint directory named by `path`: a checkpoint, a run dir or its checkpoints/ (their
    newest complete checkpoint, whatever `latest` says), or a folder whose `latest` names a model
    folder (pretrained/)."""
    path = Path(path)
    if (path / "meta.json").is_file():
        if not is_complete(path):
            raise ValueError(f"{path} is not a complete checkpoint (files are missing or cut short)")
        return path
    for run_dir in (path, path.parent if path.name == "checkpoints" else None):
        newest = None if run_dir is None else newest_complete(run_dir)
        if newest is not None:
            return newest
    pointer = path / POINTER
    if pointer.is_file() and not (path / "checkpoints").exists():
        with pointer.open(errors="replace") as handle:
            target = path / handle.read(256).strip()
        if target.parent == path and is_complete(target):
            return target
    raise ValueError(f"no complete checkpoint found at {path} (expected a run directory or a "
                     f"checkpoint directory with meta.json)")


def read_meta(path: str | Path) -> dict[str, Any]:
    """meta.json of a checkpoint (path resolved as in `resolve_checkpoint`)."""
    folder = resolve_checkpoint(path)
    try:
        meta = json.loads((folder / "meta.json").read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{folder}/meta.json is unreadable: {error}") from None
    if not isinstance(meta, dict) or meta.get("format_version") != FORMAT_VERSION:
        version = meta.get("format_version") if isinstance(meta, dict) else None
        raise ValueError(f"{folder}: unsupported checkpoint format {version!r}")
    check_meta(meta, folder)
    return meta


def set_generate_defaults(path: str | Path, **values: Any) -> Path:
    """Change fields of a checkpoint's sampling defaults (its config's `generate` section) in its
    meta.json, checked as a config is; the weights are untouched. Returns the checkpoint folder."""
    folder = resolve_checkpoint(path)
    meta = read_meta(folder)
    meta["config"]["generate"] = {**meta["config"].get("generate", {}), **{k: _plain(v) for k, v in values.items()}}
    RunConfig.from_dict(meta["config"], source=f"{folder}/meta.json")  # a ValueError when a value is wrong
    (folder / "meta.json").write_text(json.dumps(meta, indent=1))
    return folder


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu") -> Checkpoint:
    """Rebuild the model (eval mode, on `device`) and tokenizer of a run dir or checkpoint dir."""
    folder = resolve_checkpoint(path)
    meta = read_meta(folder)
    config = RunConfig.from_dict(meta["config"], source=f"{folder}/meta.json")
    tokenizer = read_tokenizer(meta, folder)
    check_weight_shapes(folder, config.model_config(tokenizer.vocab_size))  # before allocating anything
    model = MusicPerformer(config.model_config(tokenizer.vocab_size))
    load_weights(folder, model)
    model.to(device).eval()
    return Checkpoint(model=model, tokenizer=tokenizer, config=config, step=int(meta["step"]),
                      meta=meta, path=folder)


def read_tokenizer(meta: dict[str, Any], folder: Path) -> BaseTokenizer:
    """The tokenizer saved in meta.json, a ValueError naming the file when it is not one."""
    try:
        return tokenizer_from_dict(meta["tokenizer"])
    except (KeyError, TypeError, AttributeError, ValueError) as error:
        raise ValueError(f"{folder}/meta.json: field 'tokenizer' is not a saved tokenizer ({error})"[:300]) from None


VOCAB_ROWS = ("embedding.weight", "head.weight")  # weights with one row per token id


def load_weights(path: str | Path, model: torch.nn.Module, grow_vocab: bool = False) -> None:
    """Load model.safetensors into `model`; a clear ValueError if names or shapes differ. With
    `grow_vocab`, the per-token weights may have fewer rows than the model's (tokens appended to the
    vocabulary): the new rows start as the mean of the saved ones."""
    folder = resolve_checkpoint(path)
    weights = _read_tensors(folder / "model.safetensors")
    expected = model.state_dict()
    if grow_vocab:
        for name in VOCAB_ROWS:
            saved, wanted = weights.get(name), expected.get(name)
            if saved is not None and wanted is not None and saved.shape[1:] == wanted.shape[1:] \
                    and saved.shape[0] < wanted.shape[0]:
                extra = saved.mean(dim=0, keepdim=True).expand(wanted.shape[0] - saved.shape[0], -1)
                weights[name] = torch.cat([saved, extra])  # (V_new, d_model)
    details = shape_mismatch({k: tuple(v.shape) for k, v in weights.items()},
                             {k: tuple(v.shape) for k, v in expected.items()}, "model")
    if details:
        raise ValueError(f"checkpoint {folder} does not match the model config: {details}")
    model.load_state_dict(weights)


def restore_training(path: str | Path, model: torch.nn.Module,
                     optimizer: torch.optim.Optimizer | None = None) -> TrainingState:
    """Load weights (and optimizer state) into live objects; return the rest of the training state."""
    folder = resolve_checkpoint(path)
    meta = read_meta(folder)
    load_weights(folder, model)
    if optimizer is not None:
        if "optimizer" not in meta:
            raise ValueError(f"checkpoint {folder} has no optimizer state")
        try:
            state = _unflatten_optimizer(_read_tensors(folder / "optimizer.safetensors"), meta["optimizer"])
        except (KeyError, TypeError, AttributeError, ValueError) as error:
            raise ValueError(f"{folder}: the optimizer state is damaged ({error})") from None
        check_optimizer(folder, state, model, optimizer)
        optimizer.load_state_dict(state)
    for name in ("scheduler", "extra", "epoch"):
        if name not in meta:
            raise ValueError(f"{folder}/meta.json: field {name!r} is missing: not a training checkpoint "
                             f"(start a run from it with --init-from)")
    try:
        rng: list[RngState] = [dict(values) for values in meta.get("rng", [])]
        if rng:
            for key, tensor in _read_tensors(folder / "rng.safetensors").items():
                rank, name = key.split(".", 1)
                rng[int(rank)][name] = tensor
    except (TypeError, ValueError, IndexError) as error:
        raise ValueError(f"{folder}: the saved random states are damaged ({error})") from None
    return TrainingState(step=meta["step"], epoch=meta["epoch"], scheduler=meta["scheduler"],
                         extra=meta["extra"], rng=rng, meta=meta)


def _read_tensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path))
    except (OSError, SafetensorError) as error:
        raise ValueError(f"cannot read {path}: {error}") from None


def _unflatten_optimizer(tensors: dict[str, torch.Tensor], structure: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for key, tensor in tensors.items():
        _, index, name = key.split(".", 2)
        state.setdefault(int(index), {})[name] = tensor
    for index, values in structure["scalars"].items():
        state.setdefault(int(index), {}).update(values)
    tuple_keys = set(structure["tuple_keys"])
    groups = [{k: tuple(v) if k in tuple_keys else v for k, v in group.items()}
              for group in structure["param_groups"]]
    return {"state": state, "param_groups": groups}


# ------------------------------------------------------------------------------------ RNG
def capture_rng() -> RngState:
    """This process's torch (CPU, CUDA), numpy and python RNG states."""
    numpy_state = np.random.get_state()
    python_state = random.getstate()
    state: RngState = {
        "torch_cpu": torch.get_rng_state(),
        "numpy": [numpy_state[0], numpy_state[1].tolist(), *map(_plain, numpy_state[2:])],
        "python": [python_state[0], list(python_state[1]), python_state[2]],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for index, cuda_state in enumerate(torch.cuda.get_rng_state_all()):
            state[f"torch_cuda_{index}"] = cuda_state
    return state


def restore_rng(state: RngState) -> None:
    """Inverse of `capture_rng` (CUDA states only for devices present)."""
    torch.set_rng_state(state["torch_cpu"])
    kind, keys, *rest = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), *rest))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            if f"torch_cuda_{index}" in state:
                torch.cuda.set_rng_state(state[f"torch_cuda_{index}"], index)


def _plain(value: Any) -> Any:
    """numpy scalars -> python scalars (for JSON)."""
    return value.item() if isinstance(value, np.generic) else value


def shipped_default() -> Path | None:
    """The folder of the default shipped model (named by PRETRAINED/latest), None without one."""
    return resolve_checkpoint(PRETRAINED) if (PRETRAINED / "latest").is_file() else None


def load_model(path: str | Path | None, device: str | torch.device = "cpu") -> Checkpoint:
    """`load_checkpoint` for the commands: `path` None means the default shipped model, a name of
    `shipped_models()` (not a path here) that model; a missing, incomplete or mismatched checkpoint
    is a ValueError naming it."""
    if path is None:
        path = shipped_default()
        if path is None:
            raise ValueError(f"no --checkpoint given and no shipped model in {PRETRAINED}")
    path = Path(shipped_model(path) or path)
    if not path.exists():
        known = ", ".join(shipped_models()) or "none here"
        raise ValueError(f"checkpoint not found: {path} (shipped models: {known})")
    try:
        ckpt = load_checkpoint(path, device=device)
    except (ValueError, OSError, KeyError) as error:  # KeyError: a meta.json without a required field
        raise ValueError(f"cannot load checkpoint {path}: {error}") from None
    logger.info("loaded %s (step %s, pe=%s, %s tokens)", path, ckpt.step, ckpt.model.cfg.pe,
                ckpt.tokenizer.vocab_size)
    return ckpt
