"""spe-studio: a local web page to generate, hear, continue and download pieces (gradio).

    spe-studio [--port 7860] [--host 127.0.0.1] [--runs runs/] [--device cpu]

Choose a model (the shipped `pretrained/` one or a run directory), optionally upload a MIDI prompt (its
first bars, or the whole song to continue after its end), optionally give chords to follow (one per
bar) or a form, set the length (bars or tokens), temperature, top-p, nucleus scope, end policy, hold
limit (band models), restatement (forms), seed and number of samples, press
Generate (or give a bar range of the uploaded song and press Infill to rewrite those bars): the page
shows the progress, then the piano roll, an audio player and the files (MIDI, WAV, OGG, tokens) of the
selected sample. Continue extends every sample (only the new tokens are decoded), Undo goes back one
step. With a groove model and an uploaded band MIDI, the style similarity of each quarter of the
continuation to the uploaded piece is shown. It listens on 127.0.0.1 only unless --host says otherwise.
The work is done by `apps.studio_session`, which builds the same `generation.request.GenerationRequest`
as spe-generate; this module is the page.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import tempfile
import uuid
from collections import OrderedDict
from pathlib import Path
from typing import Any, Sequence

from apps.cli import OneLineParser, run_app, threads_argument
from apps.studio_session import (END_CHOICES, MAX_SAMPLES, MAX_UPLOAD_BYTES, MODEL_CHOICE, RECALL_CHOICES, UNITS,
                                 StudioError, StudioSession, View, model_choices, page_request, public_message,
                                 sampling_defaults, whole_number)
from generation.form import RESTATE
from generation.own_file import RENDERS
from generation.sampling import NUCLEUS_SCOPES
from model import DEVICE_NAMES, resolve_device
from tokenization import MIDI_SUFFIXES

logger = logging.getLogger(__name__)

SIMILARITY_HEADERS = ["sample", "metric", "Q1", "Q2", "Q3", "Q4"]


MAX_SESSIONS = 8  # sessions holding a piece at once; a newer one frees the least recently used
IDLE_SECONDS = 3600  # a page left this long loses its session (gradio's State time to live)


class Studio:
    """The page's callbacks over per-browser `StudioSession`s (kept in a gr.State), at most
    MAX_SESSIONS of them holding a piece, all sharing the loaded model."""

    def __init__(self, workdir: Path, device: str = "cpu", threads: int = 1, runs: Sequence[Path] = ()) -> None:
        self.workdir = workdir
        self.device = device
        self.threads = threads
        self.runs = list(runs)  # folders of run directories offered as models
        self.models: dict[Path, Any] = {}  # the loaded model, shared by every session
        self.sessions: OrderedDict[int, StudioSession] = OrderedDict()  # live sessions, least recent first

    def session(self, state: StudioSession | None) -> StudioSession:
        session = state if state is not None else StudioSession(
            self.workdir / uuid.uuid4().hex[:12], self.device, self.threads, self.runs, self.models)
        self.sessions[id(session)] = session
        self.sessions.move_to_end(id(session))
        while len(self.sessions) > MAX_SESSIONS:
            _, oldest = self.sessions.popitem(last=False)
            oldest.close()
        return session

    def close(self, state: StudioSession | None) -> None:
        """gr.State's delete callback: a page idle for IDLE_SECONDS, or closed."""
        if isinstance(state, StudioSession):
            self.sessions.pop(id(state), None)
            state.close()

    def generate(self, state, model, prompt, prompt_bars, length, unit, temperature, top_p, seed, samples,
                 whole: bool = False, chords: str = "", form: str = "", render: str = "file", restate: Any = None,
                 nucleus: Any = None, end: Any = None, hold_bars: Any = None, recall: Any = None,
                 progress: Any = None) -> list[Any]:
        session = self.session(state)
        try:
            request = page_request(model, prompt, prompt_bars, length, unit, temperature, top_p, seed, samples,
                                   whole, chords, form, render, restate, nucleus, end, hold_bars, recall)
        except StudioError as error:
            return _unchanged(session, f"**Error:** {public_message(error)}")
        return self._act(session, lambda: session.generate(request, _progress(progress)))

    def infill(self, state, model, prompt, bars, temperature, top_p, seed, samples, render: str = "file",
               nucleus: Any = None, recall: Any = None, progress: Any = None) -> list[Any]:
        session = self.session(state)
        try:
            request = page_request(model, prompt, 1, 1, "bars", temperature, top_p, seed, samples, render=render,
                                   nucleus=nucleus, recall=recall)
        except StudioError as error:
            return _unchanged(session, f"**Error:** {public_message(error)}")
        return self._act(session, lambda: session.infill(request, bars, _progress(progress)))

    def continue_(self, state, length, unit, progress: Any = None) -> list[Any]:
        session = self.session(state)
        return self._act(session,
                         lambda: session.continue_(whole_number(length, "length", 0), unit, _progress(progress)))

    def undo(self, state) -> list[Any]:
        session = self.session(state)
        return self._act(session, session.undo)

    def show(self, state, sample) -> list[Any]:
        """The selected sample of the current view."""
        session = self.session(state)
        if not session.history:
            return _unchanged(session, "")[2:]
        return _outputs(session, session.history[-1].view, int(sample or 1))[2:]

    @staticmethod
    def _act(session: StudioSession, action) -> list[Any]:
        try:
            view = action()
        except StudioError as error:
            logger.info("studio: %s", error)
            return _unchanged(session, f"**Error:** {public_message(error)}")
        return _outputs(session, view, 1)


def _progress(progress: Any):
    if progress is None:
        return None
    return lambda fraction, description: progress(fraction, desc=description)


def _outputs(session: StudioSession, view: View, sample: int) -> list[Any]:
    """[state, status, sample choice, piano roll, audio, downloads, similarity table]."""
    import gradio as gr

    sample = min(max(sample, 1), len(view.samples))
    files = view.samples[sample - 1]
    choices = [str(i + 1) for i in range(len(view.samples))]
    return [session, view.status, gr.update(choices=choices, value=str(sample)), str(files.pianoroll),
            str(files.wav) if files.wav else None, files.downloads(),
            gr.update(value=view.similarity or None, visible=bool(view.similarity))]


def _unchanged(session: StudioSession, status: str) -> list[Any]:
    import gradio as gr

    return [session, status] + [gr.update() for _ in range(5)]


def build_app(workdir: Path, runs: Sequence[Path] = (), device: str = "cpu", threads: int = 1) -> Any:
    """The gradio Blocks of the studio (not launched)."""
    import gradio as gr

    studio = Studio(workdir, device, threads, runs)
    choices = model_choices(list(runs))
    with gr.Blocks(title="SPE studio") as app:
        gr.Markdown("# SPE studio\nGenerate music with a Performer + stochastic positional encoding model, "
                    "listen, continue, download.")
        state = gr.State(None, time_to_live=IDLE_SECONDS, delete_callback=studio.close)
        with gr.Row():
            with gr.Column(scale=1):
                model = gr.Dropdown(choices=choices, value=choices[0] if choices else None,
                                    label="Model (shipped, or a run directory under --runs)", elem_id="model")
                prompt = gr.File(label=f"MIDI prompt (optional, up to {MAX_UPLOAD_BYTES // 2**20} MiB)",
                                 file_types=list(MIDI_SUFFIXES), type="filepath", height=110, elem_id="prompt")
                prompt_bars = gr.Slider(1, 32, value=4, step=1, label="Prompt bars kept", elem_id="prompt_bars")
                whole = gr.Checkbox(False, label="Continue after the whole song (all its bars kept)",
                                    elem_id="whole_song")
                chords = gr.Textbox(label="Chords to follow, one per bar (e.g. C Am | F G7; then the length is "
                                          "their bars), or per label of the form (A: C G Am F; B: F G C C)",
                                    placeholder="C Am F G7", elem_id="chords")
                form = gr.Textbox(label="Form: letter and bars per phrase (i intro, A-H sections that come back, "
                                        "X once, b c x interludes, o outro), or auto; then the length is its bars",
                                  placeholder="i4 A8 B8 A8 B8 o4", elem_id="form")
                render = gr.Radio(list(RENDERS), value="file", elem_id="render",
                                  label="With a prompt, write: the uploaded file with only the new bars changed "
                                        "(its tracks, tempo and timing kept), or the decoded tokens")
                infill_bars = gr.Textbox(label="Bars of the uploaded song to rewrite (e.g. 9-12), then Infill",
                                         placeholder="9-12", elem_id="infill_bars")
                with gr.Row():
                    length = gr.Number(value=4, precision=0, label="Length", elem_id="length")
                    unit = gr.Radio(list(UNITS), value="bars", label="Unit", elem_id="unit")
                start_temperature, start_top_p = sampling_defaults(choices[0] if choices else None, runs)
                temperature = gr.Slider(0.1, 2.0, value=start_temperature, step=0.05, elem_id="temperature",
                                        label="Temperature (the model's own to start with)")
                top_p = gr.Slider(0.05, 1.0, value=start_top_p, step=0.01, label="Top-p", elem_id="top_p")
                with gr.Row():
                    nucleus = gr.Radio([MODEL_CHOICE, *NUCLEUS_SCOPES], value=MODEL_CHOICE, elem_id="nucleus",
                                       label="Top-p cut over the whole vocabulary or within each token type")
                    end = gr.Radio(list(END_CHOICES), value=MODEL_CHOICE, elem_id="end",
                                   label="End: the model's policy, may end early, or write all that is asked")
                    recall = gr.Radio(list(RECALL_CHOICES), value=MODEL_CHOICE, elem_id="recall",
                                      label="Recall: copy passages of the piece so far (the model's default, on, off)")
                with gr.Row():
                    restate = gr.Slider(0.0, 1.0, value=RESTATE, step=0.05, elem_id="restate",
                                        label="Form: share of a returning phrase's 2-bar units restated")
                    hold_bars = gr.Textbox(value="", placeholder="the model's", elem_id="hold_bars",
                                           label="Band models: close notes held this many bars (0: no limit)")
                with gr.Row():
                    seed = gr.Number(value=0, precision=0, label="Seed", elem_id="seed")
                    samples = gr.Slider(1, MAX_SAMPLES, value=1, step=1, label="Samples", elem_id="samples")
                with gr.Row():
                    generate = gr.Button("Generate", variant="primary", elem_id="generate")
                    extend = gr.Button("Continue", elem_id="continue")
                    undo = gr.Button("Undo", elem_id="undo")
                    infill = gr.Button("Infill", elem_id="infill")
            with gr.Column(scale=2):
                status = gr.Markdown("Choose a model and press Generate.", elem_id="status")
                sample = gr.Radio(["1"], value="1", label="Sample", elem_id="sample")
                roll = gr.Image(type="filepath", label="Piano roll", interactive=False, height=330)
                audio = gr.Audio(type="filepath", label="Audio", interactive=False, elem_id="audio")
                downloads = gr.File(file_count="multiple", label="Downloads (MIDI, WAV, OGG, tokens)",
                                    interactive=False, height=170, elem_id="downloads")
                similarity = gr.Dataframe(headers=SIMILARITY_HEADERS, visible=False, interactive=False,
                                          label="Style similarity of the continuation's quarters to the prompt piece")
        outputs = [state, status, sample, roll, audio, downloads, similarity]

        def on_generate(st, m, p, pb, n, u, t, tp, s, k, w, c, f, r, rs, nu, e, h, rc, progress=gr.Progress()):
            return studio.generate(st, m, p, pb, n, u, t, tp, s, k, w, c, f, r, rs, nu, e, h, rc, progress)

        def on_continue(st, n, u, progress=gr.Progress()):
            return studio.continue_(st, n, u, progress)

        def on_infill(st, m, p, b, t, tp, s, k, r, nu, rc, progress=gr.Progress()):
            return studio.infill(st, m, p, b, t, tp, s, k, r, nu, rc, progress)

        infill.click(on_infill, [state, model, prompt, infill_bars, temperature, top_p, seed, samples, render,
                                 nucleus, recall], outputs)
        generate.click(on_generate, [state, model, prompt, prompt_bars, length, unit, temperature, top_p,
                                     seed, samples, whole, chords, form, render, restate, nucleus, end, hold_bars,
                                     recall], outputs)
        extend.click(on_continue, [state, length, unit], outputs)
        model.change(lambda choice: sampling_defaults(choice, runs), [model], [temperature, top_p])
        undo.click(studio.undo, [state], outputs)
        sample.input(studio.show, [state, sample], outputs[2:])
    return app


def launch(app: Any, workdir: Path, host: str, port: int, block: bool = True) -> None:
    """Serve the page: one generation at a time, files only from `workdir`, uploads over
    MAX_UPLOAD_BYTES refused by the server itself (not only by the page)."""
    app.queue(default_concurrency_limit=1).launch(server_name=host, server_port=port, allowed_paths=[str(workdir)],
                                                  max_file_size=MAX_UPLOAD_BYTES, inbrowser=False,
                                                  prevent_thread_lock=not block, quiet=not block)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="spe-studio", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    parser.add_argument("--port", type=int, default=7860, help="port (default: %(default)s)")
    parser.add_argument("--runs", action="append", default=None,
                        help="folder of run directories (or a run directory) offered as models; "
                             "repeatable (default: runs/ in the current folder)")
    parser.add_argument("--device", default="auto", choices=DEVICE_NAMES,
                        help="where to run the models (default: %(default)s)")
    threads_argument(parser)
    parser.add_argument("--workdir", default=None,
                        help="where generated files go (default: a new temporary folder)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Console script spe-studio; serves until interrupted, returns the exit status."""
    args = build_parser().parse_args(argv)
    return run_app("spe-studio", lambda: serve(args))


def serve(args: argparse.Namespace) -> None:
    if not 0 < args.port < 65536:
        raise ValueError(f"--port must be in 1 .. 65535, got {args.port}")
    if args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    device = str(resolve_device(args.device))
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="spe-studio-"))
    workdir.mkdir(parents=True, exist_ok=True)
    runs = [Path(r) for r in (args.runs or ["runs"])]
    app = build_app(workdir, runs, device, args.threads)
    logger.info("spe-studio: files go to %s", workdir)
    try:
        launch(app, workdir, args.host, args.port)
    finally:
        if not args.workdir:  # a folder of its own: removed with the server
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
