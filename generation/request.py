"""One generation request for every front door: what to write, checked once, planned for a model.

The command line (`spe-generate`), the studio and the evaluations build a `GenerationRequest` and run
it through the same two steps, so they accept the same inputs and refuse bad ones with the same
message (a ValueError, one line):

    request = GenerationRequest(prompt=Path("song.mid"), prompt_bars=4, bars=8, chords="C Am | F G")
    parsed = request.check(limits)           # every check that needs no model, before anything loads
    ckpt = load_model(request.checkpoint(given), device)   # an infill picks a fill-in-the-middle model
    plan = request.plan(ckpt, parsed, limits)  # prompt ids, steer, stop rule, budget, finishing step
    results = plan.run(ckpt.model, device)     # or plan.decoder(...) to continue step by step
    write_piece(plan.tokenizer, results[0], out, own=plan.own, tail=plan.tail, sections=plan.sections)

`Limits` holds a front door's own bounds (the studio's, which serves any local client); the command
line has none.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from generation.chords import ChordSteer, is_annotation, parse_annotation, parse_progression, place_annotation
from generation.form import RESTATE, form_and_chords, form_budget, form_steer
from generation.infill import (INFILL_MODEL, InfillJob, has_infill, infill_checkpoint, infill_sampling,
                               parse_bar_range)
from generation.own_file import RENDERS, OwnFile, own_file
from generation.pieces import (bar_stop, bars_budget, keep_bars, opening_bars, piece_ids, song_opening, start_ids,
                               track_report)
from generation.recall import Sections
from generation.sampling import (Decoder, GenerationResult, SamplingConfig, StopCondition, Steer, check_seed,
                                 generate_batch, seeded_generator, without_end)
from tokenization import BaseTokenizer
from tokenization.form import form_bars, form_text

logger = logging.getLogger(__name__)

ALL = "all"  # prompt_bars: the whole prompt song, continued after its end
PROMPT_BARS = 4  # bars of a prompt kept when the request does not say
MIDI_HEADER = b"MThd"  # the first bytes of every standard MIDI file


@dataclass
class Limits:
    """A front door's bounds on one request (None: no bound)."""

    tokens: int | None = None  # new tokens per sample
    bars: int | None = None  # new bars per sample
    samples: int | None = None  # samples drawn at once
    prompt_tokens: int | None = None  # tokens of the prompt read (a long one holds the worker for minutes)
    prompt_bytes: int | None = None  # size of the prompt file


@dataclass
class GenerationRequest:
    """What a user asks for. Every field is optional: None takes the model's default."""

    prompt: Path | None = None  # MIDI file whose bars prompt the model (None: start from nothing)
    prompt_bars: int | str | None = None  # bars of the prompt kept, ALL to continue after its end (None: PROMPT_BARS)
    infill: str | None = None  # bars of the prompt to rewrite, 1-based ("9-12"); every other bar is kept
    chords: str | None = None  # one chord per bar to follow ("C Am | F G7"), or per form label ("A: C G; B: F")
    chords_file: Path | None = None  # the chords read from a file: symbols, or POP909's annotation in seconds
    chords_midi: Path | None = None  # the song whose tempo map places an annotation in bars (None: the prompt)
    form: str | None = None  # a song form ("i4 A8 B8 A8 o4", or "auto"); then the bars are the form's
    restate: float | None = None  # with a form: probability that a returning phrase's bar restates its first
    tokens: int | None = None  # new tokens (with bars: the budget); None: the model's generate.tokens
    bars: int | None = None  # new bars to write (stop after them)
    top_p: float | None = None  # nucleus mass
    temperature: float | None = None  # softmax temperature
    nucleus: str | None = None  # top-p cut over the whole vocabulary ("token") or within each type ("type")
    seed: int | None = None  # drives the positional noise and the draws
    constrained: bool = True  # mask ungrammatical tokens
    end: bool | None = None  # may the model end the piece early (False: write all that is asked)
    hold_bars: int | None = None  # groove: close any note held this many bars (0: no limit)
    recall: bool | None = None  # mix the copy cache into sampling (generation.recall); None: the model's
    num_samples: int = 1  # samples decoded as one batch
    render: str = "file"  # with a prompt: "file" (the prompt's own file, new bars changed) or "tokens"
    prompt_ids: list[int] | None = None  # a prompt already in the model's tokens (an evaluation's real piece)

    def __post_init__(self) -> None:
        for name in ("prompt", "chords_file", "chords_midi"):
            if getattr(self, name) is not None:
                setattr(self, name, Path(getattr(self, name)))

    def check(self, limits: Limits | None = None) -> Parsed:
        """Every check that needs no model, each bad input refused with one line; the parsed parts."""
        limits = limits or Limits()
        if self.prompt is not None and self.prompt_ids is not None:
            raise ValueError("give a prompt file or prompt ids, not both")
        self._check_numbers(limits)
        self._check_prompt(limits)
        if self.render not in RENDERS:
            raise ValueError(f"render must be one of {', '.join(RENDERS)}, got {self.render!r}")
        phrases, form_chords = self._form()
        chords, spans = self._chords()
        return Parsed(span=self._infill_span(), phrases=phrases, form_chords=form_chords, chords=chords,
                      annotation=spans)

    def checkpoint(self, given: str | Path | None) -> str | Path | None:
        """The model to load: `given` (None: the default one), or for an infill without a model named,
        the shipped fill-in-the-middle model."""
        return infill_checkpoint(given) if self.infill is not None else given

    def plan(self, ckpt: Any, parsed: Parsed, limits: Limits | None = None) -> Plan:
        """The decoding of this request with a loaded checkpoint (`ckpt.model`, `.tokenizer`, `.config`)."""
        limits = limits or Limits()
        defaults, tokenizer = ckpt.config.generate, ckpt.tokenizer
        if parsed.span is not None and not has_infill(tokenizer):
            raise ValueError(f"rewriting bars needs a fill-in-the-middle model; this one has none (choose "
                             f"{INFILL_MODEL}, or fine-tune one with data.fim_rate)")
        chords = parsed.chords
        if parsed.annotation is not None:
            chords = place_annotation(parsed.annotation, self.chords_midi or self.prompt, tokenizer)
        sampling = self.sampling(defaults)
        budget = capped(defaults.tokens if self.tokens is None else self.tokens, limits)
        seed = check_seed(defaults.seed if self.seed is None else self.seed)
        bars, job, song, tracks = self.bars, None, None, []
        if self.prompt is not None:
            song = piece_ids(tokenizer, self.prompt)
        if parsed.span is not None:
            job = InfillJob.of(tokenizer, song, parsed.span)
            prompt, bars = job.prompt, job.bars
            sampling = infill_sampling(sampling)
            check_bars(bars, limits, f"infill bars {self.infill}")
            budget = capped(bars_budget(bars, self.tokens, defaults.tokens, f"infill bars {self.infill}"), limits)
        elif self.prompt is not None:
            tracks = track_report(tokenizer, self.prompt)  # which track plays which part (a band's roles)
            kept = PROMPT_BARS if self.prompt_bars is None else self.prompt_bars
            prompt = opening_bars(tokenizer, song, None if kept == ALL else kept, self.prompt.name)
            self._check_prompt_ids(prompt, limits)
        elif self.prompt_ids is not None:
            prompt = [int(i) for i in self.prompt_ids]
        else:
            prompt = start_ids(tokenizer)
        prompted = self.prompt is not None or self.prompt_ids is not None
        bars_from = len(prompt) if prompted else 0
        prompt_bars = len(tokenizer.bar_starts(prompt)) if prompted else 0  # bars the piece starts with
        if parsed.annotation is not None and self.chords_midi is None:  # the prompt's song: follow it after the prompt
            if len(chords) <= prompt_bars:
                raise ValueError(f"the chord annotation has {len(chords)} bars, all within the prompt's "
                                 f"{prompt_bars}: nothing is left to follow")
            chords = chords[prompt_bars:]
        steer: Steer | None = None if chords is None else ChordSteer(tokenizer, chords, bars_from)
        if parsed.phrases is not None:  # bars count from the piece's first: the prompt's bars are the form's first
            steer = form_steer(tokenizer, parsed.phrases, parsed.form_chords,
                               RESTATE if self.restate is None else self.restate, seed, steer)
            budget = capped(form_budget(parsed.phrases, prompt_bars, self.tokens, defaults.tokens), limits)
            check_bars(form_bars(parsed.phrases) - prompt_bars, limits, "the form")
            bars_from, bars = 0, form_bars(parsed.phrases)
            logger.info("form %s: %d bars", form_text(parsed.phrases), bars)
        if job is not None:
            steer = job.steer()
        if not (defaults.end if self.end is None else self.end) and self.constrained:
            steer = without_end(tokenizer.eos_id, steer)
        if not prompted and job is None:
            steer = song_opening(tokenizer, steer)
        if chords is not None and bars is None:
            bars = len(chords)
        sections = [(p.first, p.label) for p in parsed.phrases] if parsed.phrases is not None else []
        tail = 0 if job is None else job.tail  # an infill's bars after the range are the user's
        return Plan(tokenizer=tokenizer, prompt=prompt, budget=budget, steer=steer, sampling=sampling, seed=seed,
                    num_samples=self.num_samples, bars_from=bars_from, bars=bars, job=job, sections=sections,
                    own=own_file(tokenizer, self.prompt, self.render, tail), tail=tail, tracks=tracks, song=song)

    def run(self, ckpt: Any, generator: torch.Generator | None = None, progress: bool = False
            ) -> list[GenerationResult]:
        """Check, plan and decode in one go, on the device of the checkpoint's weights (an evaluation's
        pieces, drawn in turn with its shared `generator`)."""
        return self.plan(ckpt, self.check()).run(ckpt.model, ckpt.model.head.weight.device, progress, generator)

    @property
    def per_label(self) -> bool:
        """Whether the chords are given per label of a form ("A: C G; B: F")."""
        return self.chords is not None and ":" in self.chords

    def sampling(self, defaults: Any) -> SamplingConfig:
        """The sampling of this request with a model's `generate` defaults (its config section)."""
        return SamplingConfig.from_defaults(defaults, self.top_p, self.temperature, self.nucleus,
                                            constrained=self.constrained, hold_bars=self.hold_bars,
                                            recall=self.recall)

    # ------------------------------------------------------------------------------ checks
    def _check_numbers(self, limits: Limits) -> None:
        for name, value, least, most in (("tokens", self.tokens, 1, limits.tokens),
                                         ("bars", self.bars, 1, limits.bars),
                                         ("samples", self.num_samples, 1, limits.samples),
                                         ("hold bars", self.hold_bars, 0, None)):
            if value is None:
                continue
            if value < least:
                raise ValueError(f"{name} must be >= {least}, got {value}")
            if most is not None and value > most:  # a front door's own bound
                raise ValueError(f"{name} must be <= {most} here, got {value}")
        if self.seed is not None:
            check_seed(self.seed)
        if self.prompt_bars is not None and self.prompt_bars != ALL and (
                isinstance(self.prompt_bars, str) or self.prompt_bars < 1):
            raise ValueError(f"prompt bars must be a number >= 1 or '{ALL}', got {self.prompt_bars!r}")
        if self.restate is not None and not 0.0 <= self.restate <= 1.0:
            raise ValueError(f"restate must be in [0, 1], got {self.restate}")
        if not self.constrained:
            for name, given in (("chords", self.chords or self.chords_file), ("a form", self.form),
                                ("rewriting bars", self.infill), ("a hold limit", self.hold_bars),
                                ("writing to the end (no end)", self.end is False)):
                if given:
                    raise ValueError(f"{name} needs the grammar-constrained sampler: drop --no-constraints")
        # a bad value is refused here, before anything loads
        SamplingConfig(top_p=0.9 if self.top_p is None else self.top_p,
                       temperature=1.0 if self.temperature is None else self.temperature,
                       nucleus="token" if self.nucleus is None else self.nucleus)

    def _check_prompt(self, limits: Limits) -> None:
        """The prompt file: present, not empty, within the size limit, a MIDI file."""
        if self.prompt is None:
            return
        path = self.prompt
        if not path.is_file():
            raise ValueError(f"prompt file not found: {path}")
        size = path.stat().st_size
        if size == 0:
            raise ValueError(f"{path.name} is empty: give a MIDI file (.mid)")
        if limits.prompt_bytes is not None and size > limits.prompt_bytes:
            raise ValueError(f"{path.name} is {size / 2**20:.1f} MiB: prompts up to "
                             f"{limits.prompt_bytes / 2**20:g} MiB are accepted")
        with path.open("rb") as handle:
            if handle.read(len(MIDI_HEADER)) != MIDI_HEADER:
                raise ValueError(f"{path.name} is not a MIDI file (it does not start with 'MThd')")

    def _check_prompt_ids(self, prompt: list[int], limits: Limits) -> None:
        if len(prompt) < 2:
            raise ValueError(f"{self.prompt.name} has no notes to start from")
        if limits.prompt_tokens is not None and len(prompt) > limits.prompt_tokens:
            raise ValueError(f"{self.prompt.name} makes a prompt of {len(prompt):,} tokens; at most "
                             f"{limits.prompt_tokens:,} are read here (keep fewer bars, or use spe-generate "
                             "for long songs)")

    def _infill_span(self) -> tuple[int, int] | None:
        """The bar range to rewrite (None without one); its conflicts are checked here."""
        if self.infill is None:
            return None
        span = parse_bar_range(self.infill)
        if self.prompt is None:
            raise ValueError("rewriting bars needs the song: give it as the prompt")
        for name, given in (("prompt bars", self.prompt_bars), ("chords", self.chords or self.chords_file),
                            ("bars", self.bars), ("a form", self.form)):
            if given is not None:
                raise ValueError(f"rewriting bars {self.infill} keeps the rest of the song: drop {name}")
        if self.end is False:
            raise ValueError("rewriting bars ends where the range does: drop the no-end setting")
        return span

    def _form(self) -> tuple[list | None, list | None]:
        """The phrases of the form (None without one) and, when the chords are given per label, the
        chord of every bar of the form (None otherwise)."""
        if self.form is None:
            if self.restate is not None:
                raise ValueError("restate applies to a form: give a form")
            if self.per_label:
                raise ValueError("chords per label (A: ...) need a form")
            return None, None
        for name, given in (("bars", self.bars), ("a chords file", self.chords_file)):
            if given is not None:
                raise ValueError(f"a form sets the song's bars: drop {name}")
        if self.prompt_bars == ALL:
            raise ValueError("a form starts with the prompt's first bars: give how many of them, not all")
        return form_and_chords(self.form, self.chords, 0 if self.seed is None else self.seed)

    def _chords(self) -> tuple[list | None, list | None]:
        """The chords given as symbols or a symbol file, or the spans of an annotation file (placed in
        bars once the tokenizer is loaded); (None, None) without chords or with chords per label."""
        if self.chords is not None and self.chords_file is not None:
            raise ValueError("give chords or a chords file, not both")
        if self.chords_midi is not None and self.chords_file is None:
            raise ValueError("a chords MIDI places the chords of a chords file: give that file too")
        if self.chords is None and self.chords_file is None:
            return None, None
        if self.form is not None and self.per_label:
            return None, None  # chords per label: see _form
        if self.chords is not None:
            return parse_progression(self.chords), None
        path = Path(self.chords_file)
        if not path.is_file():
            raise ValueError(f"chords file not found: {path}")
        text = path.read_text(errors="replace")
        if not is_annotation(text):
            return parse_progression(text), None
        if self.chords_midi is None and self.prompt is None:
            raise ValueError(f"{path.name} is a chord annotation in seconds (start end root:quality): its bars "
                             "need the song's MIDI tempo map; give a prompt or a chords MIDI")
        return None, parse_annotation(text)


@dataclass
class Parsed:
    """A request's parts read from its text, before a model is loaded."""

    span: tuple[int, int] | None  # bars to rewrite (1-based, inclusive)
    phrases: list | None  # the form's phrases
    form_chords: list | None  # the chord of every bar of the form (chords per label)
    chords: list | None  # the chords to follow, one per bar
    annotation: list | None  # an annotation's (start, end, chord) spans, in seconds


@dataclass
class Plan:
    """How a request is decoded: what the model reads, what narrows its draws, when it stops, and how
    a result becomes the piece that is written."""

    tokenizer: BaseTokenizer
    prompt: list[int]  # ids the model reads first
    budget: int  # new tokens per sample at most
    steer: Steer | None  # narrows each sample's allowed tokens (chords, a form, an infill's bars)
    sampling: SamplingConfig  # nucleus, temperature, constraints, hold limit
    seed: int  # positional noise and draws
    num_samples: int  # samples decoded as one batch
    bars_from: int  # bars are counted from this index of the tokens
    bars: int | None  # bars to write (None: until EOS or the budget)
    job: InfillJob | None  # an infill: its result is put back in time order
    sections: list[tuple[int, str]] = field(default_factory=list)  # a form's (first bar, label), for the piano roll
    own: OwnFile | None = None  # the user's file the piece is written into (None: the decoded tokens)
    tail: int = 0  # tokens at the end of a finished result that are the user's own (an infill's suffix)
    tracks: list[tuple[str, bool]] = field(default_factory=list)  # how the prompt's tracks were read
    song: list[int] | None = None  # the whole prompt song's ids

    def stop(self, every: int | None = None) -> StopCondition | None:
        """Stop after `bars` new bars (checked every `every` tokens; None: pieces' default)."""
        if self.bars is None:
            return None
        return bar_stop(self.tokenizer, self.bars_from, self.bars, **({} if every is None else {"every": every}))

    def generator(self, device: torch.device) -> torch.Generator:
        return seeded_generator(self.seed, device)

    def recall_sections(self) -> Sections | None:
        """A form's labels for recall (forms are REMI's, whose start token is the bar line)."""
        if not self.sections:
            return None
        return Sections(self.tokenizer.start_id, tuple(self.sections))

    def decoder(self, model: Any, device: torch.device) -> Decoder:
        """A resumable decoder of this plan, its noise drawn for the prompt and the budget."""
        return Decoder(model, self.tokenizer, self.prompt, self.num_samples, self.sampling, self.generator(device),
                       capacity=len(self.prompt) + self.budget, steer=self.steer, sections=self.recall_sections())

    def describe(self) -> str:
        """One line on what is decoded and how."""
        sampling = self.sampling
        opening = (f" (x{1 + sampling.opening_boost:g} at bar 1, fading over {sampling.opening_bars} bars)"
                   if sampling.token_bias and sampling.opening_boost else "")
        return (f"generating {self.num_samples} sample(s) of up to {self.budget} tokens after a "
                f"{len(self.prompt)}-token prompt (top_p={sampling.top_p:g}, nucleus over each {sampling.nucleus}, "
                f"temperature={sampling.temperature:g}, {'constrained' if sampling.constrained else 'unconstrained'}"
                f"{f', end bias {sampling.end_bias:+g}' if sampling.end_bias else ''}"
                f"{f' {sampling.end_ramp:+g} per bar' if sampling.end_ramp else ''}"
                f"{''.join(f', {names} bias {bias:+g}' for names, bias in grouped_biases(sampling.token_bias))}"
                f"{' (before recall)' if sampling.token_bias and sampling.bias_before_recall else ''}"
                f"{opening}"
                f"{''.join(f', {prefix} never cut' for prefix in sampling.nucleus_exempt)}, seed {self.seed})")

    def run(self, model: Any, device: torch.device, progress: bool = False,
            generator: torch.Generator | None = None) -> list[GenerationResult]:
        """Decode every sample and finish it; `generator`: one shared by several plans (an evaluation's
        pieces drawn in turn), else one seeded with the plan's seed."""
        results = generate_batch(model, self.tokenizer, self.prompt, self.budget, self.num_samples, self.sampling,
                                 generator=generator or self.generator(device), progress=progress,
                                 stop=self.stop(), steer=self.steer, sections=self.recall_sections())
        return [self.finish(result) for result in results]

    def finish(self, result: GenerationResult) -> GenerationResult:
        """A decoded sample as the piece to write: an infill back in time order (InfillIncomplete when
        the budget ran out), a bar-counted piece cut after its last bar."""
        if self.job is not None:
            return self.job.restore(result)
        if self.bars is not None:
            return keep_bars(self.tokenizer, result, self.bars_from, self.bars)
        return result


def grouped_biases(pairs: tuple[tuple[str, float], ...]) -> list[tuple[str, float]]:
    """Token biases for one line: the prefixes that share a bias joined ("A, B bias +0.4"), in order."""
    groups: dict[float, list[str]] = {}
    for prefix, bias in pairs:
        groups.setdefault(bias, []).append(prefix)
    return [(", ".join(prefixes), bias) for bias, prefixes in groups.items()]


def check_bars(bars: int, limits: Limits, what: str) -> None:
    """A ValueError when `what` leaves more bars to write than the front door's limit."""
    if limits.bars is not None and bars > limits.bars:
        raise ValueError(f"{what} leaves {bars} bars to write: at most {limits.bars} are written at once here")


def capped(budget: int, limits: Limits) -> int:
    """A token budget within the front door's limit."""
    return budget if limits.tokens is None else min(budget, limits.tokens)

