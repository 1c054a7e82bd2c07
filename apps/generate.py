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

from apps.cli import (OneLineParser, checkpoint_argument, finite_float, run_app, seed_value, set_threads,
                      threads_argument)
from generation.audio import AudioConfig, load_soundfont
from generation.outputs import AtomicOutputs, check_targets
from generation.own_file import RENDERS, own_file
from generation.chords import ChordSteer, is_annotation, parse_annotation, parse_progression, place_annotation
from generation.form import RESTATE, form_and_chords, form_budget, form_steer
from generation.infill import INFILL_MODEL, InfillJob, has_infill, infill_checkpoint, parse_bar_range
from generation.pieces import (bar_stop, bars_budget, keep_bars, piece_ids, piece_paths, prompt_ids, start_ids,
                               track_report, write_piece)
from generation.sampling import (NUCLEUS_SCOPES, SamplingConfig, generate_batch, hold_notes, seeded_generator,
                                 without_end)
from model import resolve_device
from tokenization import MIDI_SUFFIXES, format_of
from tokenization.form import form_bars, form_text
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
                        help="groove models: close any note held this many bars, 0 for no limit (default: the "
                             "model's)")
    parser.add_argument("--num-samples", type=int, default=1,
                        help="samples drawn in one batched decoding (default: %(default)s)")
    parser.add_argument("--render", choices=RENDERS, default="file",
                        help="with --prompt: 'file' writes the prompt's own MIDI file with only the generated bars "
                             "changed (every other note, track, tempo and marker where it was), 'tokens' the "
                             "decoded tokens (quantised, on the tokenizer's bar grid, one track) (default: %(default)s)")
    parser.add_argument("--no-audio", action="store_true", help="write no .wav / .ogg")
    parser.add_argument("--soundfont", default=None,
                        help="General MIDI .sf2 for the audio (default: the one shipped with pretty_midi)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Console script spe-generate; returns the exit status."""
    args = build_parser().parse_args(argv)
    return run_app("spe-generate", lambda: run(args))


ALL = "all"  # --prompt-bars all: the whole prompt
PROMPT_BARS = 4  # --prompt-bars when not given


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


def progression(args: argparse.Namespace) -> tuple[list | None, list | None]:
    """The chords of --chords or a symbol --chords-file, or the spans of an annotation --chords-file
    (placed in bars once the tokenizer is loaded); (None, None) without either. Checked before
    anything loads."""
    if args.chords is not None and args.chords_file is not None:
        raise ValueError("give --chords or --chords-file, not both")
    if args.chords_midi is not None and args.chords_file is None:
        raise ValueError("--chords-midi places the chords of --chords-file: give that file too")
    if args.chords is None and args.chords_file is None:
        return None, None
    if args.form is not None and args.chords is not None and ":" in args.chords:
        return None, None  # chords per label: see form_request
    if args.no_constraints:
        raise ValueError("--chords needs the grammar-constrained sampler: drop --no-constraints")
    if args.chords is not None:
        return parse_progression(args.chords), None
    path = Path(args.chords_file)
    if not path.is_file():
        raise ValueError(f"chords file not found: {path}")
    text = path.read_text(errors="replace")
    if not is_annotation(text):
        return parse_progression(text), None
    if args.chords_midi is None and args.prompt is None:
        raise ValueError(f"{path} is a chord annotation in seconds (start end root:quality): its bars need "
                         "the song's MIDI tempo map; give --prompt or --chords-midi")
    return None, parse_annotation(text)


def infill_span(args: argparse.Namespace) -> tuple[int, int] | None:
    """The bar range of --infill-bars (None without it); its conflicts are checked before anything loads."""
    if args.infill_bars is None:
        return None
    span = parse_bar_range(args.infill_bars)
    if args.prompt is None:
        raise ValueError("--infill-bars rewrites bars of a song: give it as --prompt")
    if args.prompt_bars is not None:
        raise ValueError("--infill-bars keeps the whole --prompt song; drop --prompt-bars")
    if args.chords is not None or args.chords_file is not None:
        raise ValueError("--infill-bars does not follow chords; drop --chords / --chords-file")
    if args.bars is not None:
        raise ValueError("--infill-bars writes exactly its range's bars; drop --bars")
    if args.no_constraints:
        raise ValueError("--infill-bars needs the grammar-constrained sampler: drop --no-constraints")
    if args.end is False:
        raise ValueError("--infill-bars ends where its range does: drop --no-end")
    return span


def form_request(args: argparse.Namespace) -> tuple[list | None, list | None]:
    """The phrases of --form (None without it) and, when --chords gives them per label, the chord of
    every bar of the form (None otherwise); conflicts are checked before anything loads."""
    if args.form is None:
        if args.restate is not None:
            raise ValueError("--restate applies to --form: give a form")
        if args.chords is not None and ":" in args.chords:
            raise ValueError("chords per label (A: ...) need --form")
        return None, None
    for flag, given in (("--infill-bars", args.infill_bars), ("--bars", args.bars),
                        ("--chords-file", args.chords_file)):
        if given is not None:
            raise ValueError(f"--form sets the song's bars: drop {flag}")
    if args.no_constraints:
        raise ValueError("--form needs the grammar-constrained sampler: drop --no-constraints")
    if args.restate is not None and not 0.0 <= args.restate <= 1.0:
        raise ValueError(f"--restate must be in [0, 1], got {args.restate}")
    if args.prompt_bars == ALL:
        raise ValueError("--form with --prompt-bars all: give the number of the prompt's bars the form starts with")
    return form_and_chords(args.form, args.chords, 0 if args.seed is None else args.seed)


def run(args: argparse.Namespace) -> None:
    out = Path(args.out)
    if out.suffix.lower() not in MIDI_SUFFIXES:
        raise ValueError(f"--out must name a .mid file, got {out}")
    for name, least in (("tokens", 1), ("bars", 1), ("num_samples", 1), ("hold_bars", 0)):
        value = getattr(args, name)
        if value is not None and value < least:
            raise ValueError(f"--{name.replace('_', '-')} must be >= {least}, got {value}")
    if args.prompt is not None and not Path(args.prompt).is_file():
        raise ValueError(f"prompt file not found: {args.prompt}")
    if args.soundfont is not None and not args.no_audio:
        load_soundfont(Path(args.soundfont))  # a bad one is refused before the generation, not after
    inputs = [Path(p) for p in (args.prompt, args.chords_file, args.chords_midi, args.soundfont) if p]
    replaced = check_targets([path for sample in sample_paths(out, args.num_samples or 1)
                              for path in piece_paths(sample, not args.no_audio)], inputs)
    if replaced:
        logger.warning("replacing %s", ", ".join(str(p) for p in replaced))
    phrases, form_bar_chords = form_request(args)
    chords, spans = progression(args)
    span = infill_span(args)
    set_threads(args.threads)
    device = resolve_device(args.device)
    ckpt = load_model(infill_checkpoint(args.checkpoint) if span else args.checkpoint, device)
    defaults = ckpt.config.generate
    tokenizer = ckpt.tokenizer
    if span is not None and not has_infill(tokenizer):
        given = args.checkpoint or "the default model"
        raise ValueError(f"--infill-bars needs a fill-in-the-middle model; {given} has none (give "
                         f"--checkpoint {INFILL_MODEL}, or fine-tune one with data.fim_rate)")
    if spans is not None:
        chords = place_annotation(spans, args.chords_midi or args.prompt, tokenizer)
    if args.hold_bars and format_of(tokenizer) != "groove":
        raise ValueError(f"--hold-bars applies to groove models; this one uses {type(tokenizer).__name__}")
    if args.hold_bars and args.no_constraints:
        raise ValueError("--hold-bars needs the grammar-constrained sampler: drop --no-constraints")
    hold_notes(tokenizer, None if args.no_constraints else defaults.hold_bars if args.hold_bars is None
               else args.hold_bars)
    sampling = SamplingConfig.from_defaults(defaults, args.top_p, args.temperature, args.nucleus,
                                            constrained=not args.no_constraints)
    budget = defaults.tokens if args.tokens is None else args.tokens
    seed = defaults.seed if args.seed is None else args.seed

    job = None
    if span is not None:
        job = InfillJob.of(tokenizer, piece_ids(tokenizer, args.prompt), span)
        prompt, args.bars = job.prompt, job.bars
        budget = bars_budget(job.bars, args.tokens, defaults.tokens, f"--infill-bars {args.infill_bars}")
    elif args.prompt is not None:
        track_report(tokenizer, args.prompt)  # which track plays which part (a band model's roles)
        bars = PROMPT_BARS if args.prompt_bars is None else args.prompt_bars
        prompt = prompt_ids(tokenizer, args.prompt, None if bars == ALL else bars)
    else:
        prompt = start_ids(tokenizer)
    bars_from = len(prompt) if args.prompt is not None else 0
    if spans is not None and args.chords_midi is None:  # the prompt's own song: follow it after the prompt
        prompt_bars = len(tokenizer.bar_starts(prompt))
        if len(chords) <= prompt_bars:
            raise ValueError(f"the chord annotation has {len(chords)} bars, all within the prompt's "
                             f"{prompt_bars}: nothing is left to follow")
        chords = chords[prompt_bars:]
    steer = None if chords is None else ChordSteer(tokenizer, chords, bars_from)
    if phrases is not None:  # bars count from the piece's first: the prompt's bars are the form's first
        steer = form_steer(tokenizer, phrases, form_bar_chords, RESTATE if args.restate is None else args.restate,
                           seed, steer)
        budget = form_budget(phrases, len(tokenizer.bar_starts(prompt)) if args.prompt else 0, args.tokens,
                             defaults.tokens)
        bars_from, args.bars = 0, form_bars(phrases)
        logger.info("form %s: %d bars", form_text(phrases), args.bars)
    if job is not None:
        steer = job.steer()
    if args.end is False and args.no_constraints:
        raise ValueError("--no-end needs the grammar-constrained sampler: drop --no-constraints")
    if not (defaults.end if args.end is None else args.end) and not args.no_constraints:
        steer = without_end(tokenizer.eos_id, steer)
    if chords is not None and args.bars is None:
        args.bars = len(chords)
    stop = None if args.bars is None else bar_stop(tokenizer, bars_from, args.bars)
    logger.info("generating %d sample(s) of up to %d tokens after a %d-token prompt (top_p=%g, "
                "nucleus over each %s, temperature=%g, %s, seed %d)", args.num_samples, budget, len(prompt), sampling.top_p,
                sampling.nucleus,
                sampling.temperature, "constrained" if sampling.constrained else "unconstrained", seed)
    results = generate_batch(ckpt.model, tokenizer, prompt, budget, args.num_samples, sampling,
                             generator=seeded_generator(seed, device), progress=not args.no_progress,
                             stop=stop, steer=steer)
    if job is not None:
        results = [job.restore(result) for result in results]
    elif args.bars is not None:
        results = [keep_bars(tokenizer, result, bars_from, args.bars) for result in results]
    audio = None if args.no_audio else AudioConfig(soundfont=args.soundfont)
    sections = [(p.first, p.label) for p in phrases] if phrases is not None else []
    tail = 0 if job is None else job.tail  # an infill's bars after the range are the user's
    own = own_file(tokenizer, args.prompt, args.render, tail)
    with AtomicOutputs() as outputs:  # every sample's files appear together, or none
        for path, result in zip(sample_paths(out, len(results)), results):
            placed = write_piece(tokenizer, result, path, audio=audio, sections=sections, outputs=outputs, own=own,
                                 tail=tail)
            if placed is not None:
                logger.info("%s: %s with beats %.2f-%.2f generated (%d notes in place of %d of its own; every "
                            "other note, track and tempo kept)", path.name, own.path.name, *placed.span,
                            placed.added, placed.removed)


def sample_paths(out: Path, count: int) -> list[Path]:
    """`out` for one sample; out_1 .. out_N (same suffix) for several."""
    if count == 1:
        return [out]
    return [out.with_name(f"{out.stem}_{i}{out.suffix}") for i in range(1, count + 1)]


if __name__ == "__main__":
    raise SystemExit(main())
