"""The grammar of Groove2Groove token sequences, as an incremental state.

One state serves both constrained sampling (``allowed`` masks the tokens that would make the sequence
invalid) and decoding (``GrooveTokenizer.decode`` skips the tokens ``is_valid`` refuses). A token is
invalid when it is:

* ``NoteOff`` of a note that is not sounding, or of a note that started at the current time (a
  zero-length note);
* ``NoteOn`` of a note that is already sounding on that track;
* a ``TimeShift`` (0, o) with o not after the current offset in the beat (a backward or null shift);
* ``Start_None`` anywhere but as the first token;
* anything after ``End_None`` except more ``End_None`` (the padding).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from groove.roles import TICKS_PER_BEAT
from groove.vocab import NOTE_OFF, NOTE_ON, TIME_SHIFT, TokenTables, shift_target


@dataclass(frozen=True)
class ClosedNote:
    """A note completed by a NoteOff (or closed at the end of the sequence)."""

    track: int  # role index (bass, drums, accompaniment)
    pitch: int  # MIDI pitch
    start: int  # onset tick (12 per beat)
    end: int  # offset tick, > start


class GrooveState:
    """Incremental grammar state: current time, sounding notes, start/end seen."""

    def __init__(self, tables: TokenTables):
        self.tables = tables
        self.time = 0  # current tick (12 per beat)
        self.sounding: dict[tuple[int, int], int] = {}  # (track, pitch) -> onset tick
        self.length = 0  # tokens consumed so far
        self.ended = False  # End_None has been consumed
        self._shift_masks = self._build_shift_masks(tables)

    @staticmethod
    def _build_shift_masks(tables: TokenTables) -> np.ndarray:
        """(12, V) base masks per current offset: every note-on, End, and the forward time shifts."""
        size = len(tables.kind)
        masks = np.zeros((TICKS_PER_BEAT, size), dtype=bool)
        masks[:, tables.note_on.ravel()] = True
        masks[:, tables.end_id] = True
        is_shift = tables.kind == TIME_SHIFT
        for off in range(TICKS_PER_BEAT):
            masks[off] |= is_shift & ((tables.beats > 0) | (tables.offset > off))
        return masks

    def allowed(self) -> np.ndarray:
        """(V,) bool: the tokens that keep the sequence valid after the tokens consumed so far."""
        tables = self.tables
        if self.ended:
            mask = np.zeros(len(tables.kind), dtype=bool)
            mask[tables.end_id] = True
            return mask
        mask = self._shift_masks[self.time % TICKS_PER_BEAT].copy()
        mask[tables.start_id] = self.length == 0
        for (track, pitch), onset in self.sounding.items():
            mask[tables.note_on[track, pitch]] = False
            mask[tables.note_off[track, pitch]] = onset < self.time
        return mask

    def is_valid(self, idx: int) -> bool:
        tables = self.tables
        if not 0 <= idx < len(tables.kind):
            return False
        if self.ended:
            return idx == tables.end_id
        if idx == tables.start_id:
            return self.length == 0
        kind = tables.kind[idx]
        if kind == TIME_SHIFT:
            return tables.beats[idx] > 0 or tables.offset[idx] > self.time % TICKS_PER_BEAT
        key = (int(tables.track[idx]), int(tables.pitch[idx]))
        if kind == NOTE_ON:
            return key not in self.sounding
        if kind == NOTE_OFF:
            return key in self.sounding and self.sounding[key] < self.time
        return True  # End_None

    def advance(self, idx: int) -> ClosedNote | None:
        """Consume one token; return the note it completes, if any. ValueError for an invalid token."""
        idx = int(idx)
        if not self.is_valid(idx):
            raise ValueError(f"token id {idx} is not valid here (time {self.time}, {len(self.sounding)} notes on)")
        tables = self.tables
        self.length += 1
        kind = tables.kind[idx]
        if idx == tables.end_id:
            self.ended = True
        elif kind == TIME_SHIFT:
            self.time = shift_target(self.time, int(tables.beats[idx]), int(tables.offset[idx]))
        elif kind == NOTE_ON:
            self.sounding[(int(tables.track[idx]), int(tables.pitch[idx]))] = self.time
        elif kind == NOTE_OFF:
            track, pitch = int(tables.track[idx]), int(tables.pitch[idx])
            return ClosedNote(track, pitch, self.sounding.pop((track, pitch)), self.time)
        return None

    def close_all(self) -> list[ClosedNote]:
        """Close the notes still sounding at the current time (at least one tick long)."""
        notes = [ClosedNote(t, p, on, max(self.time, on + 1)) for (t, p), on in sorted(self.sounding.items())]
        self.sounding.clear()
        return notes
