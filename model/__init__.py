"""Performer language models for symbolic music with stochastic (or classic) positional encoding."""

from model.config import ModelConfig
from model.kernels import causal_dot_product_torch, resolve_kernel
from model.performer import GenerationState, MusicPerformer, count_parameters
from model.positional import PositionalCode

__all__ = ["ModelConfig", "MusicPerformer", "GenerationState", "PositionalCode", "count_parameters",
           "causal_dot_product_torch", "resolve_kernel"]
