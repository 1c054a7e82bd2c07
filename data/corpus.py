"""A tokenised corpus on disk, split into train / valid / test, and the helpers every builder shares.

Layout of a corpus folder ``root``:

* ``summary.json``: what was built (builder, settings, pieces and tokens per split, skipped files);
* ``vocab.json``: the tokenizer (``BaseTokenizer.to_dict``), so ``load_corpus`` can rebuild it
  (``tokenization.registry``, also in a fresh process);
* ``{split}.npy``: every piece of the split concatenated, int32 (memory-mapped when loaded);
* ``{split}_index.json``: one entry per piece (name, offset, length, composer, meters, source).

Splits are made per piece, never inside one: :func:`assign_splits` ranks the pieces of a group by a hash
of their names, so the split of a corpus depends only on the names (not on the order they were found).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from tokenization import BaseTokenizer, tokenizer_from_dict

logger = logging.getLogger(__name__)

SPLITS = ("train", "valid", "test")
LONG_PIECE_TOKENS = 1024  # a held-out piece at least this long can serve the extrapolation evaluation


@dataclass
class Piece:
    """One tokenised piece, before it is written to disk."""

    name: str  # unique name inside the corpus (e.g. "bach/bwv66.6"), hashed for the split
    ids: np.ndarray  # (N,) int32 token ids
    composer: str = ""  # composer (or "" when unknown)
    meters: list[str] = field(default_factory=list)  # time signatures in order of appearance, "n/d"
    source: str = ""  # where it came from (corpus path, file name)
    group: str = ""  # split stratum: pieces are split group by group (see assign_splits)


@dataclass
class PieceInfo:
    """One entry of ``{split}_index.json``."""

    name: str  # unique piece name
    offset: int  # first token in ``{split}.npy``
    length: int  # number of tokens
    composer: str  # composer or ""
    meters: list[str]  # time signatures, "n/d"
    source: str  # origin (corpus path or file)
    group: str  # split stratum


@dataclass
class Skipped:
    """A file or piece left out of the corpus, and why."""

    name: str  # file or piece name
    reason: str  # the error, in words


class TokenCorpus:
    """A corpus folder written by :func:`write_corpus`; token arrays are memory-mapped."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        if not (self.root / "summary.json").is_file():
            raise FileNotFoundError(f"{self.root}: not a corpus folder (no summary.json)")
        self.summary: dict[str, Any] = json.loads((self.root / "summary.json").read_text())
        vocab = json.loads((self.root / "vocab.json").read_text())
        self.tokenizer: BaseTokenizer = tokenizer_from_dict(vocab)  # the tokenizer the corpus was built with
        self._tokens: dict[str, np.ndarray] = {}  # split -> memory-mapped (total,) int32
        self._index: dict[str, list[PieceInfo]] = {}  # split -> pieces in file order
        for split in SPLITS:
            entries = json.loads((self.root / f"{split}_index.json").read_text())
            self._index[split] = [PieceInfo(**entry) for entry in entries]
            path = self.root / f"{split}.npy"
            self._tokens[split] = np.load(path, mmap_mode="r") if self._index[split] else np.zeros(0, np.int32)

    def info(self, split: str) -> list[PieceInfo]:
        return self._index[self._check(split)]

    def names(self, split: str) -> list[str]:
        return [p.name for p in self.info(split)]

    def pieces(self, split: str) -> list[np.ndarray]:
        """Token ids of every piece of a split: read-only int32 views of the memory-mapped array."""
        tokens = self._tokens[self._check(split)]
        return [tokens[p.offset : p.offset + p.length] for p in self._index[split]]

    def num_tokens(self, split: str) -> int:
        return sum(p.length for p in self.info(split))

    @staticmethod
    def _check(split: str) -> str:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r} (known: {', '.join(SPLITS)})")
        return split

    def __repr__(self) -> str:
        counts = ", ".join(f"{s}: {len(self._index[s])} pieces" for s in SPLITS)
        return f"TokenCorpus({str(self.root)!r}, {type(self.tokenizer).__name__}, {counts})"


def load_corpus(root: str | Path) -> TokenCorpus:
    """Open a corpus folder written by one of the ``build_*`` functions."""
    return TokenCorpus(root)


def extends(tokens: Sequence[str], base: Sequence[str]) -> bool:
    """Whether a vocabulary (`tokens`) gives every id of `base` the same token (it may add some at its end)."""
    return list(tokens[:len(base)]) == list(base)


def corpus_for(root: str | Path, tokenizer: BaseTokenizer) -> TokenCorpus:
    """The corpus in `root`, checked to be written in `tokenizer`'s ids (a ValueError naming both when a
    model would read it in another vocabulary)."""
    corpus = load_corpus(root)
    if not extends(tokenizer.vocab.tokens, corpus.tokenizer.vocab.tokens):
        raise ValueError(f"corpus {root} uses a {type(corpus.tokenizer).__name__} vocabulary that differs "
                         f"from the checkpoint's {type(tokenizer).__name__}")
    return corpus


# ---------------------------------------------------------------------------- splitting


def name_hash(name: str) -> int:
    """A stable 64-bit hash of a piece name (independent of Python's hash seed)."""
    return int.from_bytes(hashlib.sha1(name.encode("utf-8")).digest()[:8], "big")


def assign_splits(names: Sequence[str], heldout: float = 0.05, min_heldout: int = 1) -> dict[str, str]:
    """``{name: split}`` for one group of pieces, ~``heldout`` of them in valid and as many in test.

    Pieces are ranked by :func:`name_hash`; the first ones go to valid, the next to test, the rest to
    train. Valid and test each get ``max(min_heldout, round(heldout * n))`` pieces, at most
    ``(n - 1) // 2`` (so a group of one or two pieces is all train).
    """
    ranked = sorted(set(names), key=lambda n: (name_hash(n), n))
    count = len(ranked)
    held = min(max(min_heldout, round(heldout * count)), (count - 1) // 2)
    splits = ["valid"] * held + ["test"] * held + ["train"] * (count - 2 * held)
    return dict(zip(ranked, splits))


def split_pieces(
    pieces: Iterable[Piece], heldout: float = 0.05, min_heldout: dict[str, int] | None = None
) -> dict[str, list[Piece]]:
    """Split pieces group by group (``Piece.group``) with :func:`assign_splits`; name order inside a split.

    ``min_heldout`` maps a group to its minimum number of valid (and of test) pieces (default 1).
    """
    by_group: dict[str, list[Piece]] = {}
    for piece in pieces:
        by_group.setdefault(piece.group, []).append(piece)
    result: dict[str, list[Piece]] = {split: [] for split in SPLITS}
    for group in sorted(by_group):
        members = by_group[group]
        split_of = assign_splits([p.name for p in members], heldout, (min_heldout or {}).get(group, 1))
        for piece in members:
            result[split_of[piece.name]].append(piece)
    for split in SPLITS:
        result[split].sort(key=lambda p: p.name)
    return result


def length_group(num_tokens: int) -> str:
    """Split stratum by length, so that the held-out splits get long pieces too."""
    return "long" if num_tokens >= LONG_PIECE_TOKENS else "short"


# ---------------------------------------------------------------------------- pieces


def truncate_at_bar(ids: Sequence[int], tokenizer: BaseTokenizer, max_tokens: int | None) -> list[int]:
    """``ids`` cut at the last bar start that leaves room for the end token, which is appended.

    Unchanged when ``max_tokens`` is None or the piece is short enough.
    """
    ids = list(ids)
    if max_tokens is None or len(ids) <= max_tokens:
        return ids
    starts = [s for s in tokenizer.bar_starts(ids) if 0 < s <= max_tokens - 1]
    cut = starts[-1] if starts else max_tokens - 1
    return ids[:cut] + [tokenizer.eos_id]


# ---------------------------------------------------------------------------- writing


def write_corpus(
    root: str | Path,
    tokenizer: BaseTokenizer,
    by_split: dict[str, list[Piece]],
    skipped: list[Skipped],
    builder: str,
    settings: dict[str, Any],
    extra: dict[str, Any] | None = None,
) -> TokenCorpus:
    """Write the corpus folder (pieces already split, e.g. by :func:`split_pieces`) and log its summary.

    Files are written under temporary names and renamed, ``summary.json`` last: a folder with a
    summary is complete. ``settings`` (JSON) identify the build for :func:`cached_corpus`.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    unknown = set(by_split) - set(SPLITS)
    if unknown:
        raise ValueError(f"unknown splits {sorted(unknown)} (known: {', '.join(SPLITS)})")
    names = [p.name for members in by_split.values() for p in members]
    if len(set(names)) != len(names):
        raise ValueError("piece names must be unique inside a corpus")
    summary_path = root / "summary.json"
    if summary_path.exists():
        summary_path.unlink()
    _atomic_write_text(root / "vocab.json", json.dumps(tokenizer.to_dict(), indent=1))
    split_summary = {}
    for split in SPLITS:
        members = by_split.get(split, [])
        entries, offset = [], 0
        for piece in members:
            entries.append(
                PieceInfo(piece.name, offset, len(piece.ids), piece.composer, piece.meters, piece.source, piece.group)
            )
            offset += len(piece.ids)
        tokens = np.concatenate([p.ids for p in members]).astype(np.int32) if members else np.zeros(0, np.int32)
        tmp = root / f".{split}.tmp.npy"
        np.save(tmp, tokens)
        os.replace(tmp, root / f"{split}.npy")
        _atomic_write_text(root / f"{split}_index.json", json.dumps([asdict(e) for e in entries], indent=0))
        lengths = [len(p.ids) for p in members]
        split_summary[split] = {
            "pieces": len(members),
            "tokens": int(sum(lengths)),
            "long_pieces": sum(n >= LONG_PIECE_TOKENS for n in lengths),  # pieces of >= 1024 tokens
            "max_length": max(lengths, default=0),
        }
    summary = {
        "builder": builder,
        "tokenizer": type(tokenizer).__name__,
        "vocab_size": tokenizer.vocab_size,
        "settings": settings,
        "splits": split_summary,
        "skipped": [asdict(s) for s in skipped],
        **(extra or {}),
    }
    _atomic_write_text(summary_path, json.dumps(summary, indent=1))
    log_summary(summary)
    return TokenCorpus(root)


def log_summary(summary: dict[str, Any]) -> None:
    for split, stats in summary["splits"].items():
        logger.info(
            "%s: %d pieces, %d tokens (%d pieces of >= %d tokens, longest %d)",
            split, stats["pieces"], stats["tokens"], stats["long_pieces"], LONG_PIECE_TOKENS, stats["max_length"],
        )
    if summary["skipped"]:
        logger.warning("%d skipped:", len(summary["skipped"]))
        for entry in summary["skipped"]:
            logger.warning("  %s: %s", entry["name"], entry["reason"])


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def files_fingerprint(files: Iterable[Path], base: Path) -> str:
    """A hash of the files' paths (relative to ``base``), sizes and modification times."""
    digest = hashlib.sha1()
    for path in files:
        stat = path.stat()
        digest.update(f"{path.relative_to(base).as_posix()}\0{stat.st_size}\0{stat.st_mtime_ns}\n"
                      .encode("utf-8", "surrogateescape"))  # a file name need not be valid UTF-8
    return digest.hexdigest()


def folder_settings(folder: Path, files: Iterable[Path], tokenizer: BaseTokenizer, **extra: Any) -> dict[str, Any]:
    """The build settings of a corpus read from `folder`: the folder, a fingerprint of its `files`,
    the builder's own `extra` settings and the tokenizer's (what `cached_corpus` compares)."""
    return {"folder": str(folder.resolve()), "files": files_fingerprint(files, folder), **extra,
            "tokenizer": tokenizer.settings()}


CHANGES = {"folder": "data.source names another folder", "files": "files were added to, removed from or "
           "changed in data.source", "tokenizer": "the tokenizer settings differ"}  # a settings key -> why


def changed_settings(saved: dict[str, Any], current: dict[str, Any]) -> str:
    """Why a corpus built with `saved` settings is stale, in words."""
    keys = sorted(k for k in set(saved) | set(current) if saved.get(k) != current.get(k))
    return "; ".join(CHANGES.get(k, f"{k} was {saved.get(k)!r}, is now {current.get(k)!r}") for k in keys)


def cached_corpus(root: str | Path, builder: str, settings: dict[str, Any]) -> TokenCorpus | None:
    """The corpus at ``root`` if it was built by ``builder`` with exactly these settings, else None."""
    path = Path(root) / "summary.json"
    if not path.is_file():
        return None
    summary = json.loads(path.read_text())
    settings = json.loads(json.dumps(settings))
    saved = summary.get("settings") or {}
    if summary.get("builder") != builder or saved != settings:
        logger.warning("%s: rebuilding the corpus: %s", root, changed_settings(saved, settings)
                       if summary.get("builder") == builder else f"it was built by {summary.get('builder')}")
        return None
    logger.info("%s: using the cached corpus", root)
    corpus = TokenCorpus(root)
    log_summary(corpus.summary)
    return corpus


__all__ = [
    "LONG_PIECE_TOKENS",
    "SPLITS",
    "Piece",
    "PieceInfo",
    "Skipped",
    "TokenCorpus",
    "assign_splits",
    "cached_corpus",
    "files_fingerprint",
    "length_group",
    "load_corpus",
    "name_hash",
    "split_pieces",
    "truncate_at_bar",
    "write_corpus",
]
