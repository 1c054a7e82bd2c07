"""The Groove2Groove MIDI dataset layout: ``root/{train,val,test}/**/*.mid``.

The synthetic dataset of Cífka et al. (Zenodo 3958000) extracts to ``train/``, ``val/`` and ``test/``
folders of Band-in-a-Box MIDI files (their MIDI files sit in a ``fixed/`` subfolder of each split, hence
the recursive listing) named ``<song>.<style>.mid``, with tracks named "BB Bass", "BB Drums", "BB Piano",
"BB Guitar", "BB Strings" (the role rules of ``groove.roles`` map them to bass, drums and accompaniment
candidates). The offline trio corpus of ``groove.trio`` is written in the same layout.

The dataset calls its validation split ``val``; the rest of the project calls it ``valid``
(``data.SPLITS``): :func:`corpus_splits` is the one place that maps the folder names to ours.
"""

from __future__ import annotations

from pathlib import Path

from tokenization import FolderReport, midi_files

from groove.tokenizer import GrooveTokenizer

SPLITS = ("train", "val", "test")  # the dataset's split folders
SPLIT_OF_FOLDER = {"train": "train", "val": "valid", "test": "test"}  # split folder -> the project's split name


def list_split(root: str | Path, split: str) -> list[Path]:
    """The MIDI files of one split, sorted; FileNotFoundError if the split folder is missing."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r} (known: {', '.join(SPLITS)})")
    folder = Path(root) / split
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such split folder (expected root/{{{','.join(SPLITS)}}}/*.mid)")
    return midi_files(folder)


def list_splits(root: str | Path) -> dict[str, list[Path]]:
    """``{split: files}`` for the splits present under ``root`` (at least one is required)."""
    found = {split: list_split(root, split) for split in SPLITS if (Path(root) / split).is_dir()}
    if not found:
        raise FileNotFoundError(f"{root}: none of the split folders {', '.join(SPLITS)}")
    return found


def corpus_splits(root: str | Path) -> dict[str, list[Path]]:
    """``list_splits`` keyed by the project's split names (``train``, ``valid``, ``test``)."""
    return {SPLIT_OF_FOLDER[folder]: files for folder, files in list_splits(root).items()}


def style_of(path: str | Path) -> str | None:
    """The style in a Groove2Groove file name ``<song>.<style>.mid`` (None for other names)."""
    parts = Path(path).name.rsplit(".", maxsplit=2)
    return parts[1] if len(parts) == 3 else None


def encode_split(tokenizer: GrooveTokenizer, root: str | Path, split: str, progress: bool = True) -> FolderReport:
    """Token ids of every file of a split; bad files are reported in ``failed`` (with the reason) and skipped."""
    list_split(root, split)  # validates the split name and folder
    return tokenizer.encode_folder(Path(root) / split, progress=progress)
