"""Shared machinery of the project's symbolic-music tokenizers (REMI and Groove2Groove).

A format subclasses :class:`BaseTokenizer` and implements three hooks; the base class owns the
vocabulary, the special tokens, ``encode`` / ``decode``, JSON (de)serialisation and folder runs.
"""

from tokenization.base import BaseTokenizer, DecodeReport, FolderReport, Vocab
from tokenization.errors import TokenizationError
from tokenization.midi_io import load_midi, source_name

__all__ = [
    "BaseTokenizer",
    "DecodeReport",
    "FolderReport",
    "TokenizationError",
    "Vocab",
    "load_midi",
    "source_name",
]
