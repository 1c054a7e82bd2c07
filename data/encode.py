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
    for name, path in tqdm(named_paths, desc=desc, unit="file", disable=not progress):
        try:
            midi = load_midi(path)
            ids = truncate_at_bar(tokenizer.encode(midi), tokenizer, max_piece_tokens)
        except TokenizationError as err:
            skipped.append(Skipped(name, err.reason))
            logger.warning("skipped %s: %s", path, err.reason)
            continue
        ids_array = np.asarray(ids, dtype=np.int32)
        encoded.append(EncodedFile(name, path, ids_array, declared_meters(midi), tokenizer.meters_followed(midi)))
    return encoded, skipped
