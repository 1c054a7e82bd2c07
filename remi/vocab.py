"""The REMI vocabulary (spe_notes.md section 5) and the meter table of our TimeSig extension.

Grid: 480 ticks per beat (quarter note), 4 sub-beats (16th notes, 120 ticks) per beat. Token strings:

* ``Bar_None``; ``Beat_0`` .. ``Beat_15`` (sub-beat position inside the bar);
* ``Tempo_32`` .. ``Tempo_224`` in steps of 3 bpm;
* ``Chord_<root>_<quality>`` (12 roots x 11 qualities) and ``Chord_N_N`` (no chord): the names of
  ``tokenization.chords`` (``CHORD_ROOTS``, ``CHORD_QUALITIES``, ``NO_CHORD``, imported here);
* ``Note_Pitch_22`` .. ``Note_Pitch_107``, ``Note_Velocity_40`` .. ``Note_Velocity_86`` (steps of 2),
  ``Note_Duration_0`` .. ``Note_Duration_1920`` (ticks, steps of 120: 0..16 sub-beats);
* with ``time_signatures=True`` also ``TimeSig_<n>/<d>`` for the meters of :data:`METERS`, placed after
  the others so that every other token has the same id with and without the extension;
* with ``infill=True`` also the fill-in-the-middle markers :data:`INFILL_TOKENS` (``remi.infill``),
  placed last for the same reason: a model fine-tuned with them keeps every other embedding row.

Meters. A bar holds at most 16 sub-beats, so a longer meter (5/4, 12/8, 3/2 ...) is written as
consecutive ``Bar`` parts: its ``n`` beat units are cut into ``ceil(length / 16)`` parts as equal as
possible, the first parts taking the extra unit (5/4 -> 12 + 8 sub-beats, 9/8 -> 10 + 8, 3/2 -> 16 + 8).
A meter outside :data:`METERS` (5/16, 9/4, 3/32 ...) maps to the supported meter with the nearest bar
length (same denominator preferred); note onsets are unaffected, only the bar lines move.
"""

from __future__ import annotations

import math

from tokenization.chords import CHORD_QUALITIES, CHORD_ROOTS, NO_CHORD, chord_name  # noqa: F401  (REMI's names too)

TICKS_PER_BEAT = 480  # ticks per quarter note in decoded files
SUB_BEATS_PER_BEAT = 4  # grid resolution: a 16th note
TICKS_PER_SUB_BEAT = TICKS_PER_BEAT // SUB_BEATS_PER_BEAT  # 120
MAX_BAR_SUB_BEATS = 16  # longest bar (part) a Beat token can address
DEFAULT_METER = (4, 4)  # meter when the file (or the token sequence) names none

PITCH_RANGE = (22, 107)  # inclusive; notes outside are dropped
VELOCITIES = tuple(range(40, 87, 2))  # 24 levels; others clamp to the nearest level
TEMPI = tuple(range(32, 225, 3))  # bpm levels; others clamp to the nearest level
MAX_DURATION = 16  # sub-beats; longer notes are clipped
DEFAULT_BPM = 120.0  # MIDI's tempo when a file sets none

INFILL_TOKENS = ("Infill_Hole", "Infill_Fill", "Infill_End")  # where the middle was, where it starts, its end

METERS: tuple[tuple[int, int], ...] = (
    ((2, 2), (3, 2), (4, 2)) + tuple((n, 4) for n in range(1, 9)) + tuple((n, 8) for n in range(1, 13))
)


def meter_length(meter: tuple[int, int]) -> int:
    """Sub-beats in one bar of a supported meter."""
    numerator, denominator = meter
    return numerator * MAX_BAR_SUB_BEATS // denominator


def meter_parts(meter: tuple[int, int]) -> tuple[int, ...]:
    """Lengths (sub-beats) of the Bar parts one bar of ``meter`` is written as (one part if <= 16)."""
    numerator, denominator = meter
    unit = MAX_BAR_SUB_BEATS // denominator
    count = math.ceil(numerator * unit / MAX_BAR_SUB_BEATS)
    base, extra = divmod(numerator, count)
    return tuple((base + (i < extra)) * unit for i in range(count))


def nearest_meter(numerator: int, denominator: int) -> tuple[int, int]:
    """The supported meter closest in bar length to ``numerator/denominator`` (itself if supported)."""
    if (numerator, denominator) in METER_SET:
        return numerator, denominator
    length = numerator * MAX_BAR_SUB_BEATS / denominator
    return min(METERS, key=lambda m: (abs(meter_length(m) - length), m[1] != denominator, m[1], m[0]))


def meter_token(meter: tuple[int, int]) -> str:
    return f"TimeSig_{meter[0]}/{meter[1]}"


def chord_token(root: int | None, quality: str | None) -> str:
    """``Chord_<root>_<quality>`` for a root pitch class 0..11, or ``Chord_N_N`` for None."""
    return "Chord_" + chord_name(None if root is None or quality is None else (root, quality))


def build_tokens(time_signatures: bool, infill: bool = False) -> list[str]:
    """The format's tokens in id order (the base class puts PAD_None and EOS_None first)."""
    tokens = ["Bar_None"]
    tokens += [f"Beat_{i}" for i in range(MAX_BAR_SUB_BEATS)]
    tokens += [f"Tempo_{t}" for t in TEMPI]
    tokens += [chord_token(r, q) for r in range(12) for q in CHORD_QUALITIES] + [chord_token(None, None)]
    tokens += [f"Note_Pitch_{p}" for p in range(PITCH_RANGE[0], PITCH_RANGE[1] + 1)]
    tokens += [f"Note_Velocity_{v}" for v in VELOCITIES]
    tokens += [f"Note_Duration_{d * TICKS_PER_SUB_BEAT}" for d in range(MAX_DURATION + 1)]
    if time_signatures:
        tokens += [meter_token(m) for m in METERS]
    if infill:
        tokens += list(INFILL_TOKENS)
    return tokens


METER_SET = frozenset(METERS)
assert all(max(meter_parts(m)) <= MAX_BAR_SUB_BEATS and sum(meter_parts(m)) == meter_length(m) for m in METERS)
