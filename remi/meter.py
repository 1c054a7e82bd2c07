"""Meter policy of the REMI encoder: trust the file's time signatures, or infer the meter from the onsets.

Many real files declare a meter that is not the music's: POP909 declares 1/4 (or 2/4) for songs in 4/4
or 3/4, and a tokenizer that trusts it writes a bar line on every beat. With ``time_signatures=True``
the encoder asks :func:`decide_meter`:

1. a declared meter whose bar is a **single beat** (numerator 1: 1/4, 1/8, 1/2) is not trusted;
2. a file with **several different** declared meters (none single-beat) is followed as declared;
3. a file with **one** declared meter of quarter-note beats (n/4, or none: MIDI's default 4/4) is
   checked against its onsets: it is **contradicted** when an inferred meter's downbeat salience beats
   the declared meter's (phase 0, as declared) by more than :data:`CONTRADICTION_MARGIN`, on at least
   :data:`MIN_BEATS` beats of music (shorter pieces keep their declaration). A meter of other beats
   (6/8, 2/2) is kept: the salience below counts quarter-note beats and would misread compound time.

An untrusted declaration is replaced by the inferred meter (one of :data:`CANDIDATES`) with its phase;
an inferred meter with the declared bar length keeps the declared name (only the phase moves). The
decision is reported in ``EncodeStats.meter``, ``meter_source`` and ``meter_reason``.

Downbeat salience. Every distinct onset (in sub-beats, 4 a beat) weighs the duration of the longest
note starting there (sub-beats, at most one 4/4 bar): accented notes are long (bass, chord roots, held
melody notes), and a chord counts once, however many notes it has. The beat phase is the sub-beat
(0..3) holding most weight. For a bar of ``L`` sub-beats and a downbeat at sub-beat ``o``, the salience
is the weight at onsets ``= o (mod L)`` divided by the mean weight per beat (``L / 4`` beats a bar):
about 1 when the bar lines fall anywhere, higher the more the music leans on them. The inferred meter
and phase are those of the highest salience (ties: the order of :data:`CANDIDATES`).

Limits: onsets cannot tell 2/4 from 4/4 or 3/4 from 6/4 (POP909 itself marks a downbeat every six
beats in its triple-time songs), so those are not candidates; one phase holds for the whole file, so a
file whose bar lines drift (an inserted 2-beat bar) keeps the phase that fits most of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from remi.vocab import DEFAULT_METER, MAX_BAR_SUB_BEATS, SUB_BEATS_PER_BEAT, meter_length

CANDIDATES: tuple[tuple[int, int], ...] = ((4, 4), (3, 4))  # meters the inference chooses from
CONTRADICTION_MARGIN = 1.25  # inferred salience / declared salience above which the declaration is dropped
MIN_BEATS = 64  # beats of music needed before onsets may overrule a plausible declaration


@dataclass
class MeterDecision:
    """Which meter the encoder follows, and why."""

    source: str  # "declared" (the file's map), "default" (none declared: 4/4) or "inferred"
    meter: tuple[int, int] | None  # the one meter used throughout; None when a map of changes is followed
    phase: int  # sub-beat (0 <= phase < bar length) of the first downbeat; 0 unless inferred
    reason: str  # in words, for the encode report

    @property
    def label(self) -> str:
        return "declared map" if self.meter is None else f"{self.meter[0]}/{self.meter[1]}"


def onset_weights(onset: np.ndarray, duration: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(positions, weights)``: each distinct onset and the longest note starting there (sub-beats, <= 16)."""
    positions, inverse = np.unique(onset, return_inverse=True)
    weights = np.zeros(len(positions))
    np.maximum.at(weights, inverse, np.minimum(duration, MAX_BAR_SUB_BEATS).astype(np.float64))
    return positions, weights


def beat_phase(onset: np.ndarray, weight: np.ndarray) -> int:
    """Sub-beat (0..3) of the beat that holds most of the weight."""
    return int(np.argmax(np.bincount(onset % SUB_BEATS_PER_BEAT, weights=weight, minlength=SUB_BEATS_PER_BEAT)))


def salience(onset: np.ndarray, weight: np.ndarray, bar: int, phase: int) -> float:
    """Weight at downbeats (``onset = phase mod bar``) over the mean weight per beat (see module doc)."""
    total = float(weight.sum())
    if total <= 0:
        return 0.0
    on_downbeat = float(weight[(onset - phase) % bar == 0].sum())
    return on_downbeat / (total * SUB_BEATS_PER_BEAT / bar)


def infer_meter(onset: np.ndarray, duration: np.ndarray) -> tuple[tuple[int, int], int, float]:
    """``(meter, phase, salience)`` of the candidate meter whose downbeats the onsets lean on most."""
    onset, weight = onset_weights(onset, duration)
    beat = beat_phase(onset, weight)
    best: tuple[tuple[int, int], int, float] | None = None
    for meter in CANDIDATES:
        bar = meter_length(meter)
        for phase in range(beat, bar, SUB_BEATS_PER_BEAT):
            score = salience(onset, weight, bar, phase)
            if best is None or score > best[2] + 1e-9:
                best = (meter, phase, score)
    assert best is not None
    return best


def decide_meter(
    declared: list[tuple[int, tuple[int, int]]], onset: np.ndarray, duration: np.ndarray
) -> MeterDecision:
    """The policy of the module docstring for a file's declared meters ``[(sub-beat, meter)]``.

    ``onset`` and ``duration`` are the notes in sub-beats (``onset`` sorted or not).
    """
    meters = sorted({meter for _, meter in declared})
    names = ", ".join(f"{n}/{d}" for n, d in meters)
    single = [m for m in meters if m[0] == 1]
    if single:
        meter, phase, score = infer_meter(onset, duration)
        return MeterDecision(
            "inferred", meter, phase,
            f"declared {names}: a one-beat bar is not a meter; {meter[0]}/{meter[1]} inferred from the onsets "
            f"(downbeat salience {score:.2f}, first downbeat at sub-beat {phase})",
        )
    if len(meters) > 1:
        return MeterDecision("declared", None, 0, f"declared meter changes ({names}) followed as written")
    own = meters[0] if meters else DEFAULT_METER
    source = "declared" if meters else "default"
    own_score = salience(*onset_weights(onset, duration), meter_length(own), 0)
    what = f"declared {names}" if meters else "no time signature (MIDI default 4/4)"
    beats = (int(onset.max()) - int(onset.min())) / SUB_BEATS_PER_BEAT if len(onset) else 0.0
    if own[1] != 4:
        return MeterDecision(source, own, 0, f"{what} kept: its beat is not a quarter note")
    if beats < MIN_BEATS:
        return MeterDecision(source, own, 0, f"{what} kept: too short ({beats:.0f} beats) to overrule")
    meter, phase, score = infer_meter(onset, duration)
    if meter_length(meter) == meter_length(own):
        meter = own  # same bar length (6/8 and 3/4): the declared name stands, only the phase may move
    if score > CONTRADICTION_MARGIN * own_score:
        return MeterDecision(
            "inferred", meter, phase,
            f"{what} contradicts the onsets (downbeat salience {own_score:.2f}); {meter[0]}/{meter[1]} "
            f"inferred (salience {score:.2f}, first downbeat at sub-beat {phase})",
        )
    return MeterDecision(
        source, own, 0, f"{what} agrees with the onsets (salience {own_score:.2f}, best inferred {score:.2f})"
    )
