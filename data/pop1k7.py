"""Pop1K7 (the paper's pop-piano dataset) read from the release folder as published, no conversion step.

The AILabs.tw release (1,747 songs in ``src_001`` .. ``src_004``, song numbers unique across them)::

    midi_analyzed/src_00X/N.mid                        # the MIDI (not read here)
    representations/uncond/remi/ailab17k_from-scratch_remi/
        dictionary.pkl                                 # (event2idx, idx2event)
        events/src_00X/N.pkl                           # REMI events of song N
        words/src_00X/N.npy                            # the same events as int64 ids under dictionary.pkl

:func:`locate_release` accepts the release root, the ``ailab17k_from-scratch_remi`` folder (or any folder
holding ``dictionary.pkl`` with ``events/`` and/or ``words/``, or pickles / ``.npy`` files beside it) and a
flat folder of event pickles. An event pickle is either the release's **plain list** of events or the
paper's ``(bar_positions, events)`` pair; an event is a dict ``{"name": ..., "value": ...}`` (``Bar``/None,
``Beat``/0..15, ``Chord``/"A_m7", ``Tempo``/numpy.int64, ``Note_Pitch``/int, ``Note_Velocity``/numpy.int64,
``Note_Duration``/ticks at 480 per beat, ``EOS``/None) or, in older dumps, an ``Event`` object. Pickles
are read with ``data.safe_pickle.RestrictedUnpickler`` (no code runs; numpy scalars rebuilt safely).

Mapping to our REMI vocabulary: an event ``name``/``value`` is the token ``name_value``; a tempo, velocity
or duration off our grid snaps to the nearest level (halfway: upwards, like the REMI encoder) and is
counted in :class:`RemapReport` (the corpus summary lists every remap). A trailing empty bar is dropped,
``EOS_None`` appended when missing and, with TimeSig tokens, ``TimeSig_4/4`` follows the first ``Bar``.
Events and words go through the same mapping, so a song's ids are the same from either; when a song has
both, the builder checks that they agree and reports the songs where they do not.
"""

from __future__ import annotations

import logging
import pickle
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from data.corpus import (
    Piece,
    Skipped,
    TokenCorpus,
    cached_corpus,
    folder_settings,
    length_group,
    split_pieces,
    write_corpus,
)
from data.safe_pickle import PickledEvent, RestrictedUnpickler, UnsafePickleError, plain_value, restricted_load
from tokenization import BaseTokenizer, TokenizationError

logger = logging.getLogger(__name__)

BUILDER = "pop1k7"
RELEASE_REMI = Path("representations/uncond/remi/ailab17k_from-scratch_remi")  # below the release root
DICTIONARY = "dictionary.pkl"
SNAPPED_TYPES = ("Tempo", "Note_Velocity", "Note_Duration")  # numeric events snapped to our levels
PICKLE_ERRORS = (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError)


# ---------------------------------------------------------------------------- the release folder
@dataclass
class Release:
    """Where the songs of a Pop1K7 folder are (see :func:`locate_release`)."""

    layout: str  # "release root", "remi folder" or "flat pickles"
    events: dict[str, Path] = field(default_factory=dict)  # song name -> event pickle
    words: dict[str, Path] = field(default_factory=dict)  # song name -> words .npy
    dictionary: Path | None = None  # dictionary.pkl (needed to read words)

    def names(self) -> list[str]:
        return sorted(self.events.keys() | self.words.keys())

    def files(self) -> list[Path]:
        paths = [*self.events.values(), *self.words.values(), *([self.dictionary] if self.dictionary else [])]
        return sorted(paths)


def locate_release(folder: str | Path) -> Release:
    """The songs of a Pop1K7 folder: release root, ``ailab17k_from-scratch_remi`` folder, or flat pickles."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such folder")
    if (folder / DICTIONARY).is_file() or (folder / "events").is_dir() or (folder / "words").is_dir():
        return _remi_folder(folder, "remi folder")
    if (folder / RELEASE_REMI).is_dir():
        return _remi_folder(folder / RELEASE_REMI, "release root")
    dictionaries = sorted(p.parent for p in folder.rglob(DICTIONARY) if p.is_file())
    if len(dictionaries) > 1:
        listed = ", ".join(str(p.relative_to(folder)) for p in dictionaries[:4])
        raise ValueError(f"{folder}: several REMI folders ({listed}); point data.source at one of them")
    if dictionaries:
        return _remi_folder(dictionaries[0], "release root")
    return Release("flat pickles", events=_songs(folder, ".pkl"))


def _remi_folder(folder: Path, layout: str) -> Release:
    """A folder with ``dictionary.pkl`` and ``events/`` / ``words/`` (or the files beside it)."""
    events_dir = folder / "events" if (folder / "events").is_dir() else folder
    words_dir = folder / "words" if (folder / "words").is_dir() else folder
    dictionary = folder / DICTIONARY
    release = Release(layout, _songs(events_dir, ".pkl"), _songs(words_dir, ".npy"))
    release.dictionary = dictionary if dictionary.is_file() else None
    if release.words and release.dictionary is None:
        raise FileNotFoundError(f"{folder}: words (.npy) need {DICTIONARY}, which is not there")
    return release


def _songs(folder: Path, suffix: str) -> dict[str, Path]:
    """``{name: path}`` for the files below ``folder``, named by their path without suffix."""
    files = sorted(p for p in folder.rglob(f"*{suffix}") if p.is_file() and p.name != DICTIONARY)
    return {p.relative_to(folder).with_suffix("").as_posix(): p for p in files}


# ---------------------------------------------------------------------------- reading one song
def read_song(path: str | Path) -> list[tuple[str, Any]]:
    """The ``(name, value)`` events of one pickle (either shape); TokenizationError if unsafe or malformed.

    numpy scalar values come back as Python numbers.
    """
    path = Path(path)
    content = _load_pickle(path)
    if _is_event_list(content):
        raw_events = content
    elif isinstance(content, (tuple, list)) and len(content) == 2 and _is_event_list(content[1]):
        bars = content[0]
        if not isinstance(bars, (list, tuple)) or not all(isinstance(plain_value(b), int) for b in bars):
            raise TokenizationError(str(path), "bar positions are not a list of integers")
        raw_events = content[1]
    else:
        raise TokenizationError(
            str(path), "expected a list of events or a pair (bar positions, list of events)"
        )
    events = []
    for event in raw_events:
        if isinstance(event, dict):
            events.append((event["name"], plain_value(event.get("value"))))
        else:
            events.append((event.name, plain_value(event.value)))
    return events


def _is_event_list(content: Any) -> bool:
    return isinstance(content, list) and all(
        (isinstance(e, dict) and isinstance(e.get("name"), str)) or isinstance(e, PickledEvent) for e in content
    )


def _load_pickle(path: Path) -> Any:
    try:
        return restricted_load(path.read_bytes())
    except UnsafePickleError as err:
        raise TokenizationError(str(path), f"unsafe pickle ({err})") from err
    except PICKLE_ERRORS as err:
        raise TokenizationError(str(path), f"corrupt pickle ({type(err).__name__}: {err})") from err


def read_dictionary(path: str | Path) -> dict[int, str]:
    """``idx2event`` of a release ``dictionary.pkl`` (a pair ``(event2idx, idx2event)``)."""
    content = _load_pickle(Path(path))
    if not (isinstance(content, (tuple, list)) and len(content) == 2 and isinstance(content[1], dict)):
        raise TokenizationError(str(path), "expected a pair (event2idx, idx2event)")
    idx2event = {int(plain_value(k)): v for k, v in content[1].items()}
    if not all(isinstance(v, str) for v in idx2event.values()):
        raise TokenizationError(str(path), "idx2event must map ids to event strings")
    return idx2event


def read_words(path: str | Path, idx2event: dict[int, str]) -> list[str]:
    """The event strings of a words ``.npy`` file (int ids under ``dictionary.pkl``)."""
    try:
        words = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise TokenizationError(str(path), f"unreadable .npy ({err})") from err
    if words.ndim != 1 or words.dtype.kind not in "iu":
        raise TokenizationError(str(path), f"expected a 1-D integer array, got {words.dtype} {words.shape}")
    unknown = sorted(set(words.tolist()) - idx2event.keys())
    if unknown:
        raise TokenizationError(str(path), f"ids {unknown[:5]} are not in {DICTIONARY}")
    return [idx2event[i] for i in words.tolist()]


# ---------------------------------------------------------------------------- mapping to our vocabulary
@dataclass
class RemapReport:
    """Events that had no token of their own in our vocabulary and were snapped to the nearest level."""

    remapped: Counter = field(default_factory=Counter)  # (event token, our token) -> count
    songs: int = 0  # songs with at least one remapped event

    def as_dict(self) -> dict[str, Any]:
        pairs = sorted(self.remapped.items(), key=lambda kv: (-kv[1], kv[0]))
        return {
            "events": int(sum(self.remapped.values())),
            "songs": self.songs,
            "by_event": {f"{a} -> {b}": n for (a, b), n in pairs},
        }


def map_token(token: str, tokenizer: BaseTokenizer, source: str) -> str:
    """One Pop1K7 event string (``Tempo_121``) as a token of the tokenizer's vocabulary."""
    if token in tokenizer.vocab:
        return token
    for name in SNAPPED_TYPES:
        prefix = name + "_"
        if token.startswith(prefix):
            try:
                value = float(token[len(prefix) :])
            except ValueError:
                break
            levels = [int(t[len(prefix) :]) for t in tokenizer.vocab.tokens if t.startswith(prefix)]
            if levels:
                return f"{prefix}{min(levels, key=lambda level: (abs(level - value), -level))}"  # ties go up
    raise TokenizationError(source, f"event {token!r} has no token in the vocabulary")


def map_event(name: str, value: Any, tokenizer: BaseTokenizer, source: str) -> str:
    """One ``name``/``value`` event as a token of the tokenizer's vocabulary."""
    return map_token(f"{name}_{plain_value(value)}", tokenizer, source)


def strings_to_ids(
    events: list[str], tokenizer: BaseTokenizer, source: str, report: RemapReport | None = None
) -> list[int]:
    """Our REMI ids for a song's event strings (see the module docstring); TokenizationError if unmappable."""
    if not events:
        raise TokenizationError(source, "no events")
    tokens = [map_token(event, tokenizer, source) for event in events]
    if report is not None:
        changed = [(a, b) for a, b in zip(events, tokens) if a != b]
        report.remapped.update(changed)
        report.songs += bool(changed)
    if tokens[-1:] != ["EOS_None"]:
        tokens.append("EOS_None")
    if tokens[-2:] == ["Bar_None", "EOS_None"]:
        tokens = tokens[:-2] + ["EOS_None"]
    if "TimeSig_4/4" in tokenizer.vocab and "Bar_None" in tokens:
        first = tokens.index("Bar_None")
        tokens.insert(first + 1, "TimeSig_4/4")
    return tokenizer.strings_to_ids(tokens)


def events_to_ids(
    events: list[tuple[str, Any]], tokenizer: BaseTokenizer, source: str, report: RemapReport | None = None
) -> list[int]:
    """:func:`strings_to_ids` of ``(name, value)`` events as read by :func:`read_song`."""
    return strings_to_ids([f"{name}_{plain_value(value)}" for name, value in events], tokenizer, source, report)


# ---------------------------------------------------------------------------- the corpus
def build_pop1k7_corpus(
    folder: str | Path,
    root: str | Path,
    tokenizer: BaseTokenizer | None = None,
    heldout: float = 0.05,
    progress: bool = True,
) -> TokenCorpus:
    """Read a Pop1K7 folder (see :func:`locate_release`) into a corpus at ``root`` (cached).

    The default tokenizer is the paper's vocabulary, ``REMITokenizer(time_signatures=False)``. A song is
    read from its event pickle, else from its words; bad files are reported and skipped. Songs are split
    by a hash of their names (``data.corpus.split_pieces``). The summary adds ``layout``, ``remapped``
    (:class:`RemapReport`) and ``words_check`` (songs whose words were compared with their events, and
    those that disagree).
    """
    if tokenizer is None:
        from remi import REMITokenizer

        tokenizer = REMITokenizer(time_signatures=False)
    folder = Path(folder)
    release = locate_release(folder)
    if not release.names():
        raise ValueError(f"{folder}: no Pop1K7 event pickles (*.pkl) or words (*.npy) found")
    settings = folder_settings(folder, release.files(), tokenizer, layout=release.layout, heldout=heldout)
    cached = cached_corpus(root, BUILDER, settings)
    if cached is not None:
        return cached
    idx2event = read_dictionary(release.dictionary) if release.words else {}
    report = RemapReport()
    checked, disagree = 0, []
    pieces, skipped = [], []
    for name in tqdm(release.names(), desc="Pop1K7", unit="song", disable=not progress):
        path = release.events.get(name) or release.words[name]
        try:
            if name in release.events:
                ids = events_to_ids(read_song(path), tokenizer, str(path), report)
            else:
                ids = strings_to_ids(read_words(path, idx2event), tokenizer, str(path), report)
            if name in release.events and name in release.words:
                checked += 1
                words_path = release.words[name]
                if strings_to_ids(read_words(words_path, idx2event), tokenizer, str(words_path)) != ids:
                    disagree.append(name)
                    logger.warning("%s: words and events disagree (events used)", name)
        except TokenizationError as err:
            skipped.append(Skipped(name, err.reason))
            logger.warning("skipped %s", err)
            continue
        pieces.append(Piece(name, np.asarray(ids, dtype=np.int32), "", ["4/4"], path.name, length_group(len(ids))))
    if not pieces:
        raise ValueError(f"{folder}: none of the {len(release.names())} Pop1K7 songs could be read")
    extra = {
        "layout": release.layout,
        "remapped": report.as_dict(),
        "words_check": {"compared": checked, "disagree": disagree},
    }
    if report.remapped:
        logger.info("%d events in %d songs remapped to the nearest level", sum(report.remapped.values()), report.songs)
    return write_corpus(root, tokenizer, split_pieces(pieces, heldout), skipped, BUILDER, settings, extra)


__all__ = [
    "Release",
    "RemapReport",
    "RestrictedUnpickler",
    "UnsafePickleError",
    "build_pop1k7_corpus",
    "events_to_ids",
    "locate_release",
    "map_event",
    "map_token",
    "read_dictionary",
    "read_song",
    "read_words",
    "strings_to_ids",
]
