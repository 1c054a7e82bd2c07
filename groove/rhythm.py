"""Rhythm variations of one role's notes, drawn once per piece, so that a continuation can only keep a
piece's rhythm by reading it from the prompt.

A corpus rendered from a fixed set of grooves (``data.groove_mma``) plays each groove's own bass and
accompaniment rhythms; real bands push notes ahead of the beat, pump eighths and sixteenths, and walk into
the next bass note far more often (the OpenMSX band songs: 47% of bass onsets on a beat against 65% in the
MMA corpus; consecutive bass onsets an eighth apart 46% against 15%, a sixteenth 16% against 4%; bass steps
of one or two semitones 29% against 22%, fifths 8% against 21%). A model trained on the grooves alone
continues such a prompt with the nearest groove it knows. Drawing a variation per piece and per role, and
keeping it for the whole piece, makes the prompt the only source of the rhythm.

Three kinds, on the format's grid (12 ticks per beat, 4/4 bars):

* **push** (anticipation): the notes that start on the chosen beats of the bar (a non-empty subset of 0-3)
  start an eighth earlier and keep their end; the notes of the same role still sounding at the new onset
  end there (a chord is pushed as a whole, the previous chord makes room).
* **pump**: a note that starts on the ``step`` grid (an eighth or a sixteenth), a quarter or more before the
  role's next onset, is re-struck on each step until that onset (the last note: until the end of its beat),
  each stroke ``stroke`` ticks long (1..step: the piece's articulation), whatever the note's own length.
* **approach** (a walking bass's passing note): where the role's next onset is a quarter or more away and
  its lowest pitch differs, the notes sounding end ``step`` ticks before it and a note ``offset`` semitones
  from the next lowest pitch (-2..2, not 0: from below or above, a half or a whole step) fills that gap.

Drums are never varied.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from groove.roles import TICKS_PER_BAR, TICKS_PER_BEAT, GridNote, clean_notes

EIGHTH = TICKS_PER_BEAT // 2  # ticks of an eighth note
SIXTEENTH = TICKS_PER_BEAT // 4  # ticks of a sixteenth note
STEPS = (EIGHTH, SIXTEENTH)  # the grids a pump or an approach uses
KINDS = ("push", "pump", "approach")


@dataclass(frozen=True)
class RhythmVariation:
    """One drawn variation of a role's rhythm."""

    kind: str  # "push", "pump" or "approach" (module docstring)
    beats: tuple[int, ...] = ()  # push: the beats of the bar (0-3) whose notes are anticipated
    stroke: int = EIGHTH  # pump: ticks each re-struck note lasts (1..step)
    step: int = EIGHTH  # pump: the grid of the re-strikes; approach: the passing note's length (ticks)
    offset: int = -1  # approach: passing note minus the next note, in semitones (-2..2, not 0)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown rhythm variation {self.kind!r} (known: {', '.join(KINDS)})")
        beats_per_bar = TICKS_PER_BAR // TICKS_PER_BEAT
        if self.kind == "push" and (not self.beats or not set(self.beats) <= set(range(beats_per_bar))):
            raise ValueError(f"a push needs beats among 0..{beats_per_bar - 1}, got {self.beats}")
        if self.step not in STEPS:
            raise ValueError(f"step must be one of {STEPS} ticks, got {self.step}")
        if self.kind == "pump" and not 1 <= self.stroke <= self.step:
            raise ValueError(f"stroke must be 1..{self.step} ticks (the step), got {self.stroke}")
        if self.offset not in (-2, -1, 1, 2):
            raise ValueError(f"offset must be -2, -1, 1 or 2 semitones, got {self.offset}")


def draw_variation(rng: np.random.Generator, walk: bool = False, approach: bool = False,
                   pump_prob: float = 0.35) -> RhythmVariation:
    """A drawn variation. Plain: a pump on eighths with probability ``pump_prob``, else a push of a
    non-empty random set of beats. With ``walk``: the kind drawn uniformly among push, pump and (with
    ``approach``, for a bass) approach; a pump on the sixteenth grid with odds 1/4 (it fills whole gaps
    with strokes), an approach on it with odds 1/2."""
    if walk:
        kinds = KINDS if approach else KINDS[:2]
        kind = kinds[int(rng.integers(len(kinds)))]
        step = SIXTEENTH if rng.random() < (0.25 if kind == "pump" else 0.5) else EIGHTH
        if kind == "pump":
            return RhythmVariation("pump", stroke=int(rng.integers(step // 2, step + 1)), step=step)
        if kind == "approach":
            return RhythmVariation("approach", step=step, offset=int(rng.choice((-2, -1, 1, 2))))
    elif rng.random() < pump_prob:
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


def _pump(notes: list[GridNote], stroke: int, step: int) -> list[GridNote]:
    onsets = np.array(sorted({s for s, _, _ in notes}), dtype=np.int64)  # (K,)
    out = []
    for s, e, p in notes:
        later = onsets[np.searchsorted(onsets, s, side="right"):]
        until = int(later[0]) if later.size else -(-e // TICKS_PER_BEAT) * TICKS_PER_BEAT  # next onset, or a beat
        if until - s < TICKS_PER_BEAT or s % step:
            out.append((s, e, p))
            continue
        out += [(t, t + stroke, p) for t in range(s, until - step + 1, step)]
    return out


def _approach(notes: list[GridNote], step: int, offset: int) -> list[GridNote]:
    lowest: dict[int, int] = {}
    for s, _, p in notes:
        lowest[s] = min(p, lowest.get(s, p))
    onsets = sorted(lowest)
    gap_end = {s: n for s, n in zip(onsets, onsets[1:]) if n - s >= TICKS_PER_BEAT and lowest[n] != lowest[s]}
    out = [(s, min(e, gap_end[s] - step) if s in gap_end else e, p) for s, e, p in notes]
    out += [(n - step, n, lowest[n] + offset) for n in gap_end.values() if 0 <= lowest[n] + offset <= 127]
    return out


def vary(notes: list[GridNote], variation: RhythmVariation) -> list[GridNote]:
    """One role's notes with ``variation`` applied (sorted, no same-pitch overlaps)."""
    if variation.kind == "push":
        return clean_notes(_push(notes, variation.beats))
    if variation.kind == "pump":
        return clean_notes(_pump(notes, variation.stroke, variation.step))
    return clean_notes(_approach(notes, variation.step, variation.offset))
