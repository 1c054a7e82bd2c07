"""What the studio does, without any web page: load a model, generate, continue, undo, render files.

`apps.studio` wires these to gradio; tests call them directly. One `StudioSession` is one person's
work: the model in use, a resumable batched `Decoder` (continuing a piece only feeds the new tokens)
and an undo history of decoder snapshots with the files each step produced.

    session = StudioSession(workdir)
    view = session.generate(Request(model="pretrained", prompt=None, length=2, unit="bars"))
    view = session.continue_(length=2, unit="bars")      # extends every sample of the last result
    view = session.undo()                                 # back to the previous result
    view = session.infill(Request(model=..., prompt="song.mid"), "9-12")  # rewrite bars 9-12 of the song

User mistakes (a bad upload, an unknown model, impossible settings) raise `StudioError` with a
one-line message that the page shows; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import logging
import shutil
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from generation.audio import AudioConfig
from generation.infill import InfillIncomplete
from generation.pieces import bar_stop, keep_bars, write_piece
from generation.request import ALL, GenerationRequest, Limits, Plan
from generation.sampling import Decoder, GenerationResult
from tokenization import format_of
from training.checkpoint import PRETRAINED, list_checkpoints, load_model, read_meta, shipped_default, shipped_models
from training.config import GenerateConfig

logger = logging.getLogger(__name__)

SHIPPED = "pretrained (shipped)"  # the model choice naming the repository's default shipped model
SHIPPED_SUFFIX = " (shipped)"  # "NAME (shipped)": the shipped model pretrained/NAME
MAX_UPLOAD_BYTES = 2 * 1024 * 1024  # larger MIDI prompts are refused (a song is ~50 KB)
MAX_SAMPLES = 4  # samples drawn at once
MAX_TOKENS = 4096  # tokens one generate / continue may add per sample
MAX_BARS = 64  # bars one generate / continue may add
MAX_PROMPT_TOKENS = 16384  # a longer prompt (about 150 bars of piano) would hold the only worker for minutes
TOKENS_PER_BAR = 256  # token budget per bar of a continuation (a dense piano bar takes ~50-200 REMI tokens)
UNITS = ("bars", "tokens")
LIMITS = Limits(tokens=MAX_TOKENS, bars=MAX_BARS, samples=MAX_SAMPLES, prompt_tokens=MAX_PROMPT_TOKENS,
                prompt_bytes=MAX_UPLOAD_BYTES)  # what one request may ask of the studio
UNKNOWN_MODEL = "unknown model: choose one of the models in the list"

Progress = Callable[[float, str], None]  # (fraction done, description)


class StudioError(ValueError):
    """A user mistake, shown as a message in the page (`public_message`)."""


# an absolute path inside a message: "/" after the start, a space, a quote or a bracket, then parts
_ABSOLUTE_PATH = re.compile(r"""(?<![\w.:/])/(?:[^\s'"/()\[\]]+/)*([^\s'"/()\[\]]*)""")


def public_message(error: StudioError) -> str:
    """The error's message for a page that any client of the port may read: every absolute path
    replaced by its last part, so that no server path shows."""
    return _ABSOLUTE_PATH.sub(lambda match: match.group(1) or "/", str(error))


@dataclass
class Request:
    model: str = SHIPPED  # one of `model_choices`: SHIPPED, "NAME (shipped)" or a run directory
    prompt: str | None = None  # uploaded MIDI file, or None to start from nothing
    prompt_bars: int = 4  # bars of the prompt kept
    whole_prompt: bool = False  # keep the whole uploaded piece and continue after its end
    chords: str = ""  # one lead-sheet chord per bar to follow ("C Am | F G7"); then length = its bars
    form: str = ""  # a form ("i4 A8 B8 A8 B8 o4", or "auto"; generation.form); then length = its bars
    length: int = 4  # how much to generate, in `unit`
    unit: str = "bars"  # "bars" or "tokens"
    temperature: float | None = None  # softmax temperature (None: the model's own, as generate.py samples)
    top_p: float | None = None  # nucleus mass (None: the model's own)
    seed: int = 0  # drives the positional noise and the draws
    num_samples: int = 1  # samples decoded as one batch
    audio: bool = True  # render .wav / .ogg
    # with a prompt: "file" writes the uploaded file with only the new bars changed, "tokens" the decoded tokens
    render: str = "file"
    restate: float | None = None  # with a form: probability that a returning unit restates its first (None: default)
    # top-p cut over the vocabulary ("token") or within each type ("type"); None: the model's
    nucleus: str | None = None
    end: bool | None = None  # may the model end the piece early (None: the model's own policy)
    hold_bars: int | None = None  # groove models: close any note held this many bars, 0: no limit (None: the model's)
    recall: bool | None = None  # copy cache in sampling (generation.recall); None: the model's own

    def generation(self, infill: str | None = None) -> GenerationRequest:
        """The generation request of these settings (`infill`: the bars to rewrite, for Infill). With
        chords or a form the length is theirs, so the length box is not part of the request."""
        check_unit(self.unit)
        sized = not (self.chords.strip() or self.form.strip() or infill)
        return GenerationRequest(
            prompt=self.prompt, prompt_bars=None if infill else ALL if self.whole_prompt else self.prompt_bars,
            infill=infill, chords=self.chords.strip() or None, form=self.form.strip() or None,
            restate=self.restate if self.form.strip() else None,  # the page's slider speaks to a form only
            tokens=self.length if sized and self.unit == "tokens" else None,
            bars=self.length if sized and self.unit == "bars" else None, top_p=self.top_p,
            temperature=self.temperature, nucleus=self.nucleus, seed=self.seed, end=self.end,
            hold_bars=self.hold_bars, recall=self.recall, num_samples=self.num_samples, render=self.render)


@dataclass
class SampleFiles:
    midi: Path  # the decoded piece
    tokens: Path  # one token per line
    pianoroll: Path  # PNG
    wav: Path | None  # rendered audio (None without audio)
    ogg: Path | None  # compressed audio
    new_tokens: int  # tokens after the prompt
    at_eos: bool  # the sample ended with EOS (it cannot be continued)

    def downloads(self) -> list[str]:
        return [str(p) for p in (self.midi, self.wav, self.ogg, self.tokens) if p is not None]


@dataclass
class View:
    """What the page shows after an action."""

    status: str  # one line of markdown
    samples: list[SampleFiles] = field(default_factory=list)  # one per sample
    similarity: list[list[Any]] = field(default_factory=list)  # groove: [sample, metric, Q1..Q4] rows
    take: int = 0  # number of steps in the history (0: nothing yet)


@dataclass
class Step:
    snapshot: dict[str, Any]  # decoder state after this step
    view: View  # what it produced


def page_request(model: Any, prompt: Any, prompt_bars: Any, length: Any, unit: Any, temperature: Any,
                 top_p: Any, seed: Any, samples: Any, whole: Any = False, chords: Any = "", form: Any = "",
                 render: Any = "file", restate: Any = None, nucleus: Any = None, end: Any = None,
                 hold_bars: Any = None, recall: Any = None) -> Request:
    """A Request from the page's raw values (numbers arrive as int, float, text or None: a client of
    the HTTP API sends what it likes); a StudioError names the field of a value that is not a number
    of its kind. `end`: "model" (or None), "may end" or "write all"; `recall`: "model" (or None),
    "on" or "off"."""
    for name, value, choices in (("end", end, END_CHOICES), ("recall", recall, RECALL_CHOICES)):
        if value not in choices and value is not None:
            raise StudioError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return Request(model=model, prompt=prompt, prompt_bars=whole_number(prompt_bars, "prompt bars", 1),
                   length=whole_number(length, "length", 0), unit=str(unit or "bars"),
                   temperature=optional(temperature, lambda v: finite_number(v, "temperature")),
                   top_p=optional(top_p, lambda v: finite_number(v, "top-p")), seed=whole_number(seed, "seed", 0),
                   num_samples=whole_number(samples, "samples", 1), whole_prompt=bool(whole),
                   chords=str(chords or ""), form=str(form or ""), render=str(render or "file"),
                   restate=optional(restate, lambda v: finite_number(v, "restate")),
                   nucleus=None if nucleus in (None, "", MODEL_CHOICE) else str(nucleus),
                   end=END_CHOICES.get(end), hold_bars=optional(hold_bars, lambda v: whole_number(v, "hold bars", 0)),
                   recall=RECALL_CHOICES.get(recall))


MODEL_CHOICE = "model"  # a choice of the page meaning: the model's own default
END_CHOICES = {MODEL_CHOICE: None, "may end": True, "write all": False}  # the page's end choices
RECALL_CHOICES = {MODEL_CHOICE: None, "on": True, "off": False}  # the page's recall choices


def optional(value: Any, read: Callable[[Any], Any]) -> Any:
    """None for an empty field, else `read(value)`."""
    return None if value is None or value == "" else read(value)


def check_unit(unit: str) -> None:
    """A StudioError unless `unit` is one of the page's length units."""
    if unit not in UNITS:
        raise StudioError(f"length unit must be one of {', '.join(UNITS)}, got {unit!r}")


def whole_number(value: Any, name: str, default: int) -> int:
    if value is None or value == "":
        return default
    try:
        number = float(value) if not isinstance(value, int) else value
        if isinstance(number, float) and not number.is_integer():
            raise ValueError
        return int(number)
    except (TypeError, ValueError, OverflowError):
        raise StudioError(f"{name} must be a whole number, got {value!r}") from None


def finite_number(value: Any, name: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number):
        raise StudioError(f"{name} must be a finite number, got {value!r}")
    return number


def model_path(choice: str | None, runs: Sequence[Path] = ()) -> Path:
    """The directory a model choice names: SHIPPED (the default shipped model), "NAME (shipped)"
    (that shipped model) or a run directory of `model_choices(runs)`. Any other value, an existing
    path or not, is the same StudioError: a client of the page opens nothing else on the disk."""
    choice = SHIPPED if choice is None or not str(choice).strip() else str(choice).strip()
    if choice not in model_choices(list(runs)):
        raise StudioError(UNKNOWN_MODEL)
    if choice == SHIPPED:
        return PRETRAINED
    if choice.endswith(SHIPPED_SUFFIX):
        return shipped_models()[choice[:-len(SHIPPED_SUFFIX)]]
    return Path(choice)


def model_choices(search: list[Path]) -> list[str]:
    """SHIPPED (when present), each shipped model by name, and every run directory with a checkpoint
    under the `search` folders."""
    choices = [SHIPPED] if shipped_default() is not None else []
    choices += [name + SHIPPED_SUFFIX for name in shipped_models()]
    for root in map(Path, search):
        if list_checkpoints(root):
            choices.append(str(root))
        elif root.is_dir():
            choices += [str(run) for run in sorted(root.iterdir()) if run.is_dir() and list_checkpoints(run)]
    return list(dict.fromkeys(choices))


def sampling_defaults(choice: str | None, runs: Sequence[Path] = ()) -> tuple[float, float]:
    """(temperature, top-p) the chosen model samples with by default, read from its checkpoint without
    loading it (the page's sliders start there); the config's defaults when it cannot be read (the
    page then reports the model's error on Generate)."""
    fallback = GenerateConfig()
    try:
        generate = read_meta(model_path(choice, runs))["config"].get("generate", {})
        return float(generate.get("temperature", fallback.temperature)), float(generate.get("top_p", fallback.top_p))
    except (StudioError, ValueError, TypeError, KeyError):
        return fallback.temperature, fallback.top_p


class StudioSession:
    """One person's studio state (see the module docstring)."""

    def __init__(self, workdir: str | Path, device: str = "cpu", threads: int = 1,
                 runs: Sequence[Path] = (), models: dict[Path, Any] | None = None) -> None:
        self.workdir = Path(workdir)
        self.runs = [Path(r) for r in runs]  # folders of run directories offered besides the shipped models
        self.device = torch.device(device)
        self.threads = threads  # torch CPU threads of the calling thread (set per action: web servers
        # run callbacks in worker threads, which do not inherit the main thread's setting)
        # loaded models by directory: the studio's, shared by its sessions (one model in memory)
        self.checkpoints: dict[Path, Any] = {} if models is None else models
        self.decoder: Decoder | None = None
        self.ckpt: Any = None  # checkpoint of the current piece
        self.request: Request | None = None  # settings of the current piece
        self.reference: list[int] | None = None  # groove: the uploaded piece's ids (similarity reference)
        self.history: list[Step] = []
        self.takes = 0  # steps ever made (names of output folders)
        self.plan: Plan | None = None  # how the current piece was planned (an infill's cannot be continued)
        self.tracks: list[tuple[str, bool]] = []  # how the uploaded prompt's tracks were read (shown once)

    # ------------------------------------------------------------------------------ actions
    def generate(self, request: Request, progress: Progress | None = None) -> View:
        """A new piece (N samples) from the request; the history starts again."""
        return self._start(request, request.generation(), progress, "generated")

    def infill(self, request: Request, bars: str, progress: Progress | None = None) -> View:
        """Rewrite bars `bars` ("9-12") of the uploaded song with a fill-in-the-middle model (the chosen
        one; the shipped infill model when the default is chosen); the history starts again."""
        wanted = request.generation(infill=str(bars or "").strip())
        return self._start(request, wanted, progress, f"rewrote bars {wanted.infill} of")

    def _start(self, request: Request, wanted: GenerationRequest, progress: Progress | None, verb: str) -> View:
        """Check, plan and run the first step of a new piece, as spe-generate runs it."""
        torch.set_num_threads(self.threads)
        try:
            parsed = wanted.check(LIMITS)
        except ValueError as error:
            raise StudioError(str(error)) from None
        ckpt = self._load(request.model, wanted)
        try:
            plan = wanted.plan(ckpt, parsed, LIMITS)
            decoder = plan.decoder(ckpt.model, self.device)
        except (ValueError, OSError) as error:  # TokenizationError is a ValueError
            raise StudioError(str(error)) from None
        self.decoder, self.ckpt, self.request, self.plan = decoder, ckpt, request, plan
        self.reference = plan.song if format_of(ckpt.tokenizer) == "groove" and request.prompt else None
        self.tracks, self.history = list(plan.tracks), []
        return self._extend(plan.budget, plan.stop(every=1), progress, verb, lambda _, result: plan.finish(result))

    def close(self) -> None:
        """Free what the session holds (its decoder, history and files): idle too long, or pushed
        out by newer sessions. Used again, it starts afresh."""
        self.decoder, self.history, self.plan, self.request, self.reference = None, [], None, None, None
        shutil.rmtree(self.workdir, ignore_errors=True)

    def continue_(self, length: int, unit: str = "bars", progress: Progress | None = None) -> View:
        """Extend every sample of the current piece (the recurrent state is kept: only new tokens cost)."""
        if self.decoder is None:
            raise StudioError("nothing to continue yet: press Generate first")
        if self.plan.job is not None:
            raise StudioError("an infill keeps the rest of the song as it is: press Generate to continue a piece")
        torch.set_num_threads(self.threads)
        check_unit(unit)
        try:  # the same bounds and messages as a new piece's length
            GenerationRequest(**{unit: int(length)}).check(LIMITS)
        except ValueError as error:
            raise StudioError(str(error)) from None
        if all(self.decoder.at_eos):
            raise StudioError("every sample has ended (EOS): generate a new piece")
        tokenizer, starts = self.ckpt.tokenizer, [len(t) - 1 for t in self.decoder.tokens]
        if unit == "tokens":
            return self._extend(int(length), None, progress, "continued", None)
        # a bar already begun by the last token counts as the first new one
        stops = [bar_stop(tokenizer, start, int(length), every=1) for start in starts]
        return self._extend(min(MAX_TOKENS, TOKENS_PER_BAR * int(length)), stops, progress, "continued",
                            lambda i, result: keep_bars(tokenizer, result, starts[i], int(length)))

    def undo(self) -> View:
        """Go back one step (a generate cannot be undone: there is nothing before it)."""
        if len(self.history) < 2:
            raise StudioError("nothing to undo")
        self.history.pop()
        step = self.history[-1]
        self.decoder.restore(step.snapshot)
        return View(status=f"undone: back to step {len(self.history)}", samples=step.view.samples,
                    similarity=step.view.similarity, take=len(self.history))

    # ------------------------------------------------------------------------------ helpers
    def _load(self, choice: str | None, wanted: GenerationRequest) -> Any:
        """The chosen model, loaded once; for an infill with the default model chosen, the shipped
        fill-in-the-middle model (the same rule as spe-generate without --checkpoint)."""
        path = model_path(choice, self.runs)
        if path == PRETRAINED:
            path = Path(wanted.checkpoint(None) or PRETRAINED)
        key = path.resolve()
        if key not in self.checkpoints:
            try:
                loaded = load_model(path, self.device)
                self.checkpoints.clear()  # keep one model in memory
                self.checkpoints[key] = loaded
            except ValueError as error:  # load_model reports every unusable checkpoint so; its
                logger.warning("studio: %s", error)  # message names server paths: logged, not shown
                raise StudioError(f"cannot load the model {path.name!r}: it is not a usable checkpoint "
                                  f"(the server's log says why)") from None
        return self.checkpoints[key]

    def _extend(self, budget: int, stop: Any, progress: Progress | None, verb: str,
                finish: Callable[[int, GenerationResult], GenerationResult] | None) -> View:
        """Run the decoder for up to `budget` more tokens per sample (until `stop`), `finish(i, result)`
        each sample's result into the piece written, write every sample and record the step."""
        decoder = self.decoder
        before = [len(t) for t in decoder.tokens]
        began = time.perf_counter()

        def report(done: int, total: int) -> None:
            if progress is not None:
                progress(done / total, f"{verb}: {done} / {total} tokens")

        try:
            decoder.run(budget, stop=stop, callback=report)
        except ValueError as error:  # e.g. a learned-APE model out of positions
            raise StudioError(str(error)) from None
        seconds = time.perf_counter() - began
        results = decoder.results()
        if finish is not None:
            try:
                results = [finish(i, result) for i, result in enumerate(results)]
            except InfillIncomplete as error:
                self.decoder = None  # nothing to continue: the rewrite did not happen
                raise StudioError(str(error)) from None
        self.takes += 1
        folder = self.workdir / f"take_{self.takes:03d}"
        audio = AudioConfig() if self.request.audio else None
        samples = [self._write(result, folder / f"sample_{i + 1}.mid", audio, decoder.at_eos[i])
                   for i, result in enumerate(results)]
        similarity = self._similarity(results)
        added = [len(t) - n for t, n in zip(decoder.tokens, before)]
        status = (f"Step {len(self.history) + 1}: {verb} {len(results)} sample(s), "
                  f"+{', +'.join(map(str, added))} tokens in {seconds:.1f} s "
                  f"({sum(added) / max(seconds, 1e-9):.0f} tokens/s); sample 1 has {len(results[0].tokens)} tokens"
                  + ("" if not any(decoder.at_eos) else f"; {sum(decoder.at_eos)} ended at EOS"))
        if audio is not None and any(files.wav is None for files in samples):
            status += (f"<br>**Warning:** no audio for sample(s) "
                       f"{', '.join(str(i + 1) for i, f in enumerate(samples) if f.wav is None)}: longer than "
                       f"{audio.max_seconds / 60:.0f} min; their MIDI, tokens and piano roll are written")
        if self.tracks:  # the prompt's roles, said once after the piece it started
            status += "".join(f"<br>{'**Warning:** ' if warning else ''}prompt {line}" for line, warning in self.tracks)
            self.tracks = []
        view = View(status=status, samples=samples, similarity=similarity, take=len(self.history) + 1)
        self.history.append(Step(snapshot=decoder.snapshot(), view=view))
        return view

    def _write(self, result: GenerationResult, out: Path, audio: AudioConfig | None, at_eos: bool
               ) -> SampleFiles:
        plan = self.plan
        write_piece(plan.tokenizer, result, out, audio=audio, sections=plan.sections, own=plan.own, tail=plan.tail)
        wav, ogg = out.with_suffix(".wav"), out.with_suffix(".ogg")  # absent when the piece is too long to render
        return SampleFiles(midi=out, tokens=out.with_suffix(".txt"), pianoroll=out.with_suffix(".png"),
                           wav=wav if audio and wav.exists() else None, ogg=ogg if audio and ogg.exists() else None,
                           new_tokens=len(result.generated), at_eos=at_eos)

    def _similarity(self, results: list[GenerationResult]) -> list[list[Any]]:
        """Groove with an uploaded piece: style similarity of each continuation's quarters to it."""
        if self.reference is None:
            return []
        from evaluation.groove import score_continuation

        rows = []
        for i, result in enumerate(results):
            if not result.generated:
                continue
            scores = score_continuation(self.ckpt.tokenizer, result.tokens, result.prompt_len, self.reference)
            rows += [[i + 1, metric.replace("_", "-"), *(round(float(v), 3) for v in values)]
                     for metric, values in scores.items()]
        return rows
