"""Export a trained checkpoint as a shipped model: weights (bf16 matrices), meta.json, model card.

    card = export_model("runs/pop909_sine", "pretrained", title="Pop piano (POP909), gated sineSPE",
                        sections=[Path("eval/nll_summary.md"), Path("eval/quality.md")])

The exported folder loads like any checkpoint (`training.checkpoint.load_checkpoint`); it has no
optimizer or RNG state, so it cannot be resumed, only fine-tuned (`train.py --init-from`). Weight
matrices are stored in bfloat16 (half the size, weights are cast back to float32 on loading); the
positional-encoding parameters (sine frequencies, gains, filters) and every buffer keep float32,
since a rounded frequency shifts the phase of every far position.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any, Sequence

import torch
from safetensors.torch import load_file, save_file

from training.checkpoint import PRETRAINED, read_meta, resolve_checkpoint, run_dir_of
from training.config import RunConfig, apply_overrides

CARD = "README.md"  # the model card's file name in the exported folder
TRAINING_ONLY = ("optimizer", "rng")  # meta.json entries of the training state, not shipped
EXPORT_DATA_KEYS = ("data.root", "data.source")  # paths of the training machine, replaceable at export


def export_model(checkpoint: str | Path, out: str | Path, *, title: str, bf16: bool = True,
                 sections: Sequence[str | Path] = (), notes: str = "",
                 generate: Sequence[str] = (), average_with: str | Path | None = None,
                 average_weight: float = 0.5) -> Path:
    """Write `out`/model.safetensors, meta.json and README.md (the model card); returns the card.

    `generate`: `generate.key=value` overrides of the shipped model's sampling defaults (e.g. the
    temperature chosen by measuring its pieces), and `data.root` / `data.source` (the training
    machine's paths, e.g. made relative to the repository); anything else would no longer describe the
    weights, so it is refused. `average_with`: another checkpoint of the same model (typically the one
    this run was fine-tuned from); the weights shipped are then ``average_weight`` times this run's plus
    ``1 - average_weight`` times that one's (`averaged_weights`)."""
    folder = resolve_checkpoint(checkpoint)
    meta = read_meta(folder)
    meta["config"] = sampling_defaults(meta["config"], generate)
    weights = load_file(str(folder / "model.safetensors"))
    if average_with is not None:
        other = resolve_checkpoint(average_with)
        weights = averaged_weights(weights, load_file(str(other / "model.safetensors")), average_weight)
        meta["averaged_with"] = {"checkpoint": str(average_with), "step": read_meta(other)["step"],
                                 "weight_of_this_run": average_weight}
    if bf16:
        weights = {name: to_shipped_dtype(name, tensor) for name, tensor in weights.items()}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / ".model.safetensors.partial"
    save_file(weights, str(tmp))
    shipped = {key: value for key, value in meta.items() if key not in TRAINING_ONLY}
    shipped["exported_from"] = {"checkpoint": folder.name, "weights": "bf16 matrices" if bf16 else "float32"}
    (out / "meta.json").write_text(json.dumps(shipped, indent=1))
    tmp.replace(out / "model.safetensors")
    card = model_card(title, meta, run_dir_of(folder), out, [Path(s) for s in sections], notes)
    (out / CARD).write_text(card)
    return out / CARD


def sampling_defaults(config: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """The run's config with `generate.key=value`, `data.root=...` and `data.source=...` overrides
    applied (ValueError for anything else: it would no longer describe the weights)."""
    if not overrides:
        return config
    for item in overrides:
        key = item.partition("=")[0].strip()
        if not key.startswith("generate.") and key not in EXPORT_DATA_KEYS:
            raise ValueError(f"--set {item}: only the sampling defaults (generate.*) and where the data "
                             f"is ({', '.join(EXPORT_DATA_KEYS)}) can change at export")
    return apply_overrides(RunConfig.from_dict(config, source="checkpoint config"), list(overrides)).to_dict()


def averaged_weights(run: dict[str, torch.Tensor], other: dict[str, torch.Tensor],
                     weight: float) -> dict[str, torch.Tensor]:
    """``weight * run + (1 - weight) * other``, tensor by tensor, in float32: the weight-space ensemble of
    a fine-tuned model and the model it started from (WiSE-FT, Wortsman et al. 2022), which often holds
    up better on data unlike the fine-tuning's than either end. ValueError unless both have the same
    tensors and shapes."""
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"the averaging weight must be in [0, 1], got {weight}")
    if run.keys() != other.keys():
        only = sorted(run.keys() ^ other.keys())[:3]
        raise ValueError(f"cannot average checkpoints of different models: tensors {only} are in one only")
    for name, tensor in run.items():
        if tensor.shape != other[name].shape:
            raise ValueError(f"cannot average checkpoints of different models: {name} is "
                             f"{tuple(tensor.shape)} in one and {tuple(other[name].shape)} in the other")
    return {name: (weight * tensor.float() + (1.0 - weight) * other[name].float()).contiguous()
            for name, tensor in run.items()}


def to_shipped_dtype(name: str, tensor: torch.Tensor) -> torch.Tensor:
    """bfloat16 for the weight matrices outside the positional encoding (embedding, attention and
    MLP projections, head); biases, norms, SPE parameters and buffers (FAVOR+ features) unchanged."""
    if name.endswith(".weight") and tensor.dim() >= 2 and not name.startswith("pe."):
        return tensor.to(torch.bfloat16)
    return tensor


def training_record(run_dir: Path | None, up_to_step: int | None = None) -> dict[str, Any]:
    """From the run's metrics.csv: training time over all its sessions and the last validation loss,
    counting only rows up to `up_to_step` (the exported checkpoint's step) when given.

    Each resumed session restarts its elapsed_s clock, so the time is the sum of each session's last
    elapsed_s (a session ends where the clock goes back)."""
    path = run_dir / "metrics.csv" if run_dir is not None else None
    if path is None or not path.is_file():
        return {}
    seconds, last, sessions, val_loss, val_step = 0.0, 0.0, 1, math.nan, None
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            if up_to_step is not None and int(row["step"]) > up_to_step:
                continue  # logged after the exported checkpoint (the run went on)
            elapsed = float(row["elapsed_s"]) if row["elapsed_s"] else last
            if elapsed < last:
                seconds, sessions = seconds + last, sessions + 1
            last = elapsed
            if row["val_loss"]:
                val_loss, val_step = float(row["val_loss"]), int(row["step"])
    return {"hours": (seconds + last) / 3600, "sessions": sessions, "val_loss": val_loss, "val_step": val_step}


def trained_on(meta: dict[str, Any], sessions: int) -> str:
    """", on <device>" (", the last on" after several sessions), from the checkpoint, or from its config
    when the checkpoint predates that record; "" when neither says."""
    device = meta.get("extra", {}).get("device")
    if device is None:
        device = {"cpu": "CPU", "cuda": "a GPU"}.get(meta["config"]["train"].get("device", "auto"))
    return "" if device is None else f", {'the last ' if sessions > 1 else ''}on {device}"


def model_card(title: str, meta: dict[str, Any], run_dir: Path | None, out: Path, sections: list[Path],
               notes: str) -> str:
    """The model card: what the model is, what it was trained on, how long, and how well it does."""
    cfg, record = meta["config"], training_record(run_dir, meta["step"])
    model, data, train = cfg["model"], cfg["data"], cfg["train"]
    size = sum(p.stat().st_size for p in out.glob("*.safetensors")) / 2**20
    shipped = out.resolve().parent == PRETRAINED
    sampling = cfg["generate"]
    lines = [f"# {title}", "",
             f"Use it with `--checkpoint {out.resolve().name if shipped else out}`"
             + (f" (the default of every command when `pretrained/latest` reads `{out.resolve().name}`)."
                if shipped else "."),
             f"Sampling defaults: nucleus p = {sampling['top_p']:g} "
             + ("within each token type" if sampling.get("nucleus") == "type" else "over the vocabulary")
             + f", temperature {sampling['temperature']:g}, {sampling['tokens']:,} new tokens.", "",
             f"- Model: {model['n_layer']} layers, {model['n_head']} heads, d_model {model['d_model']}, "
             f"d_ff {model['d_ff']}, positional encoding {model['pe']}"
             + (" (gated)" if model.get("gated") and "spe" in model["pe"] else "")
             + f", FAVOR+ with {model['feature_dims']} features; {meta['num_parameters']:,} parameters; "
             f"{meta['tokenizer'].get('tokenizer', 'tokenizer')} with {len(meta['tokenizer']['vocab'])} tokens.",
             f"- Data: corpus kind `{data['kind']}`, crops of {data['crop_len']} tokens"
             + (f" (at most {data['max_bars']} bars)" if data.get("max_bars") else "")
             + f", transposition -{data['transpose']}..+{data['transpose']}.",
             f"- Training: {meta['step']:,} steps of batch {train['batch_size']} (AdamW, lr {train['lr']:g}, "
             f"warm-up {train['warmup_steps']}, cosine to {train['min_lr']:g} at step {train['max_steps']:,})"
             + (f", {record['hours']:.1f} h over {record['sessions']} session(s)" if record else "")
             + trained_on(meta, record.get("sessions", 1)) + ".",
             ]
    if record and not math.isnan(record["val_loss"]):
        lines.append(f"- Validation loss (crops, nats per token): {record['val_loss']:.3f} at step "
                     f"{record['val_step']:,}.")
    averaged = meta.get("averaged_with")
    if averaged:
        weight = averaged["weight_of_this_run"]
        lines.append(f"- Weights: {weight:g} x this run's + {1 - weight:g} x those of `{averaged['checkpoint']}` "
                     f"(step {averaged['step']:,}), averaged at export (WiSE-FT); the validation loss above is "
                     "the run's own.")
    lines.append(f"- Files: `model.safetensors` ({size:.1f} MiB; weight matrices in bfloat16) and `meta.json` "
                 "(resolved config, tokenizer vocabulary, step); no optimizer state (fine-tune with "
                 "`train.py --init-from`).")
    if notes:
        lines += ["", notes.strip()]
    for section in sections:
        lines += ["", section.read_text().strip()]
    return "\n".join(lines) + "\n"

