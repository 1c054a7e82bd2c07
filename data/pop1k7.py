"""Pop1K7 (the paper's pop-piano dataset) as distributed: pre-tokenised REMI events, one pickle per song.

Each file holds ``(bar_start_indices, events)`` where an event is a dict ``{"name": ..., "value": ...}``
(``Bar``/None, ``Beat``/0..15, ``Chord``/"C#_m7", ``Tempo``/bpm, ``Note_Pitch``/``Note_Velocity``/
``Note_Duration``/int, ``EOS``/None) or, in older dumps, an instance of a small ``Event`` class with
``name`` and ``value`` attributes. ``name_value`` is our REMI token string; tempi, velocities and
durations off our grid snap to the nearest level (halfway: upwards, like the REMI encoder).

Pickles can run arbitrary code when loaded, so they are read with :class:`RestrictedUnpickler`: plain
containers, numbers and strings only, any class named ``Event`` becomes the local :class:`PickledEvent`
(nothing is imported), and every other global is refused with :class:`UnsafePickleError`.
"""

from __future__ import annotations

import io
import logging
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from data.corpus import (
    Piece,
    Skipped,
    TokenCorpus,
    cached_corpus,
    files_fingerprint,
    length_group,
    split_pieces,
    write_corpus,
)
from tokenization import BaseTokenizer, TokenizationError

logger = logging.getLogger(__name__)

BUILDER = "pop1k7"
SNAPPED_TYPES = ("Tempo", "Note_Velocity", "Note_Duration")  # numeric events snapped to our levels


class UnsafePickleError(pickle.UnpicklingError):
    """A pickle asked for a class or function we do not load."""


@dataclass
class PickledEvent:
    """Local stand-in for a pickled ``Event`` object (Pop Music Transformer's ``utils.Event``)."""

    name: str = ""  # event type, e.g. "Note_Pitch"
    value: Any = None  # event value, e.g. 60
    time: Any = None  # onset in ticks (unused here)
    text: Any = None  # free text (unused here)


def _reconstruct(cls: type, base: type, state: Any) -> PickledEvent:
    """``copyreg._reconstructor`` (protocols 0 and 1), for PickledEvent only."""
    if cls is not PickledEvent or base is not object or state is not None:
        raise UnsafePickleError("copyreg._reconstructor is only allowed for Event objects")
    return PickledEvent.__new__(PickledEvent)


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that resolves no globals except the ``Event`` stand-in (see the module docstring)."""

    def find_class(self, module: str, name: str) -> Any:
        if name == "Event":
            return PickledEvent
        if module in ("copyreg", "copy_reg") and name == "_reconstructor":  # protocols 0-1 (2.x name too)
            return _reconstruct
        if module in ("builtins", "__builtin__") and name == "object":
            return object
        raise UnsafePickleError(
            f"refusing to load global {module}.{name}: Pop1K7 pickles hold only lists, dicts, numbers, "
            "strings and Event objects"
        )


def restricted_load(data: bytes) -> Any:
    """Unpickle ``data`` with :class:`RestrictedUnpickler`."""
    return RestrictedUnpickler(io.BytesIO(data)).load()


def read_song(path: str | Path) -> list[tuple[str, Any]]:
    """The ``(name, value)`` events of one Pop1K7 pickle; TokenizationError if it is unsafe or malformed."""
    path = Path(path)
    try:
        content = restricted_load(path.read_bytes())
    except UnsafePickleError as err:
        raise TokenizationError(str(path), f"unsafe pickle ({err})") from err
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError) as err:
        raise TokenizationError(str(path), f"corrupt pickle ({type(err).__name__}: {err})") from err
    if not (isinstance(content, (tuple, list)) and len(content) == 2 and isinstance(content[1], list)):
        raise TokenizationError(str(path), "expected a pair (bar start indices, list of events)")
    bars, raw_events = content
    if not isinstance(bars, (list, tuple)) or not all(isinstance(b, int) for b in bars):
        raise TokenizationError(str(path), "bar start indices are not a list of integers")
    events = []
    for event in raw_events:
        if isinstance(event, dict) and "name" in event:
            events.append((event["name"], event.get("value")))
        elif isinstance(event, PickledEvent):
            events.append((event.name, event.value))
        else:
            raise TokenizationError(str(path), f"unexpected event {event!r}")
    return events


def events_to_ids(events: list[tuple[str, Any]], tokenizer: BaseTokenizer, source: str) -> list[int]:
    """Our REMI ids for Pop1K7 events (see the module docstring); TokenizationError on an unknown event.

    A trailing empty bar (``Bar`` right before ``EOS``) is dropped, ``EOS`` is appended when missing and,
    when the tokenizer has TimeSig tokens, ``TimeSig_4/4`` follows the first ``Bar`` (as our encoder
    writes it for a 4/4 file).
    """
    if not events:
        raise TokenizationError(source, "no events")
    vocab = tokenizer.vocab
    tokens = [map_event(name, value, tokenizer, source) for name, value in events]
    if tokens[-1:] != ["EOS_None"]:
        tokens.append("EOS_None")
    if tokens[-2:] == ["Bar_None", "EOS_None"]:
        tokens = tokens[:-2] + ["EOS_None"]
    if "TimeSig_4/4" in vocab and "Bar_None" in tokens:
        first = tokens.index("Bar_None")
        tokens.insert(first + 1, "TimeSig_4/4")
    return tokenizer.strings_to_ids(tokens)


def map_event(name: str, value: Any, tokenizer: BaseTokenizer, source: str) -> str:
    """One event as a token string of the tokenizer's vocabulary."""
    token = f"{name}_{value}"
    if token in tokenizer.vocab:
        return token
    if name in SNAPPED_TYPES and isinstance(value, (int, float)) and not isinstance(value, bool):
        prefix = name + "_"
        levels = [int(t[len(prefix) :]) for t in tokenizer.vocab.tokens if t.startswith(prefix)]
        if levels:
            return f"{prefix}{min(levels, key=lambda level: (abs(level - value), -level))}"  # ties go up
    raise TokenizationError(source, f"event {token!r} has no token in the vocabulary")


def build_pop1k7_corpus(
    folder: str | Path,
    root: str | Path,
    tokenizer: BaseTokenizer | None = None,
    heldout: float = 0.05,
    progress: bool = True,
) -> TokenCorpus:
    """Read every ``*.pkl`` below ``folder`` into a corpus at ``root`` (cached; bad files reported and skipped).

    The default tokenizer is the paper's vocabulary, ``REMITokenizer(time_signatures=False)``.
    Songs are split by a hash of their file names (see ``data.corpus.assign_splits``).
    """
    if tokenizer is None:
        from remi import REMITokenizer

        tokenizer = REMITokenizer(time_signatures=False)
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such folder")
    files = sorted(p for p in folder.rglob("*.pkl") if p.is_file())
    settings = {
        "folder": str(folder.resolve()),
        "files": files_fingerprint(files, folder),
        "heldout": heldout,
        "tokenizer": {"name": type(tokenizer).__name__, "config": tokenizer.config()},
    }
    cached = cached_corpus(root, BUILDER, settings)
    if cached is not None:
        return cached
    pieces, skipped = [], []
    for path in tqdm(files, desc="Pop1K7", unit="song", disable=not progress):
        name = path.relative_to(folder).with_suffix("").as_posix()
        try:
            ids = events_to_ids(read_song(path), tokenizer, str(path))
        except TokenizationError as err:
            skipped.append(Skipped(name, err.reason))
            logger.warning("skipped %s", err)
            continue
        pieces.append(Piece(name, np.asarray(ids, dtype=np.int32), "", ["4/4"], path.name, length_group(len(ids))))
    if not pieces:
        raise ValueError(f"{folder}: no readable Pop1K7 pickle among {len(files)} files")
    return write_corpus(root, tokenizer, split_pieces(pieces, heldout), skipped, BUILDER, settings)
