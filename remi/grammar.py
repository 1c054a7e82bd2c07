"""The REMI grammar: which token may come next, for constrained sampling and for decoding.

A piece is ``Bar [TimeSig] (Beat [Tempo] [Chord] (Pitch Velocity Duration)*)* ... EOS PAD*``:

* the first token is ``Bar``; ``TimeSig`` only right after a ``Bar`` that starts a bar of the meter
  (not after the second part of a split 5/4 bar);
* ``Beat`` positions strictly increase inside a bar and stay below the length of the current bar part;
* ``Tempo`` and ``Chord`` (at most one each, either order) only right after a ``Beat``, before its notes;
* a ``Pitch`` is followed by a ``Velocity`` then a ``Duration`` of at least one sub-beat
  (``Note_Duration_0`` is in the paper's vocabulary but would make a note MIDI cannot hold; our
  encoder never writes it, and the decoder skips it as an invalid event);
* after ``EOS`` only ``PAD``;
* fill in the middle (``remi.infill``): ``prefix Infill_Hole suffix Infill_Fill middle [Infill_End]``. The
  suffix and the middle each start with a ``Bar``; the suffix is read in the meter at the hole, and the
  middle restarts the bar clock there. ``allowed()`` never offers these markers: they come from the
  prompt, and the sampler writes only music.

:class:`REMIConstraintState` tracks this incrementally (the ``tokenization.ConstraintState`` contract:
``allowed()`` / ``accepts(id)`` / ``advance(id)`` / ``next_bar_time()``);
the decoder runs the same state machine, so a sequence the grammar accepts decodes with no skipped event.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import IntEnum
from fractions import Fraction

import numpy as np

from remi.vocab import DEFAULT_METER, METERS, SUB_BEATS_PER_BEAT, TICKS_PER_SUB_BEAT, meter_parts
from tokenization import ConstraintState, Vocab


class Kind(IntEnum):
    """Token types; ``REMITokenTable.kinds`` maps every id to one."""

    PAD = 0
    EOS = 1
    BAR = 2
    TIMESIG = 3
    BEAT = 4
    TEMPO = 5
    CHORD = 6
    PITCH = 7
    VELOCITY = 8
    DURATION = 9
    HOLE = 10
    FILL = 11
    FILL_END = 12


PREFIXES = {  # token-string prefix -> kind (longest match first is unnecessary: prefixes are disjoint)
    "PAD_": Kind.PAD,
    "EOS_": Kind.EOS,
    "Bar_": Kind.BAR,
    "TimeSig_": Kind.TIMESIG,
    "Beat_": Kind.BEAT,
    "Tempo_": Kind.TEMPO,
    "Chord_": Kind.CHORD,
    "Note_Pitch_": Kind.PITCH,
    "Note_Velocity_": Kind.VELOCITY,
    "Note_Duration_": Kind.DURATION,
    "Infill_Hole": Kind.HOLE,
    "Infill_Fill": Kind.FILL,
    "Infill_End": Kind.FILL_END,
}


class REMITokenTable:
    """Per-id kind and integer value of a REMI vocabulary, plus boolean masks per kind."""

    def __init__(self, vocab: Vocab):
        size = len(vocab)
        self.size = size  # vocabulary size
        self.kinds = np.zeros(size, dtype=np.int8)  # Kind of each id
        self.values = np.zeros(size, dtype=np.int64)  # beat index, bpm, pitch, velocity, sub-beats, meter idx
        for idx, token in enumerate(vocab.tokens):
            prefix = next(p for p in PREFIXES if token.startswith(p))
            kind, value = PREFIXES[prefix], token[len(prefix) :]
            self.kinds[idx] = kind
            if kind == Kind.TIMESIG:
                numerator, denominator = value.split("/")
                self.values[idx] = METERS.index((int(numerator), int(denominator)))
            elif kind == Kind.DURATION:
                self.values[idx] = int(value) // TICKS_PER_SUB_BEAT
            elif kind in (Kind.BEAT, Kind.TEMPO, Kind.PITCH, Kind.VELOCITY):
                self.values[idx] = int(value)
        self.masks = {kind: self.kinds == kind for kind in Kind}  # kind -> (size,) bool
        self.masks[Kind.DURATION] &= self.values > 0  # Note_Duration_0 is never valid
        beats = np.flatnonzero(self.masks[Kind.BEAT])
        self.beat_ids = beats[np.argsort(self.values[beats])]  # id of Beat_i at index i
        self.kind_list = self.kinds.tolist()  # fast per-token lookups in Python loops
        self.value_list = self.values.tolist()


class Phase(IntEnum):
    """Where the sequence is in the grammar."""

    START = 0  # nothing yet: a Bar must come
    BAR = 1  # right after Bar
    TIMESIG = 2  # right after TimeSig
    POSITION = 3  # after a Beat (and its Tempo / Chord / complete notes)
    PITCH = 4  # after a Pitch: a Velocity must come
    VELOCITY = 5  # after a Velocity: a Duration must come
    END = 6  # after EOS


@dataclass
class BarClock:
    """The bar part the sequence is in, under the current meter."""

    meter: tuple[int, int] = DEFAULT_METER  # current meter (numerator, denominator)
    parts: tuple[int, ...] = field(default_factory=lambda: meter_parts(DEFAULT_METER))  # part lengths
    part: int = -1  # index into ``parts`` of the current bar part (-1 before the first Bar)
    start: int = 0  # sub-beat (from the piece start) where the current bar part begins
    bars: int = 0  # Bar tokens seen

    @property
    def length(self) -> int:
        """Sub-beats in the current bar part."""
        return self.parts[self.part]

    def next_bar(self) -> None:
        if self.bars:
            self.start += self.length
        self.part = (self.part + 1) % len(self.parts)
        self.bars += 1

    def set_meter(self, meter: tuple[int, int]) -> None:
        """Switch meter at the start of the current bar (which becomes its first part)."""
        self.meter, self.parts, self.part = meter, meter_parts(meter), 0


class REMIConstraintState(ConstraintState):
    """Incremental REMI grammar (see the module docstring); one per generated sequence."""

    def __init__(self, table: REMITokenTable):
        self.table = table  # the vocabulary's kinds and values (TimeSig masks are empty without them)
        self.clock = BarClock()  # current bar part and meter
        self.phase = Phase.START  # grammar position
        self.beat = -1  # last Beat in the current bar part (-1: none yet)
        self.tempo_done = False  # this position already has its Tempo
        self.chord_done = False  # this position already has its Chord
        self.has_note = False  # this position already has a complete note
        self.hole_clock: BarClock | None = None  # the bar clock at Infill_Hole (None: no hole yet)
        self.filling = False  # after Infill_Fill: the middle is being written

    def accepts(self, token_id: int) -> bool:
        """Whether ``token_id`` may come next."""
        if not 0 <= token_id < self.table.size:
            return False
        kind, value, phase = self.table.kind_list[token_id], self.table.value_list[token_id], self.phase
        if kind >= Kind.HOLE:
            return self._accepts_infill(kind)
        if phase == Phase.START:
            return kind == Kind.BAR
        if phase in (Phase.BAR, Phase.TIMESIG, Phase.POSITION):
            if kind in (Kind.BAR, Kind.EOS):
                return True
            if kind == Kind.BEAT:
                return self.beat < value < self.clock.length
            if kind == Kind.TIMESIG:
                return phase == Phase.BAR and self.clock.part == 0
            if phase != Phase.POSITION:
                return False
            if kind == Kind.PITCH:
                return True
            if kind == Kind.TEMPO:
                return not (self.tempo_done or self.has_note)
            if kind == Kind.CHORD:
                return not (self.chord_done or self.has_note)
            return False
        if phase == Phase.PITCH:
            return kind == Kind.VELOCITY
        if phase == Phase.VELOCITY:
            return kind == Kind.DURATION and value > 0
        return kind == Kind.PAD

    def _accepts_infill(self, kind: int) -> bool:
        """Infill_Hole once, at a bar line; Infill_Fill after the suffix; Infill_End after the middle."""
        at_bar_line = self.phase in (Phase.START, Phase.BAR, Phase.TIMESIG, Phase.POSITION)
        if kind == Kind.HOLE:
            return at_bar_line and self.hole_clock is None
        if kind == Kind.FILL:
            return at_bar_line and self.hole_clock is not None and not self.filling
        return self.filling and self.phase != Phase.START and at_bar_line

    def allowed(self) -> np.ndarray:
        """``(vocab_size,)`` bool: the tokens that keep the sequence valid now."""
        masks, phase = self.table.masks, self.phase
        if phase == Phase.START:
            return masks[Kind.BAR].copy()
        if phase == Phase.PITCH:
            return masks[Kind.VELOCITY].copy()
        if phase == Phase.VELOCITY:
            return masks[Kind.DURATION].copy()
        if phase == Phase.END:
            return masks[Kind.PAD].copy()
        allowed = masks[Kind.BAR] | masks[Kind.EOS]
        allowed[self.table.beat_ids[self.beat + 1 : self.clock.length]] = True
        if phase == Phase.BAR and self.clock.part == 0:
            allowed |= masks[Kind.TIMESIG]
        if phase == Phase.POSITION:
            allowed |= masks[Kind.PITCH]
            if not (self.tempo_done or self.has_note):
                allowed |= masks[Kind.TEMPO]
            if not (self.chord_done or self.has_note):
                allowed |= masks[Kind.CHORD]
        return allowed

    def advance(self, token_id: int) -> None:
        """Feed the next token; raises ValueError if the grammar does not allow it here."""
        token_id = int(token_id)
        if not self.accepts(token_id):
            raise ValueError(f"token id {token_id} is not allowed after phase {self.phase.name}")
        self._apply(self.table.kind_list[token_id], self.table.value_list[token_id])

    def next_bar_time(self) -> Fraction:
        """Beats to the end of the current bar part, where the next ``Bar`` starts (0 before any Bar)."""
        sub_beats = self.clock.start + self.clock.length if self.clock.bars else 0
        return Fraction(sub_beats, SUB_BEATS_PER_BEAT)

    def abandon_note(self) -> None:
        """Drop a note whose Pitch (and Velocity) came but not its Duration (used by the decoder)."""
        if self.phase in (Phase.PITCH, Phase.VELOCITY):
            self.phase = Phase.POSITION

    def _apply(self, kind: int, value: int) -> None:
        if kind == Kind.BAR:
            self.clock.next_bar()
            self.phase, self.beat = Phase.BAR, -1
        elif kind == Kind.TIMESIG:
            self.clock.set_meter(METERS[value])
            self.phase = Phase.TIMESIG
        elif kind == Kind.BEAT:
            self.phase, self.beat = Phase.POSITION, value
            self.tempo_done = self.chord_done = self.has_note = False
        elif kind == Kind.TEMPO:
            self.tempo_done = True
        elif kind == Kind.CHORD:
            self.chord_done = True
        elif kind == Kind.PITCH:
            self.phase = Phase.PITCH
        elif kind == Kind.VELOCITY:
            self.phase = Phase.VELOCITY
        elif kind == Kind.DURATION:
            self.phase, self.has_note = Phase.POSITION, True
        elif kind in (Kind.EOS, Kind.FILL_END):
            self.phase = Phase.END
        elif kind == Kind.HOLE:
            self.hole_clock = replace(self.clock)
            self.phase, self.beat = Phase.START, -1
        elif kind == Kind.FILL:
            self.clock, self.filling = replace(self.hole_clock), True
            self.phase, self.beat = Phase.START, -1
