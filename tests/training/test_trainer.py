"""training.trainer: what the Trainer refuses before it builds anything."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from groove import GrooveTokenizer
from training.config import RunConfig, apply_overrides
from training.distributed import DistEnv
from training.trainer import Trainer


def test_fill_in_the_middle_names_the_format_it_needs(tmp_path):
    """data.fim_rate > 0 with a corpus whose tokenizer has no fill-in-the-middle markers."""
    cfg = apply_overrides(RunConfig(), ["data.fim_rate=0.5"])
    corpus = SimpleNamespace(tokenizer=GrooveTokenizer())
    with pytest.raises(ValueError, match="needs the remi token format .* format groove"):
        Trainer(cfg, corpus, tmp_path / "run", DistEnv(rank=0, local_rank=0, world=1), torch.device("cpu"))
