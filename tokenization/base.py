"""The base tokenizer: vocabulary, special tokens, encode/decode, JSON round trip, folder runs.

A format (``remi.REMITokenizer``, ``groove.GrooveTokenizer``) subclasses :class:`BaseTokenizer`, names
itself (``class REMITokenizer(BaseTokenizer, token_format="remi")``, see ``tokenization.registry``) and
implements four hooks:

* ``_build_vocab_tokens()`` -> the format's tokens (``Type_Value`` strings), specials excluded;
* ``_encode_midi(midi)`` -> token strings for one ``miditoolkit.MidiFile``;
* ``_decode_tokens(tokens)`` -> ``(piece, skipped)`` where ``skipped`` counts invalid events; the piece
  is the format's own music object (a ``miditoolkit.MidiFile`` unless the format also overrides
  ``_write_midi`` and ``_piece_notes``, which read it);
* ``_constraint_state(hold_bars)`` -> a fresh grammar state;

and the contract that data/, generation/ and apps/ rely on, for every format alike:

* ``start_id``: the token an unprompted piece starts with, and ``opening()``: the token choices that
  follow it in every encoded piece (default: none fixed);
* ``bar_starts(ids)``: indices where a bar starts (training crops and prompts are cut there);
* ``bar_id``: the token that opens every bar, where the format has one (REMI's ``Bar``; groove: None);
* ``transpose(ids, semitones)``: the same piece shifted in pitch (ValueError when a pitch leaves the range);
* ``constraint_state(hold_bars=None)``: a fresh :class:`~tokenization.constraints.ConstraintState` (the
  grammar); ``hold_bars`` is a sampling policy for the formats that hold notes across bars
  (``holds_notes``), a ValueError naming the format for the others;
* ``write_midi(ids, path)``: the piece as a MIDI file, written by the format's own writer;
* ``notes(ids)``: the piece's notes in beats (:class:`~tokenization.midi_io.PieceNote`);
* format features, each a ValueError naming the format where it has none: ``chord_id(chord)`` (the
  token stating a chord, ``tokenization.chords``), ``infill_markers()`` (None where there are none) and
  ``arrange(ids, first_bar, bars)`` (fill in the middle, ``tokenization.infill``).

``decode`` returns the format's own music object (REMI: ``miditoolkit.MidiFile``, groove:
``muspy.Music``), for analyses of one format; format-neutral code writes and reads pieces through
``write_midi`` and ``notes``.

It may override ``_load(source)`` to accept more input types, ``special_tokens``, ``config()`` (the
constructor keyword arguments, saved with the vocabulary so a checkpoint can rebuild the tokenizer) and
``meters_followed(midi)``.
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Iterable, Sequence

import miditoolkit
from tqdm.auto import tqdm

from tokenization import registry
from tokenization.chords import Chord
from tokenization.constraints import ConstraintState
from tokenization.errors import TokenizationError
from tokenization.infill import Arrangement
from tokenization.midi_io import PieceNote, declared_meters, load_midi, midi_files, midi_notes, source_name

logger = logging.getLogger(__name__)


class Vocab:
    """A bijection between token strings and ids (ids are positions in ``tokens``)."""

    def __init__(self, tokens: Sequence[str]):
        self.tokens: list[str] = list(tokens)
        self.ids: dict[str, int] = {tok: i for i, tok in enumerate(self.tokens)}
        if len(self.ids) != len(self.tokens):
            dupes = sorted({t for t in self.tokens if self.tokens.count(t) > 1})
            raise ValueError(f"duplicate tokens in vocabulary: {dupes[:5]}")

    def __len__(self) -> int:
        return len(self.tokens)

    def __contains__(self, token: str) -> bool:
        return token in self.ids

    def __getitem__(self, token: str) -> int:
        try:
            return self.ids[token]
        except KeyError:
            raise KeyError(f"token {token!r} is not in the vocabulary") from None

    def token(self, idx: int) -> str:
        if not 0 <= idx < len(self.tokens):
            raise IndexError(f"token id {idx} outside the vocabulary (size {len(self.tokens)})")
        return self.tokens[idx]

    def by_type(self, token_type: str) -> list[int]:
        """Ids of all tokens ``<token_type>_<value>``."""
        prefix = token_type + "_"
        return [i for i, t in enumerate(self.tokens) if t.startswith(prefix)]


@dataclass
class DecodeReport:
    """What ``decode`` made of an id sequence."""

    music: Any  # the format's own decoded piece (miditoolkit.MidiFile for REMI, muspy.Music for groove)
    skipped: int  # invalid or out-of-vocabulary events that were skipped


@dataclass
class FolderReport:
    """Result of tokenising every MIDI file below a folder."""

    encoded: dict[Path, list[int]] = field(default_factory=dict)  # file -> token ids
    failed: dict[Path, str] = field(default_factory=dict)  # file -> reason it was skipped


class BaseTokenizer(ABC):
    """Owns the vocabulary and the encode/decode plumbing; subclasses implement the format."""

    special_tokens: ClassVar[tuple[str, ...]] = ("PAD_None", "EOS_None")
    holds_notes: ClassVar[bool] = False  # notes may sound across bars until closed: a hold limit applies
    expressive_types: ClassVar[tuple[str, ...]] = ()  # token-name prefixes a restated passage may vary (recall)
    position_types: ClassVar[tuple[str, ...]] = ()  # token-name prefixes that mark the place in a bar (recall)
    bar_id: int | None = None  # the token that opens every bar (None: the format's bars are read from time)

    def __init_subclass__(cls, token_format: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        registry.register(cls, token_format)

    def __init__(self) -> None:
        self.vocab = Vocab(list(self.special_tokens) + list(self._build_vocab_tokens()))

    # ----------------------------------------------------------------- hooks
    @abstractmethod
    def _build_vocab_tokens(self) -> list[str]:
        """The format's tokens, special tokens excluded."""

    @abstractmethod
    def _encode_midi(self, midi: miditoolkit.MidiFile) -> list[str]:
        """Token strings for one MIDI file (raise TokenizationError with a reason on bad content)."""

    @abstractmethod
    def _decode_tokens(self, tokens: list[str]) -> tuple[Any, int]:
        """``(piece, skipped)`` for a list of token strings; never raises on invalid sequences."""

    @abstractmethod
    def _constraint_state(self, hold_bars: int | None) -> ConstraintState:
        """A fresh grammar state; ``hold_bars`` (> 0, or None: no limit) only for a format that ``holds_notes``."""

    def _write_midi(self, piece: Any, path: Path) -> None:
        """Write a piece ``_decode_tokens`` made as a MIDI file (here: a ``miditoolkit.MidiFile``)."""
        piece.dump(str(path))

    def _piece_notes(self, piece: Any) -> list[PieceNote]:
        """The notes of a piece ``_decode_tokens`` made, in beats (here: a ``miditoolkit.MidiFile``'s)."""
        return midi_notes(piece)

    # -------------------------------------------------------------- contract
    @property
    @abstractmethod
    def start_id(self) -> int:
        """The token an unprompted piece starts with."""

    def opening(self) -> list[list[int]]:
        """What every piece the format encodes opens with after ``start_id``: per position, the ids one of
        which comes there (the format's own choices); [] where a piece's opening is not fixed."""
        return []

    @abstractmethod
    def bar_starts(self, ids: Sequence[int]) -> list[int]:
        """Indices of the tokens where a bar starts (where training crops and prompts are cut)."""

    @abstractmethod
    def transpose(self, ids: Sequence[int], semitones: int) -> list[int]:
        """The ids of the piece shifted by ``semitones``; ValueError if a pitch would leave the range."""

    def constraint_state(self, hold_bars: int | None = None) -> ConstraintState:
        """A fresh grammar state (before the first token) for constrained sampling and decoding.

        ``hold_bars`` is a sampling policy (``allowed`` only; ``accepts`` is unchanged): close any note
        held that many bars (None or 0: no limit). A ValueError naming the format when it does not hold
        notes across bars (``holds_notes``)."""
        if hold_bars and not self.holds_notes:
            raise ValueError(f"a hold limit applies to groove models; this one uses {type(self).__name__}")
        return self._constraint_state(hold_bars or None)

    def describe_tracks(self, midi: miditoolkit.MidiFile) -> list[tuple[str, bool]]:
        """How the format reads a file's tracks, for the user: (line, is_a_warning) pairs; the
        multi-track formats say which track plays which part (default: nothing to say)."""
        return []

    def time_origin(self, source: Any) -> float | None:
        """Where, in beats from the file's tick 0, the encoded piece's time 0 falls (the decoded
        piece's beat b is the file's beat origin + b); None when the format cannot place its pieces
        back into the file they came from (then only the decoded piece can be written)."""
        return None

    def meters_followed(self, midi: miditoolkit.MidiFile) -> list[str]:
        """The meters ("n/d") the last ``encode`` of ``midi`` wrote bars in; here the file's time signatures."""
        return declared_meters(midi)

    def _load(self, source: Any) -> miditoolkit.MidiFile:
        return load_midi(source)

    def config(self) -> dict[str, Any]:
        """Constructor keyword arguments that rebuild this tokenizer."""
        return {}

    def settings(self) -> dict[str, Any]:
        """Class name and constructor arguments: what identifies the tokenizer in a corpus's build settings."""
        return {"name": type(self).__name__, "config": self.config()}

    # ------------------------------------------------------------ properties
    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def __len__(self) -> int:
        return len(self.vocab)

    @property
    def pad_id(self) -> int:
        return self.vocab[self.special_tokens[0]]

    @property
    def eos_id(self) -> int:
        return self.vocab[self.special_tokens[-1]]

    # -------------------------------------------------------- encode/decode
    def encode(self, source: Any) -> list[int]:
        """Token ids of a piece given as a path, bytes or an in-memory MIDI object."""
        name = source_name(source)
        midi = self._load(source)
        if not any(inst.notes for inst in midi.instruments):
            raise TokenizationError(name, "no notes")
        try:
            tokens = self._encode_midi(midi)
        except TokenizationError as err:
            if err.source == name:
                raise
            raise TokenizationError(name, err.reason) from err
        return self.strings_to_ids(tokens)

    def decode(self, ids: Iterable[int]) -> Any:
        """The piece an id sequence describes; invalid events are skipped (see ``decode_with_report``)."""
        return self.decode_with_report(ids).music

    def write_midi(self, ids: Iterable[int], path: str | Path) -> None:
        """Write the piece an id sequence describes as a MIDI file (invalid events skipped, as ``decode``)."""
        self._write_midi(self.decode(ids), Path(path))

    def notes(self, ids: Iterable[int]) -> list[PieceNote]:
        """The notes of the piece an id sequence describes, times in beats from its start."""
        return self._piece_notes(self.decode(ids))

    def decode_with_report(self, ids: Iterable[int]) -> DecodeReport:
        strings, unknown = [], 0
        for idx in ids:
            idx = int(idx)
            if 0 <= idx < len(self.vocab):
                strings.append(self.vocab.tokens[idx])
            else:
                unknown += 1
        music, skipped = self._decode_tokens(strings)
        if unknown + skipped:
            logger.debug("decode skipped %d invalid events", unknown + skipped)
        return DecodeReport(music=music, skipped=unknown + skipped)

    def tokens_to_strings(self, ids: Iterable[int]) -> list[str]:
        return [self.vocab.token(int(i)) for i in ids]

    def strings_to_ids(self, tokens: Iterable[str]) -> list[int]:
        tokens = list(tokens)
        ids = self.vocab.ids
        try:
            return [ids[t] for t in tokens]
        except KeyError:
            return [self.vocab[t] for t in tokens]  # re-run for the error message naming the token

    # ------------------------------------------------------ format features
    def chord_id(self, chord: Chord) -> int:
        """The id of the token stating ``chord`` ((root, quality) or None: no chord, ``tokenization.chords``);
        a ValueError naming the format when it writes no chords."""
        raise ValueError(f"chords need a REMI model with chord tokens; this one uses {type(self).__name__}")

    def infill_markers(self) -> tuple[int, int, int] | None:
        """Ids of the fill-in-the-middle markers (where the middle was, where it starts, its end); None when
        the vocabulary has none (``tokenization.infill``)."""
        return None

    def arrange(self, ids: Sequence[int], first_bar: int, bars: int, lead_bars: int = 0) -> Arrangement:
        """``ids`` cut around bars ``first_bar .. first_bar + bars - 1`` (0-based) for fill in the middle,
        up to ``lead_bars`` bars before them read right before the middle (``Arrangement.lead``);
        a ValueError naming the format when it cannot rewrite bars that way, or when the bars are not all
        in the piece."""
        raise ValueError(f"fill in the middle needs a REMI model; this one uses {type(self).__name__}")

    # ---------------------------------------------------------- persistence
    def to_dict(self) -> dict[str, Any]:
        return {"tokenizer": type(self).__name__, "config": self.config(), "vocab": self.vocab.tokens}

    def save_vocab(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1))

    @staticmethod
    def from_dict(data: dict[str, Any]) -> "BaseTokenizer":
        """Rebuild a tokenizer saved by ``to_dict`` (``tokenization.registry.tokenizer_from_dict``)."""
        return registry.tokenizer_from_dict(data)

    @staticmethod
    def load(path: str | Path) -> "BaseTokenizer":
        return registry.load_tokenizer(path)

    # -------------------------------------------------------------- folders
    def encode_folder(self, folder: str | Path, progress: bool = True) -> FolderReport:
        """Encode every MIDI file below ``folder``; bad files are reported and skipped."""
        root = Path(folder)
        if not root.is_dir():
            raise TokenizationError(str(root), "not a directory")
        files = midi_files(root)
        report = FolderReport()
        for path in tqdm(files, desc=f"tokenising {root.name}", unit="file", disable=not progress):
            try:
                report.encoded[path] = self.encode(path)
            except TokenizationError as err:
                report.failed[path] = err.reason
                logger.warning("skipped %s", err)
        if report.failed:
            logger.warning("%d of %d files skipped", len(report.failed), len(files))
        return report
