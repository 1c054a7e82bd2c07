"""spe-evaluate: evaluation of trained checkpoints (paper Fig. 3, 5, 7, Table 6 and the PE properties).

    spe-evaluate nll --checkpoint runs/pop_sine --checkpoint runs/pop_ape --out eval/ [--max-len 4096]
    spe-evaluate groove --checkpoint runs/groove_sine --out eval/ [--tokens 1024 --temperature 0.6]
                        [--real ../shared/data/openmsx_band]
    spe-evaluate pe --checkpoint runs/pop_sine --out eval/ [--length 256 --layer 0]
    spe-evaluate templates --checkpoint runs/pop_sine --out eval/ [--length 128 --layers 0 23]
    spe-evaluate quality --out eval/quality [--real ../shared/data/pop909 --pieces 20 --tokens 3072]

nll: per-position teacher-forced NLL on held-out pieces -> nll.csv, nll.png, nll_summary.{md,json}.
groove: style similarity of continuations of 2-bar prompts (of a corpus split, or of the band MIDI files of
    --real DIR) -> groove.csv (per model, metric, quarter), groove_similarity.{csv,png,md}; the row "real
    continuation" scores each piece's own next bars, the ceiling.
pe: translation invariance and monotonicity per head -> pe_properties.{csv,md}.
templates: learned SPE kernels with the gates applied -> templates_<model>_layer<l>.png.
quality: muspy + MusDr metrics of generated vs real pieces -> quality.{md,csv}, quality_summary.csv,
    quality_<metric>.png, generated/<model>/*.mid; and along the piece (song length in bars, every
    metric and tokens per bar per 16-bar window, bar repetition) -> quality_along.md,
    quality_windows.csv, quality_along_<mode>.png.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any, Sequence

from apps.cli import (OneLineParser, checkpoint_argument, finite_float, recall_argument, run_app, seed_value,
                      set_threads, threads_argument)
from data.corpus import extends
from generation.request import GenerationRequest
from generation.sampling import NUCLEUS_SCOPES
from model import resolve_device
from training.checkpoint import load_model, run_dir_of
from tokenization import BaseTokenizer, format_of

logger = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="spe-evaluate", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        checkpoint_argument(sub, repeat=True)
        sub.add_argument("--out", required=True, help="output directory (created if needed)")
        sub.add_argument("--seed", type=seed_value, default=0,
                         help="seed of the positional noise and sampling (default: %(default)s)")
        sub.add_argument("--label", action="append", default=None,
                         help="name of each checkpoint in tables and plots (default: its run directory)")
        sub.add_argument("--no-progress", action="store_true", help="hide progress bars")
        return sub

    nll = command("nll", "per-position NLL with teacher forcing on held-out pieces")
    nll.add_argument("--corpus", default=None, help="corpus root (default: the checkpoint's data.root)")
    nll.add_argument("--split", default=None, choices=("test", "valid", "train"),
                     help="corpus split (default: test, or valid when test is empty)")
    nll.add_argument("--max-len", type=int, default=None,
                     help="tokens per piece (default: twice the training crop length)")
    nll.add_argument("--max-pieces", type=int, default=None, help="use at most this many pieces")
    nll.add_argument("--full-length", action="store_true",
                     help="only pieces that reach --max-len, so that every position averages the same "
                          "pieces")
    nll.add_argument("--smooth", type=int, default=64,
                     help="moving-average window of the plot (default: %(default)s)")

    groove = command("groove", "style similarity of continuations of 2-bar prompts")
    threads_argument(groove)
    groove.add_argument("--corpus", default=None, help="corpus root (default: the checkpoint's data.root)")
    groove.add_argument("--real", default=None, metavar="DIR",
                        help="continue the band MIDI files of DIR instead of a corpus split (files without "
                             "drums, bass or an accompaniment are skipped, with the reason)")
    groove.add_argument("--split", default=None, choices=("test", "valid", "train"),
                        help="corpus split (default: test, or valid when test is empty)")
    groove.add_argument("--max-pieces", type=int, default=20,
                        help="number of held-out pieces prompted (default: %(default)s)")
    groove.add_argument("--prompt-bars", type=int, default=2,
                        help="bars of each piece used as prompt (default: %(default)s)")
    groove.add_argument("--tokens", type=int, default=1024,
                        help="length of prompt + continuation (default: %(default)s)")
    groove.add_argument("--temperature", type=finite_float, default=None,
                        help="softmax temperature (default: the model's, as generate.py)")
    recall_argument(groove)
    groove.add_argument("--top-p", type=finite_float, default=None,
                        help="nucleus mass (default: the model's, as generate.py)")
    groove.add_argument("--full-length", action=argparse.BooleanOptionalAction, default=None,
                        help="forbid the End token: every continuation runs to --tokens; --no-full-length lets "
                             "it end (default: the model's, as generate.py)")
    groove.add_argument("--hold-bars", type=int, default=None,
                        help="sampling closes any note held this many bars (its pitch then rests a bar), 0 for "
                             "no limit (default: the model's, as generate.py)")
    groove.add_argument("--roles", action="store_true",
                        help="also score bass, drums and accompaniment each alone (metric:role rows)")

    pe = command("pe", "translation invariance and monotonicity of the attention per head")
    pe.add_argument("--length", type=int, default=256,
                    help="length of the repeated-token sequence (default: %(default)s)")
    pe.add_argument("--layer", type=int, default=0,
                    help="layer whose attention maps are measured (default: %(default)s)")
    pe.add_argument("--token", default=None, help="the repeated token (default: first non-special token)")
    pe.add_argument("--draws", type=int, default=4,
                    help="positional noise draws averaged over (default: %(default)s)")

    templates = command("templates", "learned SPE templates with the gates applied")
    templates.add_argument("--length", type=int, default=128, help="positions shown (default: %(default)s)")
    templates.add_argument("--layers", type=int, nargs="+", default=[0],
                           help="layers (their gates) (default: %(default)s)")
    templates.add_argument("--heads", type=int, default=4, help="heads shown (rows) (default: %(default)s)")
    templates.add_argument("--features", type=int, default=4,
                           help="features shown per head (columns) (default: %(default)s)")

    quality = command("quality", "muspy and MusDr metrics of generated pieces beside real ones")
    threads_argument(quality)
    quality.add_argument("--real", default=None,
                         help="folder of real MIDI files: the reference and the prompts (default: the "
                              "held-out split of the checkpoint's corpus)")
    quality.add_argument("--corpus", default=None, help="corpus root (default: the checkpoint's data.root)")
    quality.add_argument("--split", default=None, choices=("test", "valid", "train"),
                         help="corpus split (default: test, or valid when test is empty)")
    quality.add_argument("--mode", default="both", choices=("unconditional", "continuation", "both"),
                         help="what to generate (default: %(default)s)")
    quality.add_argument("--pieces", type=int, default=20,
                         help="generated pieces per model and mode (default: %(default)s)")
    quality.add_argument("--real-pieces", type=int, default=100,
                         help="real pieces measured, a seeded random choice (default: %(default)s)")
    quality.add_argument("--tokens", type=int, default=None,
                         help="new tokens per generated piece (default: the checkpoint's generate.tokens)")
    quality.add_argument("--prompt-bars", type=int, default=4,
                         help="bars of a real piece prompting a continuation (default: %(default)s)")
    quality.add_argument("--full-real", action="store_true",
                         help="measure whole real pieces (default: as many tokens as generated)")
    quality.add_argument("--temperature", type=finite_float, default=None,
                         help="softmax temperature (default: the checkpoint's generate config)")
    recall_argument(quality)
    quality.add_argument("--top-p", type=finite_float, default=None, help="nucleus mass (default: config)")
    quality.add_argument("--nucleus", choices=NUCLEUS_SCOPES, default=None,
                         help="top-p cut over the whole vocabulary or within each token type (default: config)")
    quality.add_argument("--generated", action="append", default=None, metavar="DIR",
                         help="measure the unconditional pieces already generated in DIR (token files .txt, "
                              "as spe-generate writes them; each cut to --tokens new tokens) instead of "
                              "generating; repeatable, labelled by folder name; the checkpoint gives the "
                              "tokenizer and the held-out corpus")
    quality.set_defaults(max_pieces=None)

    form = command("form", "song form against held-out POP909 songs with human phrase labels")
    threads_argument(form)
    form.add_argument("--corpus", default=None, help="corpus root (default: the checkpoint's data.root)")
    form.add_argument("--split", default=None, choices=("test", "valid", "train"),
                      help="corpus split (default: test, or valid when test is empty)")
    form.add_argument("--structure", default=None, metavar="DIR",
                      help="POP909's phrase labels (default: pop909_structure beside the corpus's data.source)")
    form.add_argument("--songs", type=int, default=20, help="labelled held-out songs measured (default: %(default)s)")
    form.add_argument("--max-len", type=int, default=8192,
                      help="tokens of a song read for its NLL and memory measure (default: %(default)s)")
    form.add_argument("--pieces", type=int, default=4, help="unconditional pieces (default: %(default)s)")
    form.add_argument("--form-pieces", type=int, default=0,
                      help="pieces generated with the forms of the first held-out songs (default: %(default)s)")
    form.add_argument("--tokens", type=int, default=12000,
                      help="token cap of an unconditional piece (default: %(default)s)")
    form.add_argument("--restate", type=finite_float, default=None,
                      help="generation.form's restatement probability (default: generate.py's)")
    form.add_argument("--temperature", type=finite_float, default=None, help="softmax temperature (default: config)")
    recall_argument(form)
    form.add_argument("--top-p", type=finite_float, default=None, help="nucleus mass (default: config)")
    form.add_argument("--json", default=None, metavar="FILE", help="also write the figures to FILE")
    form.set_defaults(max_pieces=None)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Console script spe-evaluate; returns the exit status."""
    args = build_parser().parse_args(argv)
    return run_app("spe-evaluate", lambda: COMMANDS[args.command](args))


def load_models(args: argparse.Namespace, token_format: str | None = None,
                comparable: bool = False) -> list[tuple[str, Any]]:
    """(label, Checkpoint) for every --checkpoint (the shipped model when none is given); with
    `token_format`, every model must use it; `comparable`: each must read the first one's token ids as
    the first does (the same vocabulary, or one that only adds tokens at its end, like the infill markers)."""
    paths = args.checkpoint or [None]
    if args.label is not None and len(args.label) != len(paths):
        raise ValueError(f"--label given {len(args.label)} times for {len(paths)} checkpoints")
    for name in ("max_len", "max_pieces", "tokens", "length", "draws", "heads", "features", "smooth",
                 "prompt_bars", "pieces", "real_pieces", "hold_bars"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    device = resolve_device(args.device)
    models = [load_model(path, device) for path in paths]
    labels = args.label or [default_label(ckpt.path) for ckpt in models]
    if len(set(labels)) != len(labels):
        labels = [f"{i}_{label}" for i, label in enumerate(labels)]
    for label, ckpt in zip(labels, models):
        if token_format is not None and format_of(ckpt.tokenizer) != token_format:
            raise ValueError(f"spe-evaluate {args.command} needs {token_format} checkpoints; {label} uses "
                             f"{type(ckpt.tokenizer).__name__}")
        if comparable and not extends(ckpt.tokenizer.vocab.tokens, models[0].tokenizer.vocab.tokens):
            raise ValueError(f"{label} uses another vocabulary than {labels[0]}: its numbers are not comparable")
    return list(zip(labels, models))


def default_label(checkpoint_dir: Path) -> str:
    """The run directory's name (…/run/checkpoints/step_x -> run), else the checkpoint's own name."""
    run_dir = run_dir_of(checkpoint_dir)
    return (run_dir.name if run_dir is not None else "") or checkpoint_dir.name


def open_corpus(args: argparse.Namespace, ckpt: Any) -> Any:
    """The token corpus of --corpus (default: the checkpoint's data.root), checked against the tokenizer."""
    from data import corpus_for

    root = Path(args.corpus or ckpt.config.data.root)
    if not root.exists():
        data = ckpt.config.data
        made_from = f" from data.source {data.source}" if data.source else ""
        raise ValueError(f"corpus not found: {root} (data.kind {data.kind}{made_from}: build it by training or "
                         f"as the model card says, or pass --corpus)")
    return corpus_for(root, ckpt.tokenizer)


def held_out_pieces(args: argparse.Namespace, ckpt: Any, min_tokens: int = 0, corpus: Any = None
                    ) -> tuple[list[Any], list[str]]:
    """Pieces (and names) of the chosen split of the corpus (`corpus`, or `open_corpus`'s); with
    `min_tokens`, only the pieces at least that long (before --max-pieces is applied)."""
    corpus = open_corpus(args, ckpt) if corpus is None else corpus
    root = corpus.root
    split = args.split
    if split is None:  # held out: test, else valid
        split = "test" if corpus.pieces("test") else "valid"
    pieces, names = list(corpus.pieces(split)), list(corpus.names(split))
    if min_tokens:
        kept = [i for i, piece in enumerate(pieces) if len(piece) >= min_tokens]
        logger.info("%d of %d %s pieces reach %d tokens", len(kept), len(pieces), split, min_tokens)
        pieces, names = [pieces[i] for i in kept], [names[i] for i in kept]
    if args.max_pieces is not None:
        pieces, names = pieces[:args.max_pieces], names[:args.max_pieces]
    if not pieces:
        raise ValueError(f"corpus {root} has no pieces in split {split!r}"
                         + (f" of at least {min_tokens} tokens" if min_tokens else ""))
    logger.info("%d %s pieces from %s", len(pieces), split, root)
    return pieces, names


def run_nll(args: argparse.Namespace) -> None:
    from evaluation.nll import evaluate_nll, write_nll_outputs

    models = load_models(args, comparable=True)
    max_len = args.max_len or 2 * max(ckpt.config.data.crop_len for _, ckpt in models)
    pieces, _ = held_out_pieces(args, models[0][1], min_tokens=max_len + 1 if args.full_length else 0)
    curves = evaluate_nll(models, pieces, max_len, args.seed, progress=not args.no_progress)
    print(write_nll_outputs(curves, Path(args.out), args.smooth), end="")


def run_groove(args: argparse.Namespace) -> None:
    from evaluation.groove import (GrooveOptions, band_pieces, evaluate_groove, real_continuation_rows,
                                   write_groove_outputs)
    set_threads(args.threads)
    request = GenerationRequest(top_p=args.top_p, temperature=args.temperature, hold_bars=args.hold_bars,
                                recall=args.recall,
                                end=None if args.full_length is None else not args.full_length)
    request.check()  # a bad value is refused before anything loads
    models = load_models(args, token_format="groove")
    skipped = []
    if args.real is not None:
        if args.corpus is not None or args.split is not None:
            raise ValueError("--real replaces --corpus and --split: give one or the other")
        if not Path(args.real).is_dir():
            raise ValueError(f"--real {args.real}: not a folder")
        pieces, names, skipped = band_pieces(Path(args.real), models[0][1].tokenizer)
        if not pieces:
            raise ValueError(f"--real {args.real}: no MIDI file with drums, bass and an accompaniment "
                             f"({len(skipped)} skipped)")
        pieces, names = pieces[:args.max_pieces], names[:args.max_pieces]
    else:
        pieces, names = held_out_pieces(args, models[0][1])
    options = GrooveOptions(tokens=args.tokens, prompt_bars=args.prompt_bars, seed=args.seed, request=request,
                            progress=not args.no_progress, roles=args.roles)
    continued = []  # each continuation's length and held notes, the songs' own first
    rows = real_continuation_rows(models[0][1].tokenizer, pieces, names, options, continued=continued)  # the ceiling
    for label, ckpt in models:  # each model samples with its own defaults unless the options say otherwise
        rows += evaluate_groove(label, ckpt, pieces, names, options, continued)
    print(write_groove_outputs(rows, Path(args.out), skipped, continued), end="")


def run_pe(args: argparse.Namespace) -> None:
    from evaluation.pe import head_properties, write_properties

    results = []
    for label, ckpt in load_models(args):
        if not 0 <= args.layer < ckpt.model.cfg.n_layer:
            raise ValueError(f"--layer must be in 0 .. {ckpt.model.cfg.n_layer - 1}, got {args.layer}")
        token = repeated_token(ckpt.tokenizer, args.token)
        rows = head_properties(ckpt.model, token, args.length, args.layer, args.draws, args.seed)
        results.append((label, args.layer, rows))
    print(write_properties(results, Path(args.out)), end="")


def repeated_token(tokenizer: BaseTokenizer, name: str | None) -> int:
    """The id of --token, or of the first token after the special ones."""
    if name is None:
        return len(tokenizer.special_tokens)
    if name not in tokenizer.vocab:
        raise ValueError(f"--token {name!r} is not in the {type(tokenizer).__name__} vocabulary")
    return tokenizer.vocab[name]


def run_templates(args: argparse.Namespace) -> None:
    from evaluation.pe import write_templates

    for label, ckpt in load_models(args):
        for path in write_templates(ckpt.model, label, Path(args.out), args.length, args.layers,
                                    args.heads, args.features):
            print(path)


def run_quality(args: argparse.Namespace) -> None:
    from evaluation.quality import (MODES, QualityOptions, evaluate_quality, read_generated,
                                   real_pieces_from_folder, real_pieces_from_ids)

    set_threads(args.threads)
    models = load_models(args, token_format="remi", comparable=True)
    first = models[0][1]
    generated = []
    if args.generated:
        if args.mode == "continuation":
            raise ValueError("--generated measures unconditional pieces: use --mode unconditional")
        args.mode = "unconditional"
        generated = [(Path(folder).name or folder, read_generated(Path(folder), first.tokenizer))
                     for folder in args.generated]
        if len({label for label, _ in generated}) != len(generated):
            raise ValueError("--generated folders must have different names (they label the tables)")
    if args.real is not None:
        real = real_pieces_from_folder(Path(args.real), first.tokenizer, args.real_pieces, args.seed,
                                       not args.no_progress)
        reference = f"MIDI files of {args.real}"
    else:
        if not Path(args.corpus or first.config.data.root).exists():
            raise ValueError(f"corpus not found: {args.corpus or first.config.data.root} (build it by "
                             f"training, pass --corpus, or compare with a MIDI folder: --real DIR)")
        pieces, names = held_out_pieces(args, first)
        real = real_pieces_from_ids(pieces, names, first.tokenizer, args.real_pieces, args.seed)
        reference = f"held-out pieces of {args.corpus or first.config.data.root}"
    request = GenerationRequest(top_p=args.top_p, temperature=args.temperature, nucleus=args.nucleus,
                                recall=args.recall)
    option = QualityOptions(modes=MODES if args.mode == "both" else (args.mode,), pieces=args.pieces,
                            tokens=args.tokens or first.config.generate.tokens, prompt_bars=args.prompt_bars,
                            request=request, seed=args.seed, full_real=args.full_real, progress=not args.no_progress)
    options = [option] * len(models)
    print(evaluate_quality(models, options, real, reference, Path(args.out), generated), end="")


def run_form(args: argparse.Namespace) -> None:
    from evaluation.form import label_songs
    from evaluation.form_report import FormOptions, evaluate_form
    from evaluation.quality import real_pieces_from_ids
    from generation.form import RESTATE

    set_threads(args.threads)
    (label, ckpt), = load_models(args, token_format="remi")[:1]
    if args.form_pieces < 0 or args.songs < 1:
        raise ValueError("--songs must be >= 1 and --form-pieces >= 0")
    data = ckpt.config.data
    if data.kind != "pop909" or not data.source:
        raise ValueError(f"spe-evaluate form needs a model trained on POP909 (data.kind {data.kind})")
    structure = Path(args.structure) if args.structure else Path(data.source).parent / "pop909_structure"
    if not structure.is_dir():
        raise ValueError(f"phrase labels not found: {structure} (POP909's pop909_structure folder; --structure DIR)")
    corpus = open_corpus(args, ckpt)
    pieces, names = held_out_pieces(args, ckpt, corpus=corpus)
    songs = [(name, list(ids), real.ids) for name, ids, real in
             zip(names, pieces, real_pieces_from_ids(pieces, names, ckpt.tokenizer, len(pieces), 0))]
    labelled, placement = label_songs(songs, ckpt.tokenizer, Path(data.source), structure,
                                      corpus.summary.get("songs", {}))
    options = FormOptions(pieces=args.pieces, form_pieces=args.form_pieces, tokens=args.tokens,
                          max_len=args.max_len, restate=RESTATE if args.restate is None else args.restate,
                          request=GenerationRequest(top_p=args.top_p, temperature=args.temperature,
                                                    recall=args.recall), seed=args.seed,
                          progress=not args.no_progress)
    text, figures = evaluate_form(label, ckpt, labelled[:args.songs], placement, options, Path(args.out))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    print(text, end="")


COMMANDS = {"nll": run_nll, "groove": run_groove, "pe": run_pe, "templates": run_templates,
            "quality": run_quality, "form": run_form}


if __name__ == "__main__":
    raise SystemExit(main())
