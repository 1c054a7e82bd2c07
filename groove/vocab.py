"""The 794-token Groove2Groove vocabulary and per-id lookup tables.

Tokens (``Type_Value`` strings):

* ``Start_None``, ``End_None`` (the special tokens, ids 0 and 1; padding uses ``End_None``);
* ``NoteOn_<track>:<pitch>`` and ``NoteOff_<track>:<pitch>`` for track in bass, drums, accompaniment
  and pitch 0..127 (2 x 3 x 128 = 768 tokens);
* ``TimeShift_<beats>:<offset>`` (offset two digits): move to offset ``offset`` (in twelfths of a beat)
  of the beat that is ``beats`` beats after the current one. Valid shifts are (0, 1..11), (1, 0..11) and
  (2, 0): 24 tokens. A (0, o) shift with o not after the current offset would go backwards (or nowhere)
  and is invalid; the others always move forward.

2 + 768 + 24 = 794.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from groove.roles import TICKS_PER_BEAT, TRACKS
from tokenization import Vocab

START, END = "Start_None", "End_None"
NUM_PITCHES = 128
TIME_SHIFTS = (
    [(0, o) for o in range(1, TICKS_PER_BEAT)] + [(1, o) for o in range(TICKS_PER_BEAT)] + [(2, 0)]
)  # (beats, offset) pairs, in vocabulary order

# Token kinds in GrooveTokenTable.kind.
SPECIAL, NOTE_ON, NOTE_OFF, TIME_SHIFT = range(4)


def note_token(kind: str, track: int, pitch: int) -> str:
    return f"{kind}_{TRACKS[track]}:{pitch}"


def shift_token(beats: int, offset: int) -> str:
    return f"TimeShift_{beats}:{offset:02d}"


def format_tokens() -> list[str]:
    """The format's tokens without the special tokens, in vocabulary order."""
    tokens = [
        note_token(kind, t, p) for kind in ("NoteOn", "NoteOff") for t in range(len(TRACKS)) for p in range(NUM_PITCHES)
    ]
    return tokens + [shift_token(b, o) for b, o in TIME_SHIFTS]


@dataclass(frozen=True)
class GrooveTokenTable:
    """What each token id means, as arrays indexed by id (-1 where a field does not apply)."""

    kind: np.ndarray  # (V,) SPECIAL / NOTE_ON / NOTE_OFF / TIME_SHIFT
    track: np.ndarray  # (V,) role index of note tokens
    pitch: np.ndarray  # (V,) MIDI pitch of note tokens
    beats: np.ndarray  # (V,) beats of time-shift tokens
    offset: np.ndarray  # (V,) target offset (0..11) of time-shift tokens
    start_id: int  # id of Start_None
    end_id: int  # id of End_None
    note_on: np.ndarray  # (3, 128) id of NoteOn per (track, pitch)
    note_off: np.ndarray  # (3, 128) id of NoteOff per (track, pitch)
    shift: dict[tuple[int, int], int]  # (beats, offset) -> id of the time shift

    @staticmethod
    def from_vocab(vocab: Vocab) -> "GrooveTokenTable":
        size = len(vocab)
        kind, track, pitch, beats, offset = (np.full(size, -1, dtype=np.int64) for _ in range(5))
        note_on = np.zeros((len(TRACKS), NUM_PITCHES), dtype=np.int64)
        note_off = np.zeros_like(note_on)
        for t in range(len(TRACKS)):
            for p in range(NUM_PITCHES):
                for table, name, code in ((note_on, "NoteOn", NOTE_ON), (note_off, "NoteOff", NOTE_OFF)):
                    idx = vocab[note_token(name, t, p)]
                    table[t, p], kind[idx], track[idx], pitch[idx] = idx, code, t, p
        shift = {}
        for b, o in TIME_SHIFTS:
            idx = vocab[shift_token(b, o)]
            shift[(b, o)], kind[idx], beats[idx], offset[idx] = idx, TIME_SHIFT, b, o
        start_id, end_id = vocab[START], vocab[END]
        kind[start_id] = kind[end_id] = SPECIAL
        return GrooveTokenTable(kind, track, pitch, beats, offset, start_id, end_id, note_on, note_off, shift)


def shifts_between(current: int, target: int) -> list[tuple[int, int]]:
    """Time shifts that move from tick ``current`` to tick ``target`` > ``current`` (fewest tokens)."""
    beat, off = divmod(current, TICKS_PER_BEAT)
    target_beat, target_off = divmod(target, TICKS_PER_BEAT)
    out = []
    while target_beat - beat >= 2:
        out.append((2, 0))
        beat, off = beat + 2, 0
    if target_beat == beat + 1:
        out.append((1, target_off))
    elif target_off > off:
        out.append((0, target_off))
    return out


def shift_target(current: int, beats: int, offset: int) -> int:
    """The tick a (beats, offset) shift moves to from tick ``current``."""
    return (current // TICKS_PER_BEAT + beats) * TICKS_PER_BEAT + offset
