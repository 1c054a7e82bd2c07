"""Loading MIDI from the forms users hand us: a path, raw bytes, or an in-memory object."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import miditoolkit

from tokenization.errors import TokenizationError

MIDI_MAGIC = b"MThd"


def source_name(source: Any) -> str:
    """A short human-readable name for error messages."""
    if isinstance(source, (str, Path)):
        return str(source)
    if isinstance(source, (bytes, bytearray)):
        return f"<{len(source)} bytes of MIDI>"
    return f"<{type(source).__module__}.{type(source).__name__}>"


def _from_bytes(data: bytes, name: str) -> miditoolkit.MidiFile:
    if len(data) == 0:
        raise TokenizationError(name, "empty file")
    if not data.startswith(MIDI_MAGIC):
        raise TokenizationError(name, "not a MIDI file (no 'MThd' header)")
    try:
        return miditoolkit.MidiFile(file=io.BytesIO(data))
    except (OSError, EOFError, ValueError, KeyError, IndexError, TypeError) as err:
        raise TokenizationError(name, f"corrupt or truncated MIDI ({type(err).__name__}: {err})") from err


def load_midi(source: Any) -> miditoolkit.MidiFile:
    """Return a ``miditoolkit.MidiFile`` from a path, bytes, a MidiFile or a ``pretty_midi.PrettyMIDI``.

    Raises :class:`TokenizationError` (naming the source) for a missing, empty, truncated or non-MIDI file.
    """
    name = source_name(source)
    if isinstance(source, miditoolkit.MidiFile):
        return source
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.exists():
            raise TokenizationError(name, "no such file")
        if not path.is_file():
            raise TokenizationError(name, "not a regular file")
        try:
            data = path.read_bytes()
        except OSError as err:
            raise TokenizationError(name, f"unreadable ({err.strerror})") from err
        return _from_bytes(data, name)
    if isinstance(source, (bytes, bytearray)):
        return _from_bytes(bytes(source), name)
    if type(source).__module__.startswith("pretty_midi"):
        buffer = io.BytesIO()
        source.write(buffer)
        return _from_bytes(buffer.getvalue(), name)
    raise TokenizationError(name, "unsupported input type (expected a path, bytes or a MIDI object)")
