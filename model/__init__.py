"""Performer language models for symbolic music with stochastic (or classic) positional encoding."""

from model.config import ModelConfig
from model.device import DEVICE_NAMES, resolve_device
from model.kernels import causal_dot_product_torch, resolve_kernel
from model.loss import IGNORE_INDEX, token_loss
from model.performer import GenerationState, MusicPerformer, count_parameters, detach_state
from model.positional import POSITIONAL_ENCODINGS, PositionalEncoding, PositionalNoise

__all__ = ["ModelConfig", "MusicPerformer", "GenerationState", "PositionalNoise", "PositionalEncoding",
           "POSITIONAL_ENCODINGS", "IGNORE_INDEX", "token_loss", "count_parameters", "DEVICE_NAMES",
           "resolve_device", "causal_dot_product_torch", "resolve_kernel", "detach_state"]
