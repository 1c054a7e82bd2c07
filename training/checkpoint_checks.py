"""Checks of a checkpoint's files before they are used: a hand-edited or damaged checkpoint is one
ValueError naming the file and the field, never a traceback, and never a model allocated from sizes
that the saved weights do not have.

    check_meta(meta, folder)                    # meta.json: types and ranges of the fields read
    check_weight_shapes(folder, model_config)   # model.safetensors' header against the config, before
                                                # any parameter is allocated (a meta-device model)
    check_optimizer(folder, tensors, structure, model)   # optimizer state against the live parameters
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from model import ModelConfig, MusicPerformer

# meta.json field -> (type, what it must be)
FIELDS = {"step": (int, "an int >= 0"), "epoch": (int, "an int >= 0"), "config": (dict, "an object"),
          "tokenizer": (dict, "an object"), "scheduler": (dict, "an object"), "extra": (dict, "an object")}


def check_meta(meta: Any, folder: Path) -> None:
    """ValueError naming meta.json and the first field that is missing or of the wrong kind."""
    where = f"{folder}/meta.json"
    if not isinstance(meta, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(meta).__name__}")
    for name, (kind, what) in FIELDS.items():
        if name not in meta:
            if name in ("scheduler", "extra", "epoch"):
                continue  # optional: a shipped model has no training state
            raise ValueError(f"{where}: field {name!r} is missing")
        value = meta[name]
        if isinstance(value, bool) or not isinstance(value, kind) or (kind is int and value < 0):
            raise ValueError(f"{where}: field {name!r} must be {what}, got {value!r}"[:300])


def check_weight_shapes(folder: Path, config: ModelConfig) -> None:
    """ValueError when model.safetensors' tensors (names, shapes) differ from those `config`
    builds; read from the file's header and a model on the meta device, so nothing is allocated."""
    path = folder / "model.safetensors"
    try:
        with safe_open(str(path), framework="pt") as handle:
            saved = {name: tuple(handle.get_slice(name).get_shape()) for name in handle.keys()}
    except (OSError, SafetensorError) as error:
        raise ValueError(f"cannot read {path}: {error}") from None
    layers = {int(name.split(".")[1]) for name in saved if name.startswith("blocks.")}
    if len(layers) != config.n_layer:  # checked first: a meta model of a huge depth takes minutes to build
        raise ValueError(f"checkpoint {folder} does not match the model config of its meta.json: "
                         f"the weights have {len(layers)} layers, the config {config.n_layer}")
    with torch.device("meta"):
        expected = {name: tuple(t.shape) for name, t in MusicPerformer(config).state_dict().items()}
    details = shape_mismatch(saved, expected, "config")
    if details:
        raise ValueError(f"checkpoint {folder} does not match the model config of its meta.json: {details}")


def shape_mismatch(saved: dict[str, tuple[int, ...]], expected: dict[str, tuple[int, ...]], other: str) -> str:
    """How saved tensor shapes (by name) differ from the `other` side's (the config, the model), in
    words; empty when they agree."""
    def few(items: list[str], limit: int = 4) -> str:
        return ", ".join(items[:limit]) + (f" (+{len(items) - limit} more)" if len(items) > limit else "")

    missing = sorted(set(expected) - set(saved))
    unexpected = sorted(set(saved) - set(expected))
    reshaped = [f"{n} {saved[n]} vs {shape}" for n, shape in expected.items() if n in saved and saved[n] != shape]
    return "; ".join(part for part in (
        f"missing {few(missing)}" if missing else "",
        f"unexpected {few(unexpected)}" if unexpected else "",
        f"shape (checkpoint vs {other}) {few(reshaped)}" if reshaped else "") if part)


def check_optimizer(folder: Path, state: dict[str, Any], model: torch.nn.Module,
                    optimizer: torch.optim.Optimizer) -> None:
    """ValueError when a saved optimizer state does not fit the live parameters (group sizes, the
    shapes of its per-parameter tensors)."""
    where = f"{folder}/optimizer.safetensors"
    groups = state.get("param_groups")
    live = optimizer.param_groups
    if not isinstance(groups, list) or len(groups) != len(live) or any(
            not isinstance(g, dict) or len(g.get("params", ())) != len(l["params"]) for g, l in zip(groups, live)):
        raise ValueError(f"{where}: its parameter groups do not match the model's")
    parameters = [p for group in live for p in group["params"]]
    for index, values in state.get("state", {}).items():
        if not 0 <= int(index) < len(parameters):
            raise ValueError(f"{where}: state for parameter {index}, the model has {len(parameters)}")
        for name, value in values.items():
            if isinstance(value, torch.Tensor) and value.dim() and value.shape != parameters[int(index)].shape:
                raise ValueError(f"{where}: {name} of parameter {index} has shape {tuple(value.shape)}, "
                                 f"the parameter {tuple(parameters[int(index)].shape)}")
