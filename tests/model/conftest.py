"""Small MusicPerformer configurations shared by the model tests."""

from __future__ import annotations

from typing import Callable

import pytest
import torch

from model import ModelConfig, MusicPerformer

VOCAB = 23


def tiny_config(pe: str = "sine_spe", **overrides) -> ModelConfig:
    """2 layers, 2 heads of size 8, R = 8, M = 16: a forward pass takes milliseconds."""
    values = dict(vocab_size=VOCAB, n_layer=2, n_head=2, d_model=16, d_ff=32, dropout=0.0, pe=pe,
                  num_realizations=8, num_sines=3, kernel_size=5, feature_dims=16,
                  attention="torch", max_len=64)
    values.update(overrides)
    return ModelConfig(**values)


@pytest.fixture
def make_config() -> Callable[..., ModelConfig]:
    """Factory of tiny configurations (see `tiny_config`)."""
    return tiny_config


@pytest.fixture
def make_model() -> Callable[..., MusicPerformer]:
    """Factory: a tiny model whose parameters are perturbed (std 0.3) so outputs vary strongly."""

    def build(pe: str = "sine_spe", seed: int = 0, **overrides) -> MusicPerformer:
        torch.manual_seed(seed)
        model = MusicPerformer(tiny_config(pe, **overrides))
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(0.3 * torch.randn_like(parameter))
        return model.eval()

    return build


@pytest.fixture
def tokens() -> torch.Tensor:
    """(2, 24) random token ids."""
    return torch.randint(0, VOCAB, (2, 24), generator=torch.Generator().manual_seed(1))
