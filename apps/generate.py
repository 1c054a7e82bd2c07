"""spe-generate: sample a piece from a trained checkpoint.

    spe-generate --checkpoint runs/pop_sine --out song.mid [--prompt intro.mid --prompt-bars 4 | all]
                 [--tokens 3072 | --bars 32] [--top-p 0.9 --temperature 1.2 --seed 0 --no-constraints]
                 [--num-samples 4] [--no-audio] [--chords "C Am | F G7"] [--prompt song.mid --infill-bars 9-12]

Writes song.mid, song.txt (one token per line), song.png (piano roll), song.wav and song.ogg (rendered
offline with a General MIDI SoundFont, see generation/audio.py; --no-audio skips them). With --num-samples N
the N samples are decoded as one batch and written as song_1.mid ... song_N.mid (and their .txt, ...).
Decoding is recurrent (O(1) per token) with one positional noise drawn for prompt + new tokens; sampling
is grammar-constrained unless --no-constraints. Defaults of the sampling options come from the
checkpoint's `generate` config section.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Sequence

from apps.cli import (OneLineParser, checkpoint_argument, finite_float, recall_argument, run_app, seed_value,
                      set_threads, threads_argument)
from generation.audio import AudioConfig, load_soundfont
from generation.form import RESTATE
from generation.infill import INFILL_MODEL
from generation.outputs import AtomicOutputs, check_targets
from generation.own_file import RENDERS
from generation.pieces import piece_paths, write_piece
from generation.request import ALL, PROMPT_BARS, GenerationRequest
from generation.sampling import NUCLEUS_SCOPES
from model import resolve_device
from tokenization import MIDI_SUFFIXES
from training.checkpoint import load_model

logger = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="spe-generate", description=__doc__.split("\n\n")[0])
    checkpoint_argument(parser)
    threads_argument(parser)
    parser.add_argument("--out", default="song.mid",
                        help="output MIDI (.txt/.png/.wav written beside) (default: %(default)s)")
    parser.add_argument("--prompt", default=None, help="MIDI file whose first bars prompt the model")
    parser.add_argument("--prompt-bars", type=bars_or_all, default=None,
                        help=f"bars of --prompt to keep, or 'all' to continue after its end (default: "
                             f"{PROMPT_BARS})")
    parser.add_argument("--infill-bars", default=None, metavar="FIRST-LAST",
                        help="rewrite these bars of --prompt (1-based, e.g. 9-12) so that they lead into the "
                             "next, keeping every other bar; needs a fill-in-the-middle model (default: the "
                             f"shipped {INFILL_MODEL})")
    parser.add_argument("--chords", default=None, metavar="PROGRESSION",
                        help='one chord per bar to follow, lead-sheet symbols: "C Am | F G7 | N" (roots A-G '
                             "with # or b; qualities '', m, dim, aug, sus2, sus4, 7, maj7, m7, dim7, m7b5; N: "
                             "no chord); the bars after the prompt follow it, --bars defaults to its length")
    parser.add_argument("--chords-file", default=None, metavar="FILE",
                        help="--chords read from a file: the same symbols, or POP909's `start end root:quality` "
                             "annotation (seconds), placed in the bars of --chords-midi's tempo map, or of "
                             "--prompt's, whose own bars are then skipped")
    parser.add_argument("--chords-midi", default=None, metavar="MIDI",
                        help="the song whose tempo map places an annotation's chords in bars (default: --prompt)")
    parser.add_argument("--form", default=None, metavar="FORM",
                        help='the song\'s form in POP909\'s label notation, e.g. "i4 A8 B8 A8 B8 x4 B8 o4" (a letter '
                             "and bars per phrase; A-H melodic, X a melodic phrase that does not return, i intro, o "
                             "outro, b c x interludes; spaces optional), or 'auto' for a drawn pop form: a "
                             "returning label restates its first phrase's bars (see --restate); with a --prompt, "
                             "its bars are the form's first bars; --chords may give a progression per label, "
                             "\"A: C G Am F; B: F G C C\"")
    parser.add_argument("--restate", type=finite_float, default=None,
                        help=f"with --form: the probability that a returning phrase's bar restates its first "
                             f"occurrence's (the others are written afresh; default {RESTATE})")
    parser.add_argument("--tokens", type=int, default=None,
                        help="new tokens to generate (default: the checkpoint's generate.tokens); "
                             "with --bars, the token budget")
    parser.add_argument("--bars", type=int, default=None, help="stop after this many new bars")
    parser.add_argument("--top-p", type=finite_float, default=None, help="nucleus mass (default: config)")
    parser.add_argument("--nucleus", choices=NUCLEUS_SCOPES, default=None,
                        help="top-p cut over the whole vocabulary or within each token type (default: config)")
    parser.add_argument("--temperature", type=finite_float, default=None,
                        help="softmax temperature (default: config)")
    parser.add_argument("--seed", type=seed_value, default=None, help="random seed (default: config)")
    parser.add_argument("--no-constraints", action="store_true", help="do not mask ungrammatical tokens")
    parser.add_argument("--end", action=argparse.BooleanOptionalAction, default=None,
                        help="--end lets the model end the piece before --tokens (or --bars), --no-end never does "
                             "(default: the model's; the shipped groove model writes all it is asked)")
    parser.add_argument("--hold-bars", type=int, default=None,
                        help="groove models: close any note held this many bars (its pitch then rests a bar), "
                             "0 for no limit (default: the model's)")
    recall_argument(parser)
    parser.add_argument("--num-samples", type=int, default=1,
                        help="samples drawn in one batched decoding (default: %(default)s)")
    parser.add_argument("--render", choices=RENDERS, default="file",
                        help="with --prompt: 'file' writes the prompt's own MIDI file with only the generated bars "
                             "changed (every other note, track, tempo and marker where it was), 'tokens' the "
                             "decoded tokens (quantised, on the tokenizer's bar grid, one track) "
                             "(default: %(default)s)")
    parser.add_argument("--no-audio", action="store_true", help="write no .wav / .ogg")
    parser.add_argument("--soundfont", default=None,
                        help="General MIDI .sf2 for the audio (default: the one shipped with pretty_midi)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Console script spe-generate; returns the exit status."""
    args = build_parser().parse_args(argv)
    return run_app("spe-generate", lambda: run(args))


def bars_or_all(text: str) -> int | str:
    """argparse type of --prompt-bars: a number of bars >= 1, or 'all'."""
    if text.strip().lower() == ALL:
        return ALL
    try:
        bars = int(text)
    except ValueError:
        bars = 0
    if bars < 1:
        raise argparse.ArgumentTypeError(f"expected a number of bars >= 1 or 'all', got {text!r}")
    return bars


def request_of(args: argparse.Namespace) -> GenerationRequest:
    """The generation request the command line asks for."""
    return GenerationRequest(
        prompt=args.prompt, prompt_bars=args.prompt_bars, infill=args.infill_bars, chords=args.chords,
        chords_file=args.chords_file, chords_midi=args.chords_midi, form=args.form, restate=args.restate,
        tokens=args.tokens, bars=args.bars, top_p=args.top_p, temperature=args.temperature, nucleus=args.nucleus,
        seed=args.seed, constrained=not args.no_constraints, end=args.end, hold_bars=args.hold_bars,
        recall=args.recall, num_samples=args.num_samples, render=args.render)


def run(args: argparse.Namespace) -> None:
    out = Path(args.out)
    if out.suffix.lower() not in MIDI_SUFFIXES:
        raise ValueError(f"--out must name a .mid file, got {out}")
    request = request_of(args)
    parsed = request.check()
    if args.soundfont is not None and not args.no_audio:
        load_soundfont(Path(args.soundfont))  # a bad one is refused before the generation, not after
    inputs = [Path(p) for p in (args.prompt, args.chords_file, args.chords_midi, args.soundfont) if p]
    replaced = check_targets([path for sample in sample_paths(out, args.num_samples)
                              for path in piece_paths(sample, not args.no_audio)], inputs)
    if replaced:
        logger.warning("replacing %s", ", ".join(str(p) for p in replaced))
    set_threads(args.threads)
    device = resolve_device(args.device)
    ckpt = load_model(request.checkpoint(args.checkpoint), device)
    plan = request.plan(ckpt, parsed)
    logger.info("%s", plan.describe())
    results = plan.run(ckpt.model, device, progress=not args.no_progress)
    audio = None if args.no_audio else AudioConfig(soundfont=args.soundfont)
    with AtomicOutputs() as outputs:  # every sample's files appear together, or none
        for path, result in zip(sample_paths(out, len(results)), results):
            placed = write_piece(plan.tokenizer, result, path, audio=audio, sections=plan.sections, outputs=outputs,
                                 own=plan.own, tail=plan.tail)
            if placed is not None:
                logger.info("%s: %s with beats %.2f-%.2f generated (%d notes in place of %d of its own; every "
                            "other note, track and tempo kept)", path.name, plan.own.path.name, *placed.span,
                            placed.added, placed.removed)


def sample_paths(out: Path, count: int) -> list[Path]:
    """`out` for one sample; out_1 .. out_N (same suffix) for several."""
    if count == 1:
        return [out]
    return [out.with_name(f"{out.stem}_{i}{out.suffix}") for i in range(1, count + 1)]


if __name__ == "__main__":
    raise SystemExit(main())
