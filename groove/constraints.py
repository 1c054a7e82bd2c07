"""The grammar of Groove2Groove token sequences, as an incremental state.

One state serves both constrained sampling (``allowed`` masks the tokens that would make the sequence
invalid) and decoding (``GrooveTokenizer.decode`` skips the tokens ``accepts`` refuses). A token is
invalid when it is (``GrooveConstraintState`` implements the ``tokenization.ConstraintState`` contract):

* ``NoteOff`` of a note that is not sounding, or of a note that started at the current time (a
  zero-length note);
* ``NoteOn`` of a note that is already sounding on that track;
* a ``TimeShift`` (0, o) with o not after the current offset in the beat (a backward or null shift);
* ``Start_None`` anywhere but as the first token;
* anything after ``End_None`` except more ``End_None`` (the padding).

With ``hold_limit`` (ticks; off by default), ``allowed`` also applies a sampling policy that ``accepts``
(validity, decoding, prompts) does not: no note is held longer than that. A time shift past the deadline
of the earliest sounding note is masked, and once a note reaches its deadline only the NoteOffs of such
notes remain. A note closed at the limit then rests: its pitch cannot be struck again on its track for
``HOLD_REST`` ticks (a bar), so the drone is not restarted at once as a chain of limit-long notes. It is for
a model that leaves notes sounding for dozens of bars (a sounding pitch cannot be struck again on its
track); ``GrooveTokenizer.constraint_state(hold_bars)`` turns it on for sampling
(``generation.sampling.SamplingConfig.hold_bars``, ``--hold-bars``).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from groove.roles import TICKS_PER_BAR, TICKS_PER_BEAT
from groove.vocab import NOTE_OFF, NOTE_ON, TIME_SHIFT, GrooveTokenTable, shift_target
from tokenization import ConstraintState

HOLD_REST = TICKS_PER_BAR  # ticks a pitch closed at the hold limit rests on its track before it may sound again


@dataclass(frozen=True)
class ClosedNote:
    """A note completed by a NoteOff (or closed at the end of the sequence)."""

    track: int  # role index (bass, drums, accompaniment)
    pitch: int  # MIDI pitch
    start: int  # onset tick (12 per beat)
    end: int  # offset tick, > start


class GrooveConstraintState(ConstraintState):
    """Incremental grammar state: current time, sounding notes, start/end seen."""

    def __init__(self, table: GrooveTokenTable, hold_limit: int | None = None):
        self.table = table
        self.hold_limit = hold_limit  # ticks a note may sound in sampled sequences (None: no limit)
        self.time = 0  # current tick (12 per beat)
        self.sounding: dict[tuple[int, int], int] = {}  # (track, pitch) -> onset tick
        self.resting: dict[tuple[int, int], int] = {}  # (track, pitch) closed at the hold limit -> tick it may sound
        self.length = 0  # tokens consumed so far
        self.ended = False  # End_None has been consumed
        self._shift_masks = self._build_shift_masks(table)
        is_shift = table.kind == TIME_SHIFT
        self._shift_ids = np.flatnonzero(is_shift)  # (S,) ids of the time shifts
        self._shift_beats = table.beats[is_shift].astype(np.int64)  # (S,)
        self._shift_offsets = table.offset[is_shift].astype(np.int64)  # (S,)

    @staticmethod
    def _build_shift_masks(table: GrooveTokenTable) -> np.ndarray:
        """(12, V) base masks per current offset: every note-on, End, and the forward time shifts."""
        size = len(table.kind)
        masks = np.zeros((TICKS_PER_BEAT, size), dtype=bool)
        masks[:, table.note_on.ravel()] = True
        masks[:, table.end_id] = True
        is_shift = table.kind == TIME_SHIFT
        for off in range(TICKS_PER_BEAT):
            masks[off] |= is_shift & ((table.beats > 0) | (table.offset > off))
        return masks

    def allowed(self) -> np.ndarray:
        """(V,) bool: the tokens that keep the sequence valid after the tokens consumed so far."""
        table = self.table
        if self.ended:
            mask = np.zeros(len(table.kind), dtype=bool)
            mask[table.end_id] = True
            return mask
        mask = self._shift_masks[self.time % TICKS_PER_BEAT].copy()
        mask[table.start_id] = self.length == 0
        for (track, pitch), onset in self.sounding.items():
            mask[table.note_on[track, pitch]] = False
            mask[table.note_off[track, pitch]] = onset < self.time
        for (track, pitch), until in self.resting.items():
            if self.time < until:
                mask[table.note_on[track, pitch]] = False
        if self.hold_limit is not None and self.sounding:
            self._limit_holds(mask)
        return mask

    def _limit_holds(self, mask: np.ndarray) -> None:
        """Apply ``hold_limit`` to an ``allowed`` mask in place (module docstring)."""
        table = self.table
        deadline = min(self.sounding.values()) + self.hold_limit
        if self.time >= deadline:
            mask[:] = False
            for (track, pitch), onset in self.sounding.items():
                mask[table.note_off[track, pitch]] = self.time - onset >= self.hold_limit
            return
        targets = shift_target(self.time, self._shift_beats, self._shift_offsets)  # (S,) ticks
        mask[self._shift_ids[targets > deadline]] = False

    def accepts(self, idx: int) -> bool:
        """Whether token ``idx`` may come next."""
        table = self.table
        if not 0 <= idx < len(table.kind):
            return False
        if self.ended:
            return idx == table.end_id
        if idx == table.start_id:
            return self.length == 0
        kind = table.kind[idx]
        if kind == TIME_SHIFT:
            return table.beats[idx] > 0 or table.offset[idx] > self.time % TICKS_PER_BEAT
        key = (int(table.track[idx]), int(table.pitch[idx]))
        if kind == NOTE_ON:
            return key not in self.sounding
        if kind == NOTE_OFF:
            return key in self.sounding and self.sounding[key] < self.time
        return True  # End_None

    def advance(self, idx: int) -> None:
        """Consume one token; ValueError for an invalid token."""
        self.advance_note(idx)

    def advance_note(self, idx: int) -> ClosedNote | None:
        """``advance``, returning the note the token completes, if any (for the decoder)."""
        idx = int(idx)
        if not self.accepts(idx):
            raise ValueError(f"token id {idx} is not valid here (time {self.time}, {len(self.sounding)} notes on)")
        table = self.table
        self.length += 1
        kind = table.kind[idx]
        if idx == table.end_id:
            self.ended = True
        elif kind == TIME_SHIFT:
            self.time = shift_target(self.time, int(table.beats[idx]), int(table.offset[idx]))
            if self.resting:
                self.resting = {key: until for key, until in self.resting.items() if until > self.time}
        elif kind == NOTE_ON:
            self.sounding[(int(table.track[idx]), int(table.pitch[idx]))] = self.time
        elif kind == NOTE_OFF:
            track, pitch = int(table.track[idx]), int(table.pitch[idx])
            onset = self.sounding.pop((track, pitch))
            if self.hold_limit is not None and self.time - onset >= self.hold_limit:
                self.resting[(track, pitch)] = self.time + HOLD_REST
            return ClosedNote(track, pitch, onset, self.time)
        return None

    def next_bar_time(self) -> Fraction:
        """Beats to the first 4/4 bar line at or after the current time (the current time on a bar line)."""
        return Fraction(-(-self.time // TICKS_PER_BAR) * TICKS_PER_BAR, TICKS_PER_BEAT)

    def close_all(self) -> list[ClosedNote]:
        """Close the notes still sounding at the current time (at least one tick long)."""
        notes = [ClosedNote(t, p, on, max(self.time, on + 1)) for (t, p), on in sorted(self.sounding.items())]
        self.sounding.clear()
        return notes
