"""Fine-tuning: start a training run from the weights of a shipped or saved model.

    python train.py --init-from pretrained --set data.kind=midi_folder --set data.source=my_midi/ \\
        --set train.lr=2e-4 --max-steps 500 --out runs/my_finetune

`--init-from` names the shipped model (`pretrained`), a run directory (its latest checkpoint) or a
checkpoint directory. The new run starts at step 0 with a fresh optimizer and learning-rate schedule;
only the weights come from the source. Its config:

* model section: the source model's. A `--set model.X=...` that would change the names or shapes of
  the weights is an error; shape-free fields (dropout, the attention implementation) may be changed;
* data, train and generate sections: from --config when given, else from the source's saved config,
  then the --set overrides. Setting data.kind or data.source without data.root builds the corpus in
  corpus/<kind>_<source folder name> (not in the source's corpus folder);
* the corpus must use exactly the source's vocabulary (checked token by token, with a one-line error
  naming the tokens that differ). One extension is allowed: with data.fim_rate > 0 the fill-in-the-middle
  markers are appended (remi.infill); their embedding and output rows start as the mean of the others.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from training.checkpoint import (PRETRAINED, load_weights, read_meta, resolve_checkpoint, run_dir_of,
                                 shipped_model)
from training.config import RunConfig, apply_overrides, load_config
from model import MusicPerformer
from remi.vocab import INFILL_TOKENS
from tokenization import BaseTokenizer

logger = logging.getLogger(__name__)

PRETRAINED_NAME = "pretrained"  # --init-from value naming the model shipped in the repository


@dataclass
class InitSource:
    given: str  # the --init-from value
    path: Path  # the checkpoint directory it resolves to
    meta: dict[str, Any]  # that checkpoint's meta.json
    config: RunConfig  # the source run's config

    @property
    def name(self) -> str:
        """A short name for the default run directory (finetune_<name>)."""
        return (run_dir_of(self.path) or self.path).name or "model"


def resolve_source(given: str) -> InitSource:
    """The checkpoint named by --init-from ('pretrained': the default shipped model; a shipped model's
    name; a run or a checkpoint directory)."""
    path = PRETRAINED if given == PRETRAINED_NAME else Path(shipped_model(given) or given)
    if not path.exists():
        raise ValueError(f"--init-from {given}: not found (give '{PRETRAINED_NAME}', a shipped model's name, "
                         f"a run directory or a checkpoint directory)")
    folder = resolve_checkpoint(path)
    meta = read_meta(folder)
    config = RunConfig.from_dict(meta["config"], source=f"{folder}/meta.json")
    return InitSource(given, folder, meta, config)


def finetune_config(source: InitSource, config: str | None, overrides: Sequence[str]) -> RunConfig:
    """The run config of a fine-tuning run (see the module docstring)."""
    base = load_config(config) if config else source.config
    values = base.to_dict()
    values["model"] = source.config.to_dict()["model"]
    if config and base.model != source.config.model:
        logger.info("--init-from: the model section of %s is replaced by the source model's", config)
    overrides = list(overrides)
    keys = {item.partition("=")[0].strip() for item in overrides}
    if keys & {"data.kind", "data.source"} and "data.root" not in keys:
        provisional = apply_overrides(RunConfig.from_dict(values, source=str(source.path)), overrides)
        folder = Path(provisional.data.source).name if provisional.data.source else "data"
        root = f"corpus/{provisional.data.kind}_{folder}"
        logger.info("--init-from: the corpus is built in %s (set data.root to choose)", root)
        overrides.append(f"data.root={root}")
    cfg = apply_overrides(RunConfig.from_dict(values, source=str(source.path)), overrides)
    check_model_shapes(source, cfg)
    return cfg


def check_model_shapes(source: InitSource, cfg: RunConfig) -> None:
    """ValueError when cfg's model would not hold the source's weights (an override changed shapes)."""
    if cfg.model == source.config.model:
        return
    vocab_size = len(source.meta["tokenizer"]["vocab"])
    expected = weight_shapes(source.config, vocab_size)
    if weight_shapes(cfg, vocab_size) != expected:
        old, new = source.config.to_dict()["model"], cfg.to_dict()["model"]
        changed = ", ".join(f"model.{k}={new[k]} (source: {old[k]})" for k in old if old[k] != new[k])
        raise ValueError(f"--init-from {source.given}: {changed} would change the shapes of the source "
                         f"model's weights; fine-tuning keeps its architecture (drop the override)")


def weight_shapes(cfg: RunConfig, vocab_size: int) -> dict[str, tuple[int, ...]]:
    """Names and shapes of the state dict of cfg's model (built without allocating weights)."""
    with torch.device("meta"):
        model = MusicPerformer(cfg.model_config(vocab_size))
    return {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}


def check_vocabulary(source: InitSource, tokenizer: BaseTokenizer) -> None:
    """ValueError (one line, naming the differing tokens) when the corpus tokenizer's vocabulary is
    not exactly the source model's."""
    saved = source.meta["tokenizer"]
    model_tokens, corpus_tokens = list(saved["vocab"]), list(tokenizer.vocab.tokens)
    if model_tokens == corpus_tokens or appends_infill(model_tokens, corpus_tokens):
        return
    corpus_set, model_set = set(corpus_tokens), set(model_tokens)
    only_model = [t for t in model_tokens if t not in corpus_set]
    only_corpus = [t for t in corpus_tokens if t not in model_set]
    moved = sum(1 for i, t in enumerate(model_tokens) if t in corpus_set and tokenizer.vocab[t] != i)
    parts = [f"{len(only_model)} tokens only in the model ({few(only_model)})" if only_model else "",
             f"{len(only_corpus)} only in the corpus ({few(only_corpus)})" if only_corpus else "",
             f"{moved} at other ids" if moved else ""]
    raise ValueError(
        f"--init-from {source.given}: the corpus vocabulary ({type(tokenizer).__name__} "
        f"{tokenizer.config()}, {len(corpus_tokens)} tokens) differs from the model's ({saved['tokenizer']} "
        f"{saved.get('config', {})}, {len(model_tokens)} tokens): " + "; ".join(p for p in parts if p)
        + " (build the corpus with the model's tokenizer settings, e.g. data.format, data.time_signatures)")


def appends_infill(model_tokens: Sequence[str], tokens: Sequence[str]) -> bool:
    """Whether ``tokens`` are the model's followed by the fill-in-the-middle markers."""
    return list(tokens) == list(model_tokens) + list(INFILL_TOKENS)


def few(tokens: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(tokens[:limit])
    return shown + (f", ... +{len(tokens) - limit} more" if len(tokens) > limit else "")


def init_weights(model: torch.nn.Module, source: InitSource, out: Path, write_record: bool) -> None:
    """Load the source weights into `model`; rank 0 records the source in out/init_from.json."""
    load_weights(source.path, model, grow_vocab=True)
    logger.info("initialised from %s (step %s of its run); fresh optimizer and schedule", source.path,
                source.meta.get("step"))
    if write_record:
        out.mkdir(parents=True, exist_ok=True)
        record = {"init_from": source.given, "checkpoint": str(source.path.resolve()),
                  "source_step": source.meta.get("step"),
                  "num_parameters": source.meta.get("num_parameters")}
        (out / "init_from.json").write_text(json.dumps(record, indent=1) + "\n")
