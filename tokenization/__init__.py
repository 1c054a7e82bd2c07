"""Shared machinery of the project's symbolic-music tokenizers (REMI and Groove2Groove).

A format subclasses :class:`BaseTokenizer` (naming its token format, see ``tokenization.registry``) and
implements its hooks and the format contract (``start_id``, ``bar_starts``, ``transpose``,
``constraint_state`` returning a :class:`ConstraintState`); the base class owns the vocabulary, the
special tokens, ``encode`` / ``decode``, ``write_midi`` / ``notes``, the format features (chords,
fill in the middle: ``tokenization.chords``, ``tokenization.infill``), JSON (de)serialisation and
folder runs.
"""

from tokenization.base import BaseTokenizer, DecodeReport, FolderReport, Vocab
from tokenization.constraints import ConstraintState
from tokenization.errors import TokenizationError
from tokenization.midi_io import (MIDI_SUFFIXES, PieceNote, declared_meters, is_midi_path, load_midi, midi_files,
                                  midi_notes, source_name)
from tokenization.registry import format_class, format_of, load_tokenizer, token_formats, tokenizer_from_dict

__all__ = [
    "MIDI_SUFFIXES",
    "BaseTokenizer",
    "ConstraintState",
    "DecodeReport",
    "FolderReport",
    "PieceNote",
    "TokenizationError",
    "Vocab",
    "declared_meters",
    "format_class",
    "format_of",
    "is_midi_path",
    "load_midi",
    "load_tokenizer",
    "midi_files",
    "midi_notes",
    "source_name",
    "token_formats",
    "tokenizer_from_dict",
]
