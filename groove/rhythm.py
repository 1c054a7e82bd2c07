"""Rhythm variations of one role's notes, drawn once per piece, so that a continuation can only keep a
piece's rhythm by reading it from the prompt.

A corpus rendered from a fixed set of grooves (``data.groove_mma``) plays each groove's own bass and
accompaniment rhythms; real bands push notes ahead of the beat and pump eighths far more often (the OpenMSX
band songs: 47% of bass onsets on a beat against 65% in the MMA corpus, 34% on an off-beat eighth against
22%). A model trained on the grooves alone continues a syncopated prompt with the nearest groove it knows.
Drawing a variation per piece and per role, and keeping it for the whole piece, makes the prompt the only
source of the rhythm.

Two kinds, on the format's grid (12 ticks per beat, 4/4 bars):

* **push** (anticipation): the notes that start on the chosen beats of the bar (a non-empty subset of 0-3)
  start an eighth earlier and keep their end; the notes of the same role still sounding at the new onset
  end there (a chord is pushed as a whole, the previous chord makes room).
* **pump**: a note that starts on an eighth, a quarter or more before the role's next onset, is re-struck
  on each eighth until that onset (the last note: until the end of its beat), each stroke ``stroke`` ticks
  long (1..6: the piece's articulation of the eighths), whatever the note's own length.

Drums are never varied.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from groove.roles import TICKS_PER_BAR, TICKS_PER_BEAT, GridNote, clean_notes

EIGHTH = TICKS_PER_BEAT // 2  # ticks of an eighth note
KINDS = ("push", "pump")


@dataclass(frozen=True)
class RhythmVariation:
    """One drawn variation of a role's rhythm."""

    kind: str  # "push" or "pump" (module docstring)
    beats: tuple[int, ...] = ()  # push: the beats of the bar (0-3) whose notes are anticipated
    stroke: int = EIGHTH  # pump: ticks each re-struck eighth lasts (1..EIGHTH)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown rhythm variation {self.kind!r} (known: {', '.join(KINDS)})")
        if self.kind == "push" and (not self.beats or not set(self.beats) <= set(range(TICKS_PER_BAR // TICKS_PER_BEAT))):
            raise ValueError(f"a push needs beats among 0..{TICKS_PER_BAR // TICKS_PER_BEAT - 1}, got {self.beats}")
        if not 1 <= self.stroke <= EIGHTH:
            raise ValueError(f"stroke must be 1..{EIGHTH} ticks, got {self.stroke}")


def draw_variation(rng: np.random.Generator, pump_prob: float = 0.35) -> RhythmVariation:
    """A pump with probability ``pump_prob``, else a push of a non-empty random set of beats."""
    if rng.random() < pump_prob:
        return RhythmVariation("pump", stroke=int(rng.integers(3, EIGHTH + 1)))
    beats = np.flatnonzero(rng.random(TICKS_PER_BAR // TICKS_PER_BEAT) < 0.5)
    if beats.size == 0:
        beats = np.array([2])  # the most common anticipation in pop: the bar's third beat
    return RhythmVariation("push", beats=tuple(int(b) for b in beats))


def _push(notes: list[GridNote], beats: tuple[int, ...]) -> list[GridNote]:
    on_beats = {b * TICKS_PER_BEAT for b in beats}
    is_pushed = [s % TICKS_PER_BAR in on_beats and s >= EIGHTH for s, _, _ in notes]
    moved = [(s - EIGHTH if push else s, e, p) for (s, e, p), push in zip(notes, is_pushed)]
    pushed = np.array(sorted({s for (s, _, _), push in zip(moved, is_pushed) if push}), dtype=np.int64)  # (K,)
    out = []
    for s, e, p in moved:
        inside = pushed[np.searchsorted(pushed, s, side="right"):]  # pushed onsets after this note's start
        inside = inside[inside < e]  # ... while it sounds: it ends at the first one
        out.append((s, int(inside[0]) if inside.size else e, p))
    return out


def _pump(notes: list[GridNote], stroke: int) -> list[GridNote]:
    onsets = np.array(sorted({s for s, _, _ in notes}), dtype=np.int64)  # (K,)
    out = []
    for s, e, p in notes:
        later = onsets[np.searchsorted(onsets, s, side="right"):]
        until = int(later[0]) if later.size else -(-e // TICKS_PER_BEAT) * TICKS_PER_BEAT  # next onset, or a beat
        if until - s < TICKS_PER_BEAT or s % EIGHTH:
            out.append((s, e, p))
            continue
        out += [(t, t + stroke, p) for t in range(s, until - EIGHTH + 1, EIGHTH)]
    return out


def vary(notes: list[GridNote], variation: RhythmVariation) -> list[GridNote]:
    """One role's notes with ``variation`` applied (sorted, no same-pitch overlaps)."""
    if variation.kind == "push":
        return clean_notes(_push(notes, variation.beats))
    return clean_notes(_pump(notes, variation.stroke))
