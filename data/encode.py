"""Tokenising MIDI files into corpus pieces: the one loop the file-based corpus builders share.

``data.folders`` (MIDI folders, Groove2Groove) and ``data.music21_corpus`` (the scores converted to MIDI)
both read MIDI files, encode them, cut long pieces at a bar line and skip (and report) bad files here;
each builder then makes its ``Piece`` entries (names, composers, meters, split groups) from the result.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
from tqdm.auto import tqdm

from data.corpus import Skipped, truncate_at_bar
from tokenization import BaseTokenizer, TokenizationError, declared_meters, load_midi

logger = logging.getLogger(__name__)

MAX_EMPTY_BARS = 64  # a longer run of empty bars (a stray note far beyond the song's end) cuts the piece


@dataclass
class EncodedFile:
    """One MIDI file, tokenised."""

    name: str  # piece name given by the builder
    path: Path  # the MIDI file
    ids: np.ndarray  # (N,) int32 token ids, cut at a bar line to at most max_piece_tokens
    declared_meters: list[str]  # the file's time signatures, "n/d", in order of appearance
    meters_followed: list[str]  # the meters the tokens' bars follow (``BaseTokenizer.meters_followed``)


def encode_files(
    named_paths: Sequence[tuple[str, Path]],
    tokenizer: BaseTokenizer,
    max_piece_tokens: int | None = None,
    progress: bool = False,
    desc: str = "tokenising",
) -> tuple[list[EncodedFile], list[Skipped]]:
    """Encode ``(piece name, MIDI path)`` pairs; files that fail are skipped with the reason."""
    encoded: list[EncodedFile] = []
    skipped: list[Skipped] = []
    seen: dict[str, Path] = {}
    for name, path in tqdm(named_paths, desc=desc, unit="file", disable=not progress):
        reason = name_problem(name, path, seen)
        if reason is not None:
            skipped.append(Skipped(ascii(name)[1:-1], reason))
            logger.warning("skipped %s: %s", ascii(str(path))[1:-1], reason)
            continue
        seen[name] = path
        try:
            midi = load_midi(path)
            ids = truncate_at_bar(cut_empty_run(tokenizer.encode(midi), tokenizer, path), tokenizer,
                                  max_piece_tokens)
        except TokenizationError as err:
            skipped.append(Skipped(name, err.reason))
            logger.warning("skipped %s: %s", path, err.reason)
            continue
        ids_array = np.asarray(ids, dtype=np.int32)
        encoded.append(EncodedFile(name, path, ids_array, declared_meters(midi), tokenizer.meters_followed(midi)))
    return encoded, skipped


def name_problem(name: str, path: Path, seen: dict[str, Path]) -> str | None:
    """Why a file cannot be a piece of that name (None if it can): a name that is not valid UTF-8
    (it could not be written to the corpus index), or one another file already has (a.mid, a.midi)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "the file name is not valid UTF-8 (rename the file)"
    if name in seen:
        return f"{seen[name].name} has the same name (rename one of the two)"
    return None


def cut_empty_run(ids: list[int], tokenizer: BaseTokenizer, path: Path) -> list[int]:
    """The tokens before a run of more than MAX_EMPTY_BARS empty bars (a bar of at most 2 tokens),
    with a warning: what a stray note far beyond the song's end makes (unchanged without one)."""
    starts = tokenizer.bar_starts(ids)
    edges = starts + [len(ids)]
    run = 0
    for index, (start, end) in enumerate(zip(edges, edges[1:])):
        run = run + 1 if end - start <= 2 else 0
        if run > MAX_EMPTY_BARS:
            first = index - run + 1
            logger.warning("%s: %d empty bars or more from bar %d (a note far beyond the song's end?): "
                           "the piece is cut there", path, run, first + 1)
            cut = starts[first]
            return ids[:cut] + ([tokenizer.eos_id] if ids and ids[-1] == tokenizer.eos_id else [])
    return ids
