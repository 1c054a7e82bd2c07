"""Sampling from a MusicPerformer: nucleus / temperature sampling, grammar masks, recurrent decoding.

    logits -> mask tokens the grammar forbids -> / temperature -> softmax -> keep the smallest set of
    most probable tokens whose mass reaches top_p -> renormalise -> draw

Decoding is recurrent: one positional code is drawn for the whole length (prompt + new tokens), the
prompt is fed token by token through `model.step` (O(1) time and memory per token, whatever the
position), then each sampled token is fed back until EOS or the token budget.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from model import MusicPerformer

logger = logging.getLogger(__name__)


class GrammarDeadEnd(RuntimeError):
    """The grammar allows no token at some point of a constrained decoding."""


@dataclass
class SamplingConfig:
    top_p: float = 0.9  # nucleus mass kept (1.0: sample from the whole distribution)
    temperature: float = 1.2  # logits are divided by this before the softmax (> 0)
    constrained: bool = True  # mask the tokens the tokenizer's grammar forbids

    def __post_init__(self) -> None:
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not self.temperature > 0.0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")


@dataclass
class GenerationResult:
    tokens: list[int]  # prompt followed by the generated ids (EOS included when reached)
    prompt_len: int  # number of prompt ids at the start of `tokens`
    stopped_at_eos: bool  # whether decoding ended on EOS (else: budget or stop condition)
    seconds: float  # wall-clock time of the decoding loop
    code_length: int  # number of positions the positional code was drawn for

    @property
    def generated(self) -> list[int]:
        """The ids after the prompt."""
        return self.tokens[self.prompt_len:]


def sampling_probabilities(logits: torch.Tensor, top_p: float, temperature: float,
                           allowed: torch.Tensor | None = None) -> torch.Tensor:
    """(B, V) logits -> (B, V) probabilities after masking, temperature and the nucleus cut."""
    logits = logits.double() / temperature  # (B, V)
    if allowed is not None:
        if not bool(allowed.any(dim=-1).all()):
            raise GrammarDeadEnd("the grammar allows no token here")
        logits = logits.masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(logits, dim=-1)  # (B, V)
    sorted_probs, order = probs.sort(dim=-1, descending=True)  # (B, V) each
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # (B, V): mass of strictly better tokens
    keep_sorted = mass_before < top_p  # the most probable token is always kept
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)  # (B, V) in vocabulary order
    probs = probs * keep
    return probs / probs.sum(dim=-1, keepdim=True)


def sample_next(logits: torch.Tensor, top_p: float = 0.9, temperature: float = 1.2,
                allowed: torch.Tensor | None = None, generator: torch.Generator | None = None
                ) -> torch.Tensor:
    """Draw one id per row of (B, V) logits (allowed: (B, V) bool mask or None) -> (B,) long."""
    probs = sampling_probabilities(logits, top_p, temperature, allowed)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]  # (B,)


def check_length(model: MusicPerformer, total: int) -> None:
    """ValueError when the model cannot encode positions 0 .. total-1 (learned APE table size)."""
    cfg = model.cfg
    if cfg.pe == "learned_ape" and total > cfg.max_len:
        raise ValueError(f"this model (pe=learned_ape) knows {cfg.max_len} positions; prompt + new "
                         f"tokens = {total} do not fit (use fewer tokens or a shorter prompt)")


@torch.no_grad()
def generate(model: MusicPerformer, tokenizer: Any, prompt: Sequence[int], max_new_tokens: int,
             sampling: SamplingConfig | None = None,
             generator: torch.Generator | None = None, progress: bool = False,
             stop: Callable[[list[int]], bool] | None = None) -> GenerationResult:
    """Continue `prompt` (a non-empty list of ids) by up to max_new_tokens ids, stopping at EOS.

    `stop(tokens)` is asked after every new token and ends decoding when it returns True.
    With constraints, tokens of an event left unfinished when decoding ends (e.g. a note's pitch
    without its velocity and duration) are dropped. The model is put in eval mode; `generator`
    drives both the positional code and the draws.
    """
    sampling = SamplingConfig() if sampling is None else sampling
    prompt = [int(t) for t in prompt]
    if not prompt:
        raise ValueError("generation needs a non-empty prompt (at least a start token)")
    if max_new_tokens < 1:
        raise ValueError(f"the number of new tokens must be >= 1, got {max_new_tokens}")
    vocab_size = model.cfg.vocab_size
    if tokenizer.vocab_size != vocab_size:
        raise ValueError(f"tokenizer has {tokenizer.vocab_size} tokens but the model {vocab_size}")
    if min(prompt) < 0 or max(prompt) >= vocab_size:
        raise ValueError(f"prompt ids must be in 0 .. {vocab_size - 1}")
    total = len(prompt) + max_new_tokens
    check_length(model, total)
    model.eval()
    device = model.head.weight.device
    code = model.draw_positional_code(total, generator=generator)  # one realisation for everything
    state = model.init_state(1, positional_code=code)
    grammar = tokenizer.constraint_state() if sampling.constrained else None

    start = time.perf_counter()
    tokens = list(prompt)
    for position, token in enumerate(prompt):
        if grammar is not None:
            _check_allowed(grammar, token, tokenizer, position)
            grammar.advance(token)
        logits, state = model.step(torch.tensor([token], device=device), state)  # (1, V)

    eos = tokenizer.eos_id
    stopped_at_eos = False
    complete = None  # longest length after which the grammar allows EOS (no unfinished event)
    bar = tqdm(total=max_new_tokens, desc="generating", unit="tok", disable=not progress)
    for _ in range(max_new_tokens):
        allowed = None
        if grammar is not None:
            mask = np.asarray(grammar.allowed(), dtype=bool)  # (V,)
            complete = len(tokens) if mask[eos] else complete
            allowed = torch.from_numpy(mask)[None].to(device)  # (1, V)
        token = int(sample_next(logits, sampling.top_p, sampling.temperature, allowed, generator))
        tokens.append(token)
        bar.update(1)
        if token == eos:
            stopped_at_eos = True
            break
        if grammar is not None:
            grammar.advance(token)
        if stop is not None and stop(tokens):
            break
        if len(tokens) < total:
            logits, state = model.step(torch.tensor([token], device=device), state)
    bar.close()
    if grammar is not None and not stopped_at_eos:
        complete = len(tokens) if grammar.allowed()[eos] else complete
        if complete is not None and len(prompt) <= complete < len(tokens):
            logger.info("dropped %d trailing tokens of an unfinished event", len(tokens) - complete)
            tokens = tokens[:complete]
    seconds = time.perf_counter() - start
    new = len(tokens) - len(prompt)
    logger.info("generated %d tokens in %.1f s (%.1f tokens/s)%s", new, seconds,
                new / max(seconds, 1e-9), ", stopped at EOS" if stopped_at_eos else "")
    return GenerationResult(tokens=tokens, prompt_len=len(prompt), stopped_at_eos=stopped_at_eos,
                            seconds=seconds, code_length=total)


def _check_allowed(grammar: Any, token: int, tokenizer: Any, position: int) -> None:
    """ValueError when a prompt token breaks the grammar (the prompt is not a valid sequence)."""
    if not bool(np.asarray(grammar.allowed())[token]):
        raise ValueError(f"the prompt breaks the tokenizer's grammar at position {position}: token "
                         f"{tokenizer.vocab.token(token)!r} is not allowed there")
