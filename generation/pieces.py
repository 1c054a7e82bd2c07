"""Pieces around the sampler: prompts from MIDI files, bar-counted stops and cuts, and writing a
result as .mid, .txt, .png (piano roll) and optionally .wav / .ogg, all or none of them."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from generation.audio import AudioConfig, AudioTooLong, render_files
from generation.outputs import AtomicOutputs
from generation.own_file import OwnFile, Placed, generated_bars, next_bar_time, place
from generation.pianoroll import save_pianoroll
from generation.sampling import GenerationResult, Steer
from tokenization import BaseTokenizer, load_midi, midi_notes

logger = logging.getLogger(__name__)

BAR_CHECK_EVERY = 16  # tokens between two checks of a bar-count stop condition
MIN_TOKENS_PER_BAR = 40  # a budget below this per bar to write cannot hold the bars (POP909: 64 +- 14)
TOKENS_PER_BAR = 160  # the budget per bar to write when the user gives none (dense pop bars take 90-160)


def bars_budget(bars: int, tokens: int | None, default: int, what: str) -> int:
    """The token budget for writing `bars` bars: `tokens` when given and enough, else at least
    TOKENS_PER_BAR a bar; a ValueError naming the tokens needed when the given budget cannot hold
    them (`what`: the bars, in the message)."""
    if tokens is None:
        return max(default, TOKENS_PER_BAR * bars)
    if tokens < MIN_TOKENS_PER_BAR * bars:
        raise ValueError(f"{what} leaves {bars} bars to write: {tokens} tokens cannot hold them "
                         f"(give at least {MIN_TOKENS_PER_BAR * bars} tokens, or about {TOKENS_PER_BAR * bars})")
    return tokens


def start_ids(tokenizer: BaseTokenizer) -> list[int]:
    """What an unprompted piece starts with: the format's start token (REMI: a bar line)."""
    return [tokenizer.start_id]


def song_opening(tokenizer: BaseTokenizer, then: Steer | None = None) -> Steer | None:
    """The steer of an unprompted piece (its first token the start token alone), applied before `then`:
    the piece opens as every piece the format encodes does (`tokenizer.opening()`; REMI: `Bar TimeSig
    Beat_0 Tempo`), the model choosing among each position's tokens; `then` itself where the format
    fixes no opening.

    A crop drawn from the middle of a song also starts at a bar line, with nothing before it: a lone bar
    line reads as a mid-song crop, and the model then writes a song's middle, as dense as one
    (bench/README.md, "Opening a song as songs open")."""
    steps = [np.asarray(ids, dtype=np.int64) for ids in tokenizer.opening()]
    if not steps:
        return then
    start = tokenizer.start_id

    def opening(tokens: list[int], allowed: np.ndarray) -> np.ndarray:
        at = len(tokens) - 1  # opening position of the next token
        if (at < len(steps) and tokens[0] == start and all(t in steps[i] for i, t in enumerate(tokens[1:]))
                and allowed[steps[at]].any()):
            narrowed = np.zeros_like(allowed)
            narrowed[steps[at]] = allowed[steps[at]]
            allowed = narrowed
        return allowed if then is None else then(tokens, allowed)

    return opening


def strip_eos(ids: Sequence[int], eos: int) -> list[int]:
    """`ids` as ints, without the end-of-sequence tokens at the end."""
    ids = [int(i) for i in ids]
    while ids and ids[-1] == eos:
        ids.pop()
    return ids


def track_report(tokenizer: BaseTokenizer, path: str | Path) -> list[tuple[str, bool]]:
    """How the tokenizer reads the file's tracks (which track plays which part; (line, is_a_warning)),
    logged as well: the command line and the studio show the same lines."""
    lines = tokenizer.describe_tracks(load_midi(Path(path)))
    for line, warning in lines:
        (logger.warning if warning else logger.info)("%s: %s", Path(path).name, line)
    return lines


def piece_ids(tokenizer: BaseTokenizer, path: str | Path) -> list[int]:
    """A MIDI file's ids, without its end token (TokenizationError on a bad file)."""
    return strip_eos(tokenizer.encode(Path(path)), tokenizer.eos_id)


def first_bars(tokenizer: BaseTokenizer, ids: Sequence[int], bars: int) -> list[int] | None:
    """The ids before bar number `bars` + 1 (None when the piece has no bar after its first `bars`)."""
    starts = tokenizer.bar_starts(list(ids))
    return list(ids[:starts[bars]]) if len(starts) > bars else None


def prompt_ids(tokenizer: BaseTokenizer, path: str | Path, bars: int | None) -> list[int]:
    """The ids of the first `bars` bars of a MIDI file (all of it when `bars` is None: a whole song to
    continue after its end); TokenizationError on a bad file, ValueError when it has fewer bars."""
    prompt = opening_bars(tokenizer, piece_ids(tokenizer, path), bars, Path(path).name)
    if not prompt:
        raise ValueError(f"{path}: the prompt has no tokens")
    return prompt


def opening_bars(tokenizer: BaseTokenizer, ids: list[int], bars: int | None, name: str) -> list[int]:
    """The first `bars` bars of a piece's ids (all of them for None, or when it has exactly `bars`);
    ValueError naming the piece when it has fewer."""
    prompt = ids if bars is None else first_bars(tokenizer, ids, bars)
    if prompt is None:
        have = len(tokenizer.bar_starts(ids))
        if have < bars:
            raise ValueError(f"the prompt {name} has {have} bars, fewer than the {bars} asked "
                             "for ('all' continues after its end)")
        prompt = ids
    return prompt


def count_bars(tokenizer: BaseTokenizer, tokens: list[int], start: int) -> list[int]:
    """Indices >= start where a bar starts."""
    return [i for i in tokenizer.bar_starts(tokens) if i >= start]


def bar_stop(tokenizer: BaseTokenizer, start: int, bars: int, every: int = BAR_CHECK_EVERY
             ) -> Callable[[list[int]], bool]:
    """Stop condition: more than `bars` bars begin at or after index `start` (checked every `every` tokens)."""
    def stop(tokens: list[int]) -> bool:
        return len(tokens) % every == 0 and len(count_bars(tokenizer, tokens, start)) > bars
    return stop


def keep_bars(tokenizer: BaseTokenizer, result: GenerationResult, start: int, bars: int) -> GenerationResult:
    """The result cut just before bar number bars + 1 (counted from index `start`)."""
    starts = count_bars(tokenizer, result.tokens, start)
    if len(starts) <= bars:
        if not result.stopped_at_eos:
            logger.warning("the token budget ran out after %d of %d bars (give more tokens)",
                           len(starts), bars)
        return result
    cut = max(starts[bars], result.prompt_len)
    return GenerationResult(tokens=result.tokens[:cut], prompt_len=result.prompt_len,
                            stopped_at_eos=False, seconds=result.seconds, noise_length=result.noise_length)


def bar_times(tokenizer: BaseTokenizer, ids: Sequence[int], bars: Sequence[int]) -> list[float]:
    """Where (in beats) each of the given bars (0-based indices, ascending) begins; bars beyond the
    piece are left out."""
    starts = tokenizer.bar_starts(list(ids))
    state, position, times = tokenizer.constraint_state(), 0, []
    for bar in bars:
        if bar >= len(starts):
            break
        while position < starts[bar]:
            state.advance(ids[position])
            position += 1
        times.append(state.next_bar_time())
    return times


def piece_paths(out: Path, audio: bool) -> list[Path]:
    """The files `write_piece` writes for `out`."""
    return [out, out.with_suffix(".txt"), out.with_suffix(".png")] + (
        [out.with_suffix(".wav"), out.with_suffix(".ogg")] if audio else [])


def write_piece(tokenizer: BaseTokenizer, result: GenerationResult, out: Path, audio: AudioConfig | None = None,
                sections: Sequence[tuple[int, str]] = (), outputs: AtomicOutputs | None = None,
                own: OwnFile | None = None, tail: int = 0) -> Placed | None:
    """Write out (.mid), .txt, .png and, unless audio is None, .wav and .ogg; all or none of them
    (with `outputs`, they appear with every other output of that AtomicOutputs). `sections`: (first
    bar, label) of a form's phrases, marked on the piano roll. With `own`, the MIDI file is the user's
    file with the generated bars in it (generation.own_file), and the piano roll and audio are made
    from it; returns what was placed there. `tail`: the result's last tokens that are the user's own
    bars (an infill's suffix): the piano roll then shades the rewritten bars, both ends marked. A piece
    too long to render keeps its MIDI, tokens and piano roll, without audio (a warning says so)."""
    if outputs is None:
        with AtomicOutputs() as own_outputs:
            return write_piece(tokenizer, result, out, audio, sections, own_outputs, own, tail)
    report = tokenizer.decode_with_report(result.tokens)
    if report.skipped:
        logger.warning("%d invalid events were skipped while decoding", report.skipped)
    midi_path = outputs.temp(out)
    title = (f"{out.stem}: {len(result.generated)} tokens after a {result.prompt_len}-token prompt"
             + (" (EOS)" if result.stopped_at_eos else ""))
    beats = bar_times(tokenizer, result.tokens, [bar for bar, _ in sections])
    placed, shift, prompt_end, generated = None, 0.0, None, None
    if own is None:
        tokenizer.write_midi(result.tokens, midi_path)
        notes = tokenizer.notes(result.tokens)
        if tail:
            generated = generated_bars(tokenizer, result, tail)
        else:
            prompt_end = max((n.end for n in tokenizer.notes(result.tokens[:result.prompt_len])), default=None)
    else:
        placed = place(tokenizer, result, own)
        placed.midi.save(midi_path)
        notes, shift, generated = midi_notes(load_midi(midi_path)), own.origin, placed.span
        title = f"{out.stem}: {own.path.name} with {placed.added} generated notes"
        title += " (EOS)" if result.stopped_at_eos else ""
    text = "\n".join(tokenizer.tokens_to_strings(result.tokens)) + "\n"
    outputs.temp(out.with_suffix(".txt")).write_text(text)
    save_pianoroll(notes, outputs.temp(out.with_suffix(".png")), title, prompt_end,
                   [(beat + shift, label) for beat, (_, label) in zip(beats, sections)],
                   generated=generated)
    if audio is not None:
        wav, ogg = outputs.temp(out.with_suffix(".wav")), outputs.temp(out.with_suffix(".ogg"))
        try:
            render_files(midi_path, wav, ogg, audio)
        except AudioTooLong as error:
            outputs.discard(out.with_suffix(".wav"))
            outputs.discard(out.with_suffix(".ogg"))
            logger.warning("%s: %s; its MIDI, tokens and piano roll are written, without audio", out.name, error)
    return placed
