"""Sampling from a MusicPerformer: nucleus / temperature sampling, grammar masks, recurrent decoding.

    logits -> mask tokens the grammar forbids -> / temperature -> softmax -> keep the smallest set of
    most probable tokens whose mass reaches top_p -> renormalise -> draw

With `nucleus="type"` the cut is made within each token type (the `Type` of `Type_Value`) instead:
the type keeps its whole probability, and only the tokens inside it are cut to its top_p mass. A
vocabulary-wide cut can favour types whose mass sits on few tokens (one Bar, a likely next Beat) over
types that spread it (some 88 pitches); with the POP909 model at step 900 the two cuts gave pieces
of the same density within their spread (pretrained/pop909/README.md).

Decoding is recurrent: one positional noise is drawn for the whole length (prompt + new tokens), the
prompt is read into the recurrent state in chunks of PROMPT_CHUNK tokens through `model.feed` (the
state N `model.step` calls would give, at the memory of one chunk), then each sampled token is fed
back through `model.step` (O(1) time and memory per token, whatever the position) until EOS or the
token budget. `Decoder` does this for a batch of samples of one prompt at once (the prompt read once,
one `model.step` per position for the whole batch, one grammar state per sample) and can be resumed:
continuing a piece only feeds the new tokens.

The sampling policy is a `SamplingConfig`, passed in: nothing is set on the (shared) tokenizer. Its
`hold_bars` reaches the grammar through `tokenizer.constraint_state(hold_bars)`, which refuses it for a
format that does not hold notes across bars.
"""

from __future__ import annotations

import copy
import math
import logging
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from generation.recall import KeyTokens, Recall, RecallConfig, Sections, mix_logits
from model import MusicPerformer
from model.attention import LayerState
from model.performer import GenerationState
from tokenization import BaseTokenizer, ConstraintState

if TYPE_CHECKING:
    from training.config import GenerateConfig

logger = logging.getLogger(__name__)


Steer = Callable[[list[int], np.ndarray], np.ndarray]  # (a sample's tokens, allowed (V,)) -> allowed (V,)
StopCondition = Callable[[list[int]], bool]  # tokens so far -> end this sample now


def without_end(eos: int, steer: Steer | None = None) -> Steer:
    """A steer that never allows the End token `eos` (after `steer`, when given): decoding then runs to
    its token budget, e.g. for a model trained on short pieces that would end a continuation early."""

    def no_end(tokens: list[int], allowed: np.ndarray) -> np.ndarray:
        allowed = allowed.copy() if steer is None else steer(tokens, allowed).copy()
        allowed[eos] = False
        return allowed

    return no_end


def tokens_named(tokenizer: BaseTokenizer, prefix: str, setting: str) -> torch.Tensor:
    """(V,) bool: the tokens whose names start with `prefix`; a ValueError naming `setting` when none does."""
    hit = torch.tensor([name.startswith(prefix) for name in tokenizer.vocab.tokens])  # (V,)
    if not bool(hit.any()):
        raise ValueError(f"{setting}: no token of the {type(tokenizer).__name__} format starts with {prefix!r}")
    return hit


def token_bias_vector(tokenizer: BaseTokenizer, pairs: Sequence[tuple[str, float]]) -> torch.Tensor | None:
    """(V,) the bias of each token under (token-name prefix, bias) pairs (summed where prefixes overlap);
    None without pairs; a ValueError for a prefix that names no token of the format."""
    if not pairs:
        return None
    bias = torch.zeros(tokenizer.vocab_size, dtype=torch.float64)
    for prefix, value in pairs:
        bias[tokens_named(tokenizer, prefix, "token_bias")] += float(value)
    return bias


def nucleus_top_p(tokenizer: BaseTokenizer, sampling: SamplingConfig) -> float | torch.Tensor:
    """The nucleus mass per token: `sampling.top_p`, or a (V,) tensor where the tokens of
    `sampling.nucleus_exempt` are never cut (a mass above 1, which no cumulative sum reaches)."""
    if not sampling.nucleus_exempt:
        return sampling.top_p
    top_p = torch.full((tokenizer.vocab_size,), sampling.top_p, dtype=torch.float64)
    for prefix in sampling.nucleus_exempt:
        top_p[tokens_named(tokenizer, prefix, "nucleus_exempt")] = NEVER_CUT
    return top_p


def shaped_logits(logits: torch.Tensor, sampling: SamplingConfig, eos: int, recalls: Sequence[Recall] | None = None,
                  end_bias: torch.Tensor | None = None, token_bias: torch.Tensor | None = None) -> torch.Tensor:
    """(B, V) the logits sampling draws from, before temperature and the nucleus: the model's (B, V)
    with each row's copy cache mixed in (`recalls`, one per row, with `sampling.recall`'s weights),
    `end_bias` (B,) added to the End token's and `token_bias` (V,) to every token's (to the model's own
    logits before the mixture with `sampling.bias_before_recall`, so that a copy keeps its tokens)."""
    if token_bias is not None and sampling.bias_before_recall:
        logits, token_bias = logits + token_bias.to(logits), None  # (B, V)
    if recalls is not None:
        logits = mix_logits(logits, recalls, sampling.recall.weights)  # (B, V) log-probs
    if end_bias is not None:
        logits = logits.clone()  # (B, V)
        logits[:, eos] += end_bias.to(logits)
    if token_bias is not None:
        logits = logits + token_bias.to(logits)  # (B, V)
    return logits


class GrammarDeadEnd(RuntimeError):
    """The grammar allows no token at some point of a constrained decoding."""


NUCLEUS_SCOPES = ("token", "type")  # where the top_p cut applies: the whole vocabulary, or each token type
SEED_MAX = 2**64 - 1  # torch.Generator.manual_seed takes seeds 0 .. 2**64 - 1
PROMPT_CHUNK = 1024  # prompt tokens read into the recurrent state in one pass (memory: one chunk's)
NEVER_CUT = 2.0  # the nucleus mass of a token exempt from the cut: above any cumulative probability


@dataclass
class SamplingConfig:
    top_p: float = 0.9  # nucleus mass kept (1.0: sample from the whole distribution)
    temperature: float = 1.2  # logits are divided by this before the softmax (> 0)
    constrained: bool = True  # mask the tokens the tokenizer's grammar forbids
    nucleus: str = "token"  # "token": one top_p cut over the vocabulary; "type": one per token type
    hold_bars: int | None = None  # groove formats: close any note held this many bars (then rests a bar); None/0: none
    recall: RecallConfig | None = None  # copy cache mixed into the model's distribution (None: off)
    end_bias: float = 0.0  # added to the End token's logit (after recall, before temperature)
    end_ramp: float = 0.0  # added to it too, per bar line the piece holds so far (prompt included)
    token_bias: tuple[tuple[str, float], ...] = ()  # (token-name prefix, bias): added to those tokens' logits
    nucleus_exempt: tuple[str, ...] = ()  # token-name prefixes the nucleus never cuts (their whole tail kept)
    bias_before_recall: bool = False  # token_bias shifts the model's logits before recall's copies are mixed in
    opening_boost: float = 0.0  # token_bias times 1 + this at the first bar line, fading to 1 at opening_bars
    opening_bars: int = 16  # bar lines so far (prompt included) at which the opening boost has faded out

    def __post_init__(self) -> None:
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0.0 < self.temperature < math.inf:
            raise ValueError(f"temperature must be finite and > 0, got {self.temperature}")
        if self.nucleus not in NUCLEUS_SCOPES:
            raise ValueError(f"nucleus must be one of {NUCLEUS_SCOPES}, got {self.nucleus!r}")
        if self.hold_bars is not None and self.hold_bars < 0:
            raise ValueError(f"hold_bars must be >= 0 (0: no limit), got {self.hold_bars}")
        if not math.isfinite(self.end_bias) or not math.isfinite(self.end_ramp):
            raise ValueError(f"end_bias and end_ramp must be finite, got {self.end_bias}, {self.end_ramp}")
        self.token_bias = tuple((str(prefix), float(bias)) for prefix, bias in self.token_bias)
        if not all(prefix and math.isfinite(bias) for prefix, bias in self.token_bias):
            raise ValueError(f"token_bias needs (token-name prefix, finite bias) pairs, got {self.token_bias}")
        self.nucleus_exempt = tuple(str(prefix) for prefix in self.nucleus_exempt)
        if not all(self.nucleus_exempt):
            raise ValueError(f"nucleus_exempt needs non-empty token-name prefixes, got {self.nucleus_exempt}")
        if not (math.isfinite(self.opening_boost) and self.opening_boost >= -1 and self.opening_bars >= 1):
            raise ValueError(f"opening_boost must be finite and >= -1 and opening_bars >= 1, got "
                             f"{self.opening_boost}, {self.opening_bars}")
        if self.hold_bars and not self.constrained:
            raise ValueError("a hold limit needs grammar-constrained sampling (constrained=True)")

    @classmethod
    def from_defaults(cls, defaults: GenerateConfig, top_p: float | None = None, temperature: float | None = None,
                      nucleus: str | None = None, constrained: bool = True,
                      hold_bars: int | None = None, recall: bool | None = None) -> SamplingConfig:
        """A checkpoint's sampling defaults (its `generate` config section) with explicit values winning;
        the hold limit (`hold_bars`, else the defaults'; 0: none) applies to constrained sampling only;
        recall (None: on when the checkpoint has fitted weights) needs them; the end bias and ramp are the
        defaults'."""
        constrained = defaults.constrained and constrained
        hold = defaults.hold_bars if hold_bars is None else hold_bars
        weights = defaults.recall_weights
        if recall and weights is None:
            raise ValueError("this model has no recall weights (generate.recall_weights): fit them with "
                             "python -m bench.recall --checkpoint ... --write")
        use_recall = weights is not None if recall is None else recall
        return cls(top_p=defaults.top_p if top_p is None else top_p,
                   temperature=defaults.temperature if temperature is None else temperature,
                   nucleus=defaults.nucleus if nucleus is None else nucleus,
                   constrained=constrained, hold_bars=(hold or None) if constrained else None,
                   recall=(RecallConfig(weights, defaults.recall_orders, defaults.recall_min_lag)
                           if use_recall else None),
                   end_bias=defaults.end_bias, end_ramp=defaults.end_ramp, token_bias=tuple(defaults.token_bias),
                   nucleus_exempt=tuple(defaults.nucleus_exempt), bias_before_recall=defaults.bias_before_recall,
                   opening_boost=defaults.opening_boost, opening_bars=defaults.opening_bars)


@dataclass
class GenerationResult:
    tokens: list[int]  # prompt followed by the generated ids (EOS included when reached)
    prompt_len: int  # number of prompt ids at the start of `tokens`
    stopped_at_eos: bool  # whether decoding ended on EOS (else: budget or stop condition)
    seconds: float  # wall-clock time of the decoding loop
    noise_length: int  # number of positions the positional noise was drawn for

    @property
    def generated(self) -> list[int]:
        """The ids after the prompt."""
        return self.tokens[self.prompt_len:]


def sampling_probabilities(logits: torch.Tensor, top_p: float | torch.Tensor, temperature: float,
                           allowed: torch.Tensor | None = None, types: torch.Tensor | None = None
                           ) -> torch.Tensor:
    """(B, V) logits -> (B, V) probabilities after masking, temperature and the nucleus cut.

    top_p: the nucleus mass, or (V,) one per token (`nucleus_top_p`: a token's own limit on the mass of
    the better tokens before it). types: None (one cut over the vocabulary) or (V,) long, each token's
    type index (one cut per type, each type keeping its probability; see `token_types`)."""
    logits = logits.double() / temperature  # (B, V)
    if allowed is not None:
        if not bool(allowed.any(dim=-1).all()):
            raise GrammarDeadEnd("the grammar allows no token here")
        logits = logits.masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(logits, dim=-1)  # (B, V)
    if types is None:
        probs = probs * nucleus_keep(probs, top_p, torch.zeros_like(probs, dtype=torch.long))
        return probs / probs.sum(dim=-1, keepdim=True)
    types = types.to(probs.device)
    one_hot = torch.nn.functional.one_hot(types).to(probs.dtype)  # (V, T)
    type_mass = (probs @ one_hot)[:, types]  # (B, V): probability of each token's type
    within = torch.where(type_mass > 0, probs / type_mass.clamp_min(1e-300), 0.0)  # (B, V)
    kept = within * nucleus_keep(within, top_p, types.expand_as(within))  # (B, V)
    kept_mass = (kept @ one_hot)[:, types]  # (B, V)
    return torch.where(kept_mass > 0, kept / kept_mass.clamp_min(1e-300), 0.0) * type_mass


def nucleus_keep(probs: torch.Tensor, top_p: float | torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """(B, V) bool: per row and group (groups: (B, V) long), the smallest set of most probable tokens
    whose probability (out of a group mass of 1) reaches top_p; the most probable one is always kept.
    With a (V,) top_p, each token is kept while the mass before it is under its own value."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)  # (B, V) each
    sorted_groups = groups.gather(-1, order)  # (B, V)
    per_group = torch.nn.functional.one_hot(sorted_groups).to(probs.dtype) * sorted_probs[..., None]  # (B, V, T)
    before = (per_group.cumsum(dim=1) - per_group).gather(-1, sorted_groups[..., None])[..., 0]  # (B, V)
    if isinstance(top_p, torch.Tensor):
        top_p = top_p.to(probs.device)[order]  # (B, V) each sorted token's own limit
    keep_sorted = before < top_p  # mass of strictly better tokens of the same group
    return torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)  # (B, V) in vocabulary order


def token_types(tokenizer: BaseTokenizer) -> torch.Tensor:
    """(V,) long: the index of each token's type, the first `_`-separated part of its name (`Bar`,
    `Beat`, `Chord`, `Note` for REMI's Note_Pitch / Note_Velocity / Note_Duration, which its grammar
    never allows at the same point; `NoteOn`, `TimeShift` for groove; a special token is its own)."""
    names = [tokenizer.vocab.token(i).split("_")[0] for i in range(tokenizer.vocab_size)]
    index = {name: i for i, name in enumerate(dict.fromkeys(names))}
    return torch.tensor([index[name] for name in names], dtype=torch.long)


def sample_next(logits: torch.Tensor, top_p: float | torch.Tensor = 0.9, temperature: float = 1.2,
                allowed: torch.Tensor | None = None, generator: torch.Generator | None = None,
                types: torch.Tensor | None = None) -> torch.Tensor:
    """Draw one id per row of (B, V) logits (allowed: (B, V) bool mask or None; types: see
    `sampling_probabilities`) -> (B,) long."""
    probs = sampling_probabilities(logits, top_p, temperature, allowed, types)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]  # (B,)


def check_length(model: MusicPerformer, total: int) -> None:
    """ValueError when the model cannot encode positions 0 .. total-1 (e.g. learned APE table size)."""
    limit = model.max_positions
    if limit is not None and total > limit:
        raise ValueError(f"this model (pe={model.cfg.pe}) knows {limit} positions; prompt + new "
                         f"tokens = {total} do not fit (use fewer tokens or a shorter prompt)")


class Decoder:
    """Resumable, batched recurrent decoding: `num_samples` continuations of one prompt.

    The prompt is fed once (batch 1, in chunks of PROMPT_CHUNK tokens: any length at the memory of
    one chunk) and its recurrent state copied to every sample; then each call of
    `run` samples up to n tokens for every unfinished sample in one batched `model.step` per position.
    All samples share one positional noise (the model draws one realisation per batch) and differ by
    their draws. Each sample has its own grammar state and ends at EOS or when `stop` says so; `run` can
    be called again to continue (the noise is extended, the state kept), and `snapshot` / `restore`
    give an undo point. `results()` drops trailing tokens of an unfinished event (constrained only).
    """

    def __init__(self, model: MusicPerformer, tokenizer: BaseTokenizer, prompt: Sequence[int], num_samples: int = 1,
                 sampling: SamplingConfig | None = None, generator: torch.Generator | None = None,
                 capacity: int | None = None, steer: Steer | None = None, sections: Sections | None = None) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.steer = steer  # narrows each sample's allowed tokens further (e.g. generation.chords.ChordSteer)
        self.sampling = SamplingConfig() if sampling is None else sampling
        self.generator = generator
        prompt = [int(t) for t in prompt]
        if not prompt:
            raise ValueError("generation needs a non-empty prompt (at least a start token)")
        if num_samples < 1:
            raise ValueError(f"the number of samples must be >= 1, got {num_samples}")
        vocab_size = model.cfg.vocab_size
        if tokenizer.vocab_size != vocab_size:
            raise ValueError(f"tokenizer has {tokenizer.vocab_size} tokens but the model {vocab_size}")
        if min(prompt) < 0 or max(prompt) >= vocab_size:
            raise ValueError(f"prompt ids must be in 0 .. {vocab_size - 1}")
        capacity = len(prompt) + 1 if capacity is None else max(capacity, len(prompt) + 1)
        check_length(model, capacity)
        # the sampling policy's grammar (a ValueError for a hold limit the format cannot apply)
        grammar = tokenizer.constraint_state(self.sampling.hold_bars) if self.sampling.constrained else None
        model.eval()
        self.device = model.head.weight.device
        self.prompt_len = len(prompt)
        self._reserved = capacity  # positions reserved so far (the noise's length when there is one)
        self.noise = model.draw_positional_noise(capacity, generator=generator)  # one realisation for all
        if steer is not None and grammar is None:
            raise ValueError("steering the tokens (e.g. following chords) needs grammar-constrained sampling")
        self.types = token_types(tokenizer) if self.sampling.nucleus == "type" else None  # (V,) or None
        if grammar is not None:
            for position, token in enumerate(prompt):
                _check_allowed(grammar, token, tokenizer, position)
                grammar.advance(token)
        with torch.no_grad():
            state = model.init_state(1, positional_noise=self.noise)
            ids = torch.tensor([prompt], device=self.device)  # (1, P)
            for start in range(0, len(prompt), PROMPT_CHUNK):  # the state after every chunk, as steps give
                logits, state = model.feed(ids[:, start:start + PROMPT_CHUNK], state)  # (1, V)
        self.state = repeat_state(state, num_samples)
        self.logits = logits.expand(num_samples, -1)  # (B, V): next-token logits of every sample
        self.grammars = None if grammar is None else [copy.deepcopy(grammar) for _ in range(num_samples)]
        self.tokens = [list(prompt) for _ in range(num_samples)]
        self.recalls: list[Recall] | None = None  # each sample's copy cache, the prompt read
        if self.sampling.recall is not None:
            recall = Recall(self.sampling.recall.orders, KeyTokens.of(tokenizer), self.sampling.recall.min_lag,
                            sections=sections)  # with a form, a bar copies from bars of its label only
            recall.extend(prompt)
            self.recalls = [copy.deepcopy(recall) for _ in range(num_samples)]
        self.token_bias = token_bias_vector(tokenizer, self.sampling.token_bias)  # (V,) or None
        self.opening = self.token_bias is not None and self.sampling.opening_boost != 0
        self.bars: list[int] | None = None  # bar lines of each sample so far, for the end ramp and the opening
        if self.sampling.end_ramp or self.opening:
            if tokenizer.bar_id is None:
                raise ValueError(f"an end ramp or an opening boost counts bar lines, which the "
                                 f"{type(tokenizer).__name__} format has none of (set generate.end_ramp and "
                                 f"generate.opening_boost to 0)")
            self.bars = [prompt.count(tokenizer.bar_id)] * num_samples
        self.top_p = nucleus_top_p(tokenizer, self.sampling)  # float, or (V,) with exempt tokens
        self.finished = [False] * num_samples  # ended at EOS or by a stop condition
        self.at_eos = [False] * num_samples
        self.complete: list[int | None] = [None] * num_samples  # longest EOS-allowed length (constrained)
        self.seconds = 0.0  # time spent in `run` so far

    @property
    def num_samples(self) -> int:
        return len(self.tokens)

    def reserve(self, length: int) -> None:
        """Make the positional noise (and the state) cover positions 0 .. length - 1."""
        check_length(self.model, length)
        self._reserved = max(self._reserved, length)
        self.noise = self.model.extend_positional_noise(self.noise, length, self.generator)
        self.state = replace(self.state, positional_noise=self.noise)

    @torch.no_grad()
    def run(self, max_new_tokens: int, stop: StopCondition | Sequence[StopCondition] | None = None,
            progress: bool = False, callback: Callable[[int, int], None] | None = None) -> None:
        """Sample up to max_new_tokens more tokens for every sample that has not reached EOS.

        `stop(tokens)` (one for all samples, or a list with one per sample) is asked after every new
        token of a sample and ends that sample for this run when True; `callback(done, total)` is
        called after every batched step (e.g. a progress display).
        """
        stops = list(stop) if isinstance(stop, Sequence) else [stop] * self.num_samples
        if len(stops) != self.num_samples:
            raise ValueError(f"{len(stops)} stop conditions for {self.num_samples} samples")
        if max_new_tokens < 1:
            raise ValueError(f"the number of new tokens must be >= 1, got {max_new_tokens}")
        self.finished = list(self.at_eos)  # a stop condition ends a sample for one run only
        if all(self.finished):
            return
        self.reserve(self.state.position + max_new_tokens)
        start = time.perf_counter()
        eos = self.tokenizer.eos_id
        bar = tqdm(total=max_new_tokens, desc="generating", unit="tok", disable=not progress)
        for step in range(max_new_tokens):
            allowed = None
            if self.grammars is not None:
                allowed = torch.from_numpy(self._masks(eos)).to(self.device)  # (B, V)
            end_bias = self.end_logit_bias() if self.sampling.end_bias or self.sampling.end_ramp else None
            token_bias = self.opening_token_bias() if self.opening else self.token_bias  # (B, V), (V,) or None
            logits = shaped_logits(self.logits, self.sampling, eos, self.recalls, end_bias, token_bias)
            drawn = sample_next(logits, self.top_p, self.sampling.temperature, allowed,
                                self.generator, self.types).tolist()  # (B,)
            for i, token in enumerate(drawn):
                if self.finished[i]:
                    continue
                self.tokens[i].append(token)
                if self.recalls is not None:
                    self.recalls[i].append(token)
                if self.bars is not None and token == self.tokenizer.bar_id:
                    self.bars[i] += 1
                if token == eos:
                    self.finished[i] = self.at_eos[i] = True
                    continue
                if self.grammars is not None:
                    self.grammars[i].advance(token)
                if stops[i] is not None and stops[i](self.tokens[i]):
                    self.finished[i] = True
            bar.update(1)
            if callback is not None:
                callback(step + 1, max_new_tokens)
            if all(self.finished):
                break
            feed = torch.tensor([t[-1] for t in self.tokens], device=self.device)  # (B,)
            self.logits, self.state = self.model.step(feed, self.state)  # (B, V)
        bar.close()
        self.seconds += time.perf_counter() - start

    def end_logit_bias(self) -> torch.Tensor:
        """(B,) what the End token's logit gets per sample: the end bias, plus the ramp per bar line."""
        bars = torch.tensor(self.bars if self.bars is not None else [0] * self.num_samples, dtype=torch.float64)
        return self.sampling.end_bias + self.sampling.end_ramp * bars  # (B,)

    def opening_token_bias(self) -> torch.Tensor:
        """(B, V) the token bias per sample: (1 + opening_boost) times it at bar line 0, fading linearly to
        once it at bar line `opening_bars` and after."""
        bars = torch.tensor(self.bars, dtype=torch.float64)  # (B,)
        fade = (1 - bars / self.sampling.opening_bars).clamp(min=0)  # (B,) 1 at the first bar line, then 0
        return self.token_bias[None, :] * (1 + self.sampling.opening_boost * fade)[:, None]  # (B, V)

    def _masks(self, eos: int) -> np.ndarray:
        """(B, V) allowed tokens; finished samples allow everything (their draw is ignored)."""
        masks = np.ones((self.num_samples, self.model.cfg.vocab_size), dtype=bool)
        for i, grammar in enumerate(self.grammars):
            if not self.finished[i]:
                masks[i] = np.asarray(grammar.allowed(), dtype=bool)
                if masks[i, eos]:
                    self.complete[i] = len(self.tokens[i])
                if self.steer is not None:
                    masks[i] = self.steer(self.tokens[i], masks[i])
        return masks

    def results(self) -> list[GenerationResult]:
        """One result per sample, without the tokens of an event left unfinished (constrained)."""
        eos = self.tokenizer.eos_id
        out = []
        for i, tokens in enumerate(self.tokens):
            if self.grammars is not None and not self.at_eos[i]:
                complete = len(tokens) if self.grammars[i].allowed()[eos] else self.complete[i]
                if complete is not None and self.prompt_len <= complete < len(tokens):
                    logger.info("dropped %d trailing tokens of an unfinished event", len(tokens) - complete)
                    tokens = tokens[:complete]
            out.append(GenerationResult(tokens=list(tokens), prompt_len=self.prompt_len,
                                        stopped_at_eos=self.at_eos[i], seconds=self.seconds,
                                        noise_length=self.noise_length))
        return out

    @property
    def noise_length(self) -> int:
        """Positions the positional noise covers (deterministic encodings: those reserved so far)."""
        return self.noise.length if self.noise is not None else self._reserved

    def snapshot(self) -> dict[str, Any]:
        """Everything `run` changes (tensors are never modified in place, so they are shared)."""
        return {"state": self.state, "noise": self.noise, "logits": self.logits,
                "grammars": copy.deepcopy(self.grammars), "recalls": copy.deepcopy(self.recalls),
                "tokens": [list(t) for t in self.tokens], "bars": None if self.bars is None else list(self.bars),
                "finished": list(self.finished), "at_eos": list(self.at_eos),
                "complete": list(self.complete), "seconds": self.seconds, "_reserved": self._reserved}

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Go back to a `snapshot` of this decoder."""
        snapshot = dict(snapshot, grammars=copy.deepcopy(snapshot["grammars"]),
                        recalls=copy.deepcopy(snapshot["recalls"]),
                        tokens=[list(t) for t in snapshot["tokens"]],
                        bars=None if snapshot["bars"] is None else list(snapshot["bars"]))
        for name, value in snapshot.items():
            setattr(self, name, value)


def repeat_state(state: GenerationState, batch: int) -> GenerationState:
    """A batch-1 recurrent state copied to `batch` rows."""
    layers = [LayerState(kv=layer.kv.repeat(batch, 1, 1, 1),  # (B, H, M, D + 1)
                         offset=layer.offset.repeat(batch, 1, 1, 1))  # (B, H, 1, 1)
              for layer in state.layers]
    return GenerationState(position=state.position, positional_noise=state.positional_noise, layers=layers)


def generate_batch(model: MusicPerformer, tokenizer: BaseTokenizer, prompt: Sequence[int], max_new_tokens: int,
                   num_samples: int = 1, sampling: SamplingConfig | None = None,
                   generator: torch.Generator | None = None, progress: bool = False,
                   stop: Callable[[list[int]], bool] | None = None, steer: Steer | None = None,
                   sections: Sections | None = None) -> list[GenerationResult]:
    """`num_samples` continuations of `prompt` by up to max_new_tokens ids each, decoded as one batch;
    `steer` narrows the allowed tokens, `sections` keeps recall within a form's labels (see Decoder)."""
    if max_new_tokens < 1:
        raise ValueError(f"the number of new tokens must be >= 1, got {max_new_tokens}")
    decoder = Decoder(model, tokenizer, prompt, num_samples, sampling, generator,
                      capacity=len(prompt) + max_new_tokens, steer=steer, sections=sections)
    decoder.run(max_new_tokens, stop=stop, progress=progress)
    results = decoder.results()
    for result in results:
        new = len(result.generated)
        logger.info("generated %d tokens in %.1f s (%.1f tokens/s per sample)%s", new, result.seconds,
                    new / max(result.seconds, 1e-9), ", stopped at EOS" if result.stopped_at_eos else "")
    return results


def generate(model: MusicPerformer, tokenizer: BaseTokenizer, prompt: Sequence[int], max_new_tokens: int,
             sampling: SamplingConfig | None = None,
             generator: torch.Generator | None = None, progress: bool = False,
             stop: Callable[[list[int]], bool] | None = None, steer: Steer | None = None) -> GenerationResult:
    """Continue `prompt` (a non-empty list of ids) by up to max_new_tokens ids, stopping at EOS.

    `stop(tokens)` is asked after every new token and ends decoding when it returns True.
    With constraints, tokens of an event left unfinished when decoding ends (e.g. a note's pitch
    without its velocity and duration) are dropped. The model is put in eval mode; `generator`
    drives both the positional noise and the draws.
    """
    return generate_batch(model, tokenizer, prompt, max_new_tokens, 1, sampling, generator, progress,
                          stop, steer)[0]


def _check_allowed(grammar: ConstraintState, token: int, tokenizer: BaseTokenizer, position: int) -> None:
    """ValueError when a prompt token breaks the grammar (the prompt is not a valid sequence)."""
    if not grammar.accepts(int(token)):
        raise ValueError(f"the prompt breaks the tokenizer's grammar at position {position}: token "
                         f"{tokenizer.vocab.token(token)!r} is not allowed there")


def check_seed(seed: Any, name: str = "seed") -> int:
    """`seed` when it is an integer torch.Generator accepts, else a ValueError naming `name`."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
        raise ValueError(f"{name} must be an integer in 0 .. 2**64 - 1, got {seed}")
    return seed


def seeded_generator(seed: int, device: torch.device) -> torch.Generator:
    """A torch.Generator on `device` seeded with `seed` (positional noise and sampling)."""
    check_seed(seed)
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator
