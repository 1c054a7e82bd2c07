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
from generation.chords import ChordSteer, parse_progression
from generation.form import RESTATE, form_and_chords, form_steer
from generation.infill import INFILL_MODEL, InfillIncomplete, InfillJob, has_infill, parse_bar_range
from generation.own_file import OwnFile, own_file
from generation.pieces import bar_stop, opening_bars, piece_ids, start_ids, track_report, write_piece
from generation.sampling import (Decoder, GenerationResult, SamplingConfig, check_seed, hold_notes, seeded_generator,
                                 without_end)
from tokenization import BaseTokenizer, format_of
from tokenization.form import form_bars
from training.checkpoint import (PRETRAINED, list_checkpoints, load_model, read_meta, shipped_default,
                                 shipped_models)
from training.config import GenerateConfig

logger = logging.getLogger(__name__)

SHIPPED = "pretrained (shipped)"  # the model choice naming the repository's default shipped model
SHIPPED_SUFFIX = " (shipped)"  # "NAME (shipped)": the shipped model pretrained/NAME
MAX_UPLOAD_BYTES = 2 * 1024 * 1024  # larger MIDI prompts are refused (a song is ~50 KB)
MAX_SAMPLES = 4  # samples drawn at once
MAX_TOKENS = 4096  # tokens one generate / continue may add per sample
MAX_BARS = 64  # bars one generate / continue may add
MAX_PROMPT_TOKENS = 16384  # a longer prompt (about 150 bars of piano) would hold the only worker for minutes
TOKENS_PER_BAR = 256  # token budget per requested bar (a dense piano bar takes ~50-200 REMI tokens)
UNITS = ("bars", "tokens")
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
    render: str = "file"  # with a prompt: "file" writes the uploaded file with only the new bars changed, "tokens" the decoded tokens


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
                 render: Any = "file") -> Request:
    """A Request from the page's raw values (numbers arrive as int, float, text or None: a client of
    the HTTP API sends what it likes); a StudioError names the field of a value that is not a number
    of its kind."""
    return Request(model=model, prompt=prompt, prompt_bars=whole_number(prompt_bars, "prompt bars", 1),
                   length=whole_number(length, "length", 0), unit=unit,
                   temperature=None if temperature in (None, "") else finite_number(temperature, "temperature"),
                   top_p=None if top_p in (None, "") else finite_number(top_p, "top-p"), seed=whole_number(seed, "seed", 0),
                   num_samples=whole_number(samples, "samples", 1), whole_prompt=bool(whole),
                   chords=str(chords or ""), form=str(form or ""), render=str(render or "file"))


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


def _sampling(ckpt: Any, request: Request) -> SamplingConfig:
    """The model's sampling defaults (as generate.py uses them), with the request's top-p and temperature."""
    try:
        return SamplingConfig.from_defaults(ckpt.config.generate, top_p=request.top_p, temperature=request.temperature)
    except ValueError as error:
        raise StudioError(str(error)) from None


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


def _own_file(tokenizer: BaseTokenizer, prompt: Path | None, render: str, tail: int = 0) -> OwnFile | None:
    try:
        return own_file(tokenizer, prompt, render, tail)
    except ValueError as error:  # an unknown render, or a file the tokenizer cannot read
        raise StudioError(str(error)) from None


def check_upload(path: str | Path | None) -> Path | None:
    """The uploaded prompt file, checked for presence, size and MIDI header."""
    if path is None:
        return None
    path = Path(path)
    if not path.is_file():
        raise StudioError("the uploaded file is gone: upload it again")
    size = path.stat().st_size
    if size == 0:
        raise StudioError(f"{path.name} is empty: upload a MIDI file (.mid)")
    if size > MAX_UPLOAD_BYTES:
        raise StudioError(f"{path.name} is {size / 2**20:.1f} MiB: prompts up to "
                          f"{MAX_UPLOAD_BYTES // 2**20} MiB are accepted")
    with path.open("rb") as handle:
        if handle.read(4) != b"MThd":
            raise StudioError(f"{path.name} is not a MIDI file (it does not start with 'MThd')")
    return path


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
        self.infill_job: InfillJob | None = None  # the current piece is an infill (it cannot be continued)
        self.tracks: list[tuple[str, bool]] = []  # how the uploaded prompt's tracks were read (shown once)
        self.own: OwnFile | None = None  # the uploaded file the current piece is written into (None: its tokens)

    # ------------------------------------------------------------------------------ actions
    def generate(self, request: Request, progress: Progress | None = None) -> View:
        """A new piece (N samples) from the request; the history starts again."""
        torch.set_num_threads(self.threads)
        phrases, bar_chords = _form(request)
        chords = None if phrases else _progression(request.chords)
        length, unit = (len(chords), "bars") if chords else (request.length, request.unit)
        if phrases:
            length, unit = form_bars(phrases), "bars"
            if request.whole_prompt:
                raise StudioError("a form starts with the prompt's first bars: untick 'continue after the whole song'")
        else:
            _check_settings(length, unit, request.num_samples)
        prompt_file = check_upload(request.prompt)
        ckpt = self._load(request.model)
        sampling = _sampling(ckpt, request)
        tokenizer = ckpt.tokenizer
        reference = None
        if prompt_file is None:
            prompt = start_ids(tokenizer)
        else:
            bars = None if request.whole_prompt else int(request.prompt_bars)
            prompt, reference = self._prompt(tokenizer, prompt_file, bars)
        budget = self._budget(length, unit)
        try:
            generator = seeded_generator(check_seed(request.seed), self.device)
            steer = ChordSteer(tokenizer, chords, 0 if prompt_file is None else len(prompt)) if chords else None
            if phrases:  # the prompt's bars are the form's first: the rest is written
                steer = form_steer(tokenizer, phrases, bar_chords, RESTATE, int(request.seed))
                length -= len(tokenizer.bar_starts(prompt)) if prompt_file is not None else 0
                if length < 1:
                    raise StudioError(f"the prompt's {request.prompt_bars} bars cover the whole form: "
                                      f"nothing is left to write")
                _check_settings(length, unit, request.num_samples)
                budget = self._budget(length, unit)
            if not ckpt.config.generate.end:  # the model's own policy, as generate.py applies it
                steer = without_end(tokenizer.eos_id, steer)
            hold_notes(tokenizer, ckpt.config.generate.hold_bars)
            decoder = Decoder(ckpt.model, tokenizer, prompt, int(request.num_samples), sampling, generator,
                              capacity=len(prompt) + budget, steer=steer)
        except ValueError as error:
            raise StudioError(str(error)) from None
        own = _own_file(tokenizer, prompt_file, request.render)
        self.decoder, self.ckpt, self.request, self.reference, self.own = decoder, ckpt, request, reference, own
        self.history, self.infill_job = [], None
        return self._extend(length, unit, progress, "generated")

    def infill(self, request: Request, bars: str, progress: Progress | None = None) -> View:
        """Rewrite bars `bars` ("9-12") of the uploaded song with a fill-in-the-middle model (the chosen
        one, or the shipped infill model when the chosen one has no markers); the history starts again."""
        torch.set_num_threads(self.threads)
        try:
            span = parse_bar_range(str(bars or ""))
        except ValueError as error:
            raise StudioError(str(error)) from None
        _check_settings(span[1] - span[0] + 1, "bars", request.num_samples)
        prompt_file = check_upload(request.prompt)
        if prompt_file is None:
            raise StudioError("upload the song whose bars to rewrite")
        ckpt = self._load(request.model)
        if not has_infill(ckpt.tokenizer):
            if INFILL_MODEL not in shipped_models():
                raise StudioError("this model cannot infill: choose a fill-in-the-middle model")
            ckpt = self._load(INFILL_MODEL + SHIPPED_SUFFIX)
        tokenizer = ckpt.tokenizer
        ids, _ = self._prompt(tokenizer, prompt_file, None)
        try:
            job = InfillJob.of(tokenizer, ids, span)
            sampling = _sampling(ckpt, request)
            budget = self._budget(job.bars, "bars")
            decoder = Decoder(ckpt.model, tokenizer, job.prompt, int(request.num_samples), sampling,
                              seeded_generator(check_seed(request.seed), self.device),
                              capacity=len(job.prompt) + budget, steer=job.steer())
        except ValueError as error:
            raise StudioError(str(error)) from None
        own = _own_file(tokenizer, prompt_file, request.render, job.tail)
        self.decoder, self.ckpt, self.request, self.reference, self.own = decoder, ckpt, request, None, own
        self.history, self.infill_job = [], job
        return self._extend(job.bars, "bars", progress, f"rewrote bars {span[0]}-{span[1]} of")

    def close(self) -> None:
        """Free what the session holds (its decoder, history and files): idle too long, or pushed
        out by newer sessions. Used again, it starts afresh."""
        self.decoder, self.history, self.infill_job, self.request, self.reference = None, [], None, None, None
        self.own = None
        shutil.rmtree(self.workdir, ignore_errors=True)

    def continue_(self, length: int, unit: str = "bars", progress: Progress | None = None) -> View:
        """Extend every sample of the current piece (the recurrent state is kept: only new tokens cost)."""
        if self.decoder is None:
            raise StudioError("nothing to continue yet: press Generate first")
        if self.infill_job is not None:
            raise StudioError("an infill keeps the rest of the song as it is: press Generate to continue a piece")
        torch.set_num_threads(self.threads)
        _check_settings(length, unit, 1)
        if all(self.decoder.at_eos):
            raise StudioError("every sample has ended (EOS): generate a new piece")
        return self._extend(length, unit, progress, "continued")

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
    def _load(self, choice: str | None) -> Any:
        path = model_path(choice, self.runs)
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

    def _prompt(self, tokenizer: BaseTokenizer, path: Path, bars: int | None) -> tuple[list[int], list[int] | None]:
        """Prompt ids (the first `bars` bars, at least 1; None: the whole piece) and, for groove
        models, the whole piece's ids."""
        if bars is not None and bars < 1:
            raise StudioError(f"prompt bars must be >= 1, got {bars}")
        try:
            ids = piece_ids(tokenizer, path)
            self.tracks = track_report(tokenizer, path)
        except (ValueError, OSError) as error:  # TokenizationError is a ValueError
            raise StudioError(f"cannot read {path.name} as a prompt: {error}") from None
        try:  # the same rule and message as generate.py's --prompt-bars
            prompt = opening_bars(tokenizer, ids, bars, path.name)
        except ValueError as error:
            raise StudioError(str(error)) from None
        if len(prompt) > MAX_PROMPT_TOKENS:
            raise StudioError(f"{path.name} makes a prompt of {len(prompt):,} tokens; the studio reads at most "
                              f"{MAX_PROMPT_TOKENS:,} (keep fewer bars, or use generate.py for long songs)")
        if len(prompt) < 2:
            raise StudioError(f"{path.name} has no notes to start from")
        return prompt, (ids if format_of(tokenizer) == "groove" else None)

    @staticmethod
    def _budget(length: int, unit: str) -> int:
        """Token budget of one step: `length` tokens, or generously enough tokens for `length` bars."""
        return int(length) if unit == "tokens" else min(MAX_TOKENS, TOKENS_PER_BAR * int(length))

    def _extend(self, length: int, unit: str, progress: Progress | None, verb: str) -> View:
        decoder, tokenizer = self.decoder, self.ckpt.tokenizer
        before = [len(t) for t in decoder.tokens]
        stop = None
        if unit == "bars":  # a bar already begun by the last token counts as the first new one
            stop = [bar_stop(tokenizer, len(t) - 1, int(length), every=1) for t in decoder.tokens]
        budget = self._budget(length, unit)
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
        if self.infill_job is not None:  # back in time order: the song with its rewritten bars
            try:
                results = [self.infill_job.restore(result) for result in results]
            except InfillIncomplete as error:
                self.decoder = None  # nothing to continue: the rewrite did not happen
                raise StudioError(str(error).replace(" (raise --tokens)", "")) from None
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
        tail = 0 if self.infill_job is None else self.infill_job.tail
        write_piece(self.ckpt.tokenizer, result, out, audio=audio, own=self.own, tail=tail)
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


def _progression(text: str) -> list | None:
    """The chords of the page's chord box (None when empty), a StudioError naming a bad symbol."""
    if not text.strip():
        return None
    try:
        return parse_progression(text)
    except ValueError as error:
        raise StudioError(str(error)) from None


def _form(request: Request) -> tuple[list, list | None]:
    """The phrases (empty without a form) and the per-bar chords of the page's form request."""
    if not request.form.strip():
        return [], None
    if request.chords.strip() and ":" not in request.chords:
        raise StudioError("with a form, give the chords per label (A: C G Am F; B: F G C C)")
    try:
        return form_and_chords(request.form, request.chords, int(request.seed))
    except ValueError as error:
        raise StudioError(str(error)) from None


def _check_settings(length: int, unit: str, num_samples: int) -> None:
    if unit not in UNITS:
        raise StudioError(f"length unit must be one of {', '.join(UNITS)}, got {unit!r}")
    limit = MAX_BARS if unit == "bars" else MAX_TOKENS
    if not 1 <= int(length) <= limit:
        raise StudioError(f"length must be 1 .. {limit} {unit}, got {length}")
    if not 1 <= int(num_samples) <= MAX_SAMPLES:
        raise StudioError(f"samples must be 1 .. {MAX_SAMPLES}, got {num_samples}")
