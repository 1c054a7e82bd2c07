"""Corpora from MIDI files on disk: any folder of MIDI files (REMI), and Groove2Groove (GrooveTokenizer).

* :func:`build_midi_folder_corpus`: every MIDI file below a folder, split by a hash of its path
  (long and short pieces split separately, so valid and test get long pieces too);
* :func:`build_groove_corpus`: the Groove2Groove layout ``folder/{train,val,test}/**/*.mid`` keeps its own
  splits (``val`` becomes ``valid``, see ``groove.dataset.corpus_splits``); without a folder, the offline
  trio corpus of ``groove.trio`` is built into ``root/midi`` first.

Bad files are reported (``summary.json``, log) and skipped; corpora are cached like the default one.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Iterable

from data.corpus import (
    Piece,
    Skipped,
    TokenCorpus,
    cached_corpus,
    files_fingerprint,
    folder_settings,
    length_group,
    split_pieces,
    write_corpus,
)
from data.encode import encode_files

logger = logging.getLogger(__name__)
from tokenization import BaseTokenizer, midi_files
from tokenization.midi_io import unusable_midi_paths


def tokenize_files(
    files: Iterable[Path],
    base: Path,
    tokenizer: BaseTokenizer,
    max_piece_tokens: int | None = None,
    progress: bool = True,
    desc: str = "tokenising",
) -> tuple[list[Piece], list[Skipped]]:
    """Tokenise MIDI files; pieces are named by their path relative to ``base`` without the suffix.

    A piece's meters are those its bars follow (the meter policy's choice, see ``remi.meter``).
    """
    named = [(path.relative_to(base).with_suffix("").as_posix(), path) for path in files]
    encoded, skipped = encode_files(named, tokenizer, max_piece_tokens, progress, desc)
    pieces = [Piece(e.name, e.ids, "", e.meters_followed, e.path.name, length_group(len(e.ids))) for e in encoded]
    return pieces, skipped


def build_midi_folder_corpus(
    folder: str | Path,
    root: str | Path,
    tokenizer: BaseTokenizer | None = None,
    heldout: float = 0.05,
    max_piece_tokens: int | None = None,
    progress: bool = True,
) -> TokenCorpus:
    """Tokenise every MIDI file below ``folder`` (REMI by default) into a corpus at ``root``."""
    if tokenizer is None:
        from remi import REMITokenizer

        tokenizer = REMITokenizer()
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such folder")
    files = midi_files(folder)
    settings = folder_settings(folder, files, tokenizer, heldout=heldout, max_piece_tokens=max_piece_tokens)
    cached = cached_corpus(root, "midi_folder", settings)
    if cached is not None:
        return cached
    pieces, skipped = tokenize_files(files, folder, tokenizer, max_piece_tokens, progress, f"tokenising {folder.name}")
    for path, reason in unusable_midi_paths(folder):
        skipped.append(Skipped(ascii(path.relative_to(folder).as_posix())[1:-1], reason))
        logger.warning("skipped %s: %s", ascii(str(path))[1:-1], reason)
    if not pieces:
        raise ValueError(f"{folder}: none of the {len(files)} MIDI files could be tokenised")
    return write_corpus(root, tokenizer, split_pieces(pieces, heldout), skipped, "midi_folder", settings)


def build_groove_corpus(
    folder: str | Path | None,
    root: str | Path,
    tokenizer: BaseTokenizer | None = None,
    trio_pieces: int = 40,
    trio_seed: int = 0,
    progress: bool = True,
) -> TokenCorpus:
    """A Groove2Groove corpus at ``root`` (GrooveTokenizer by default), keeping the dataset's splits.

    ``folder`` is a Groove2Groove-style folder (``train/``, ``val/``, ``test/``); with ``folder=None`` the
    offline trio corpus (``groove.trio.build_trio_corpus(root/midi, trio_pieces, trio_seed)``) is built
    first, once.
    """
    from groove import GrooveTokenizer
    from groove.dataset import corpus_splits

    if tokenizer is None:
        tokenizer = GrooveTokenizer()
    root = Path(root)
    if folder is None:
        folder = root / "midi"
        source = {"trio_pieces": trio_pieces, "trio_seed": trio_seed}
        _ensure_trio(folder, trio_pieces, trio_seed, progress)
    else:
        folder = Path(folder)
        source = {"folder": str(folder.resolve())}
    files_by_split = corpus_splits(folder)
    settings = {
        **source,
        "files": files_fingerprint([p for files in files_by_split.values() for p in files], folder),
        "tokenizer": tokenizer.settings(),
    }
    cached = cached_corpus(root, "groove", settings)
    if cached is not None:
        return cached
    by_split: dict[str, list[Piece]] = {}
    skipped: list[Skipped] = []
    for split, files in files_by_split.items():
        pieces, failed = tokenize_files(files, folder, tokenizer, None, progress, f"tokenising {split}")
        by_split[split] = sorted(pieces, key=lambda p: p.name)
        skipped += failed
    if not any(by_split.values()):
        raise ValueError(f"{folder}: no MIDI file could be tokenised")
    return write_corpus(root, tokenizer, by_split, skipped, "groove", settings)


def _ensure_trio(folder: Path, pieces: int, seed: int, progress: bool) -> None:
    """Build the trio corpus into ``folder`` unless it is already there with these settings."""
    from groove.trio import build_trio_corpus

    description = folder / "corpus.json"
    if description.is_file():
        written = json.loads(description.read_text())
        if written.get("seed") == seed and len(written.get("pieces", [])) == pieces:
            return
    build_trio_corpus(folder, n_pieces=pieces, seed=seed, progress=progress)
