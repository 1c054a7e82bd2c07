"""REMI tokenizer for pop piano (spe_notes.md section 5), with our TimeSig extension.

Encoding (any ``ticks_per_beat``; all pitched tracks merged, drum tracks ignored):

* onsets are rounded to the nearest sub-beat (16th note, half up); durations likewise, at least 1 and
  at most 16 sub-beats (longer notes are clipped);
* pitches outside 22..107 are dropped, velocities clamp to 40..86 and round (half up) to the even levels;
* bars follow the meter policy of ``remi.meter`` (``time_signatures=True``: the file's time-signature
  map unless it is not trusted, e.g. POP909's 1/4, in which case the meter and its downbeat phase are
  inferred from the onsets) or are all 4/4 from the file's start; a meter change that does not fall on
  a bar line takes effect at the next bar line; bars longer than 16 sub-beats are written as several
  ``Bar`` parts (see ``remi.vocab``);
* the song starts at the bar of its first note: leading bars without notes (silence, tempo changes)
  are left out unless ``keep_leading_silence=True`` (then it starts at the file's first bar);
* the tempo in force where the song starts (MIDI's 120 bpm if the file sets none) is written at
  ``Beat_0`` of the first bar, then each change of the (rounded, clamped) tempo at its sub-beat;
  changes after the last note onset are dropped;
* chords (chorder's rule, ``remi.chords``) are written at the beat where the chord label changes,
  starting with the first beat; ``Chord_N_N`` where the music stops being a recognised chord;
* the sequence ends with ``EOS_None``.

What was changed on the way is counted in :class:`EncodeStats` (with the meter used and why) (``tok.last_encode_stats``,
``tok.encode_with_report``). Decoding gives a one-track piano ``miditoolkit.MidiFile`` at 480 ticks
per beat, with tempi, time signatures and the chords as markers; invalid events are skipped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Sequence

import miditoolkit
import numpy as np
from miditoolkit import Instrument, Marker, Note, TempoChange, TimeSignature

from remi.chords import beat_chords
from remi.grammar import Kind, Phase, REMIConstraintState, REMITokenTable
from remi.infill import arrange as arrange_bars, restore_order
from remi.meter import decide_meter
from remi.vocab import (
    CHORD_QUALITIES,
    CHORD_ROOTS,
    DEFAULT_BPM,
    DEFAULT_METER,
    INFILL_TOKENS,
    MAX_DURATION,
    METERS,
    PITCH_RANGE,
    SUB_BEATS_PER_BEAT,
    TEMPI,
    TICKS_PER_BEAT,
    TICKS_PER_SUB_BEAT,
    VELOCITIES,
    build_tokens,
    chord_token,
    meter_length,
    meter_parts,
    meter_token,
    nearest_meter,
)
from tokenization import BaseTokenizer, TokenizationError
from tokenization.chords import Chord
from tokenization.infill import Arrangement

logger = logging.getLogger(__name__)

PITCH_TOKENS = {p: f"Note_Pitch_{p}" for p in range(PITCH_RANGE[0], PITCH_RANGE[1] + 1)}
VELOCITY_TOKENS = {v: f"Note_Velocity_{v}" for v in VELOCITIES}
DURATION_TOKENS = {d: f"Note_Duration_{d * TICKS_PER_SUB_BEAT}" for d in range(MAX_DURATION + 1)}
BEAT_TOKENS = [f"Beat_{i}" for i in range(16)]


@dataclass
class EncodeStats:
    """What the last ``encode`` changed or dropped in its file."""

    notes_in: int = 0  # pitched (non-drum) notes in the file
    notes_encoded: int = 0  # notes written as tokens
    pitch_dropped: int = 0  # notes dropped: pitch outside 22..107
    velocity_clamped: int = 0  # notes whose velocity was outside 40..86
    duration_clipped: int = 0  # notes longer than 16 sub-beats, clipped
    drum_notes_ignored: int = 0  # notes of drum tracks (not encoded)
    tempo_clamped: int = 0  # tempo changes outside 32..224 bpm
    tempo_dropped: int = 0  # tempo changes after the last note onset
    meters_remapped: int = 0  # time signatures not in remi.vocab.METERS, mapped to the nearest
    meter_changes_moved: int = 0  # meter changes not on a bar line, moved to the next one
    leading_bars_dropped: int = 0  # bars before the first note's bar, left out (keep_leading_silence=False)
    start: int = 0  # sub-beat of the file where the encoded song starts (< 0: before the file's tick 0)
    meter: str = ""  # meter followed: "4/4", "3/4" ... or "declared map" (the file's meter changes)
    meter_source: str = ""  # "declared", "default" (none declared: 4/4), "inferred" or "" (4/4 vocabulary)
    meter_reason: str = ""  # why that meter, in words (see remi.meter)
    bar_ticks: list[int] = field(default_factory=list)  # file tick where each encoded Bar token's bar starts


class REMITokenizer(BaseTokenizer, token_format="remi"):
    """REMI events for (pop) piano: Bar, Beat, Tempo, Chord, Note triples; optional TimeSig."""

    expressive_types = ("Note_Velocity", "Tempo")  # a played-again passage keeps its notes, not its touch
    position_types = ("Bar", "Beat")  # the last of them says where in the bar the next token goes

    def __init__(self, time_signatures: bool = True, keep_leading_silence: bool = False, infill: bool = False):
        self.time_signatures = time_signatures  # write TimeSig tokens and follow the meter policy
        self.keep_leading_silence = keep_leading_silence  # start at the file's first bar, not the first note's
        self.infill = infill  # add the fill-in-the-middle markers (remi.infill) at the end of the vocabulary
        super().__init__()
        self.table = REMITokenTable(self.vocab)  # per-id kind/value, for the grammar and the decoder
        self.bar_id = self.vocab["Bar_None"]
        self.last_encode_stats = EncodeStats()  # filled by every encode
        self._transpose_tables: dict[int, np.ndarray] = {}  # semitones -> id lookup (-1: out of range)

    def _build_vocab_tokens(self) -> list[str]:
        return build_tokens(self.time_signatures, self.infill)

    def config(self) -> dict[str, Any]:
        """Constructor arguments; ``infill`` only when set, so plain vocabularies keep their saved form."""
        config = {"time_signatures": self.time_signatures, "keep_leading_silence": self.keep_leading_silence}
        return {**config, "infill": True} if self.infill else config

    def with_infill(self) -> REMITokenizer:
        """The same tokenizer with the fill-in-the-middle markers appended (every other id unchanged)."""
        return REMITokenizer(**{**self.config(), "infill": True})

    @property
    def start_id(self) -> int:
        """A piece starts with a bar line (``Bar_None``)."""
        return self.bar_id

    def opening(self) -> list[list[int]]:
        """A piece opens ``Bar [TimeSig] Beat_0 Tempo``: its first bar declares its meter (with time
        signatures), and the tempo in force is written at its first position (``_tempo_events``)."""
        meters = [self.vocab.by_type("TimeSig")] if self.time_signatures else []
        return [*meters, [self.vocab["Beat_0"]], self.vocab.by_type("Tempo")]

    def meters_followed(self, midi: miditoolkit.MidiFile) -> list[str]:
        """The meter the meter policy chose (``EncodeStats.meter``), else the file's time signatures."""
        meter = self.last_encode_stats.meter
        return [meter] if meter and meter != "declared map" else super().meters_followed(midi)

    def time_origin(self, source: Any) -> float:
        """Beats from the file's tick 0 to the encoded song's first bar line (negative for a first
        bar that starts before tick 0, see ``_bar_grid``); the decode's grid is the encode's, shifted."""
        self.encode(source)
        return self.last_encode_stats.start / SUB_BEATS_PER_BEAT

    # ---------------------------------------------------------------- encode
    def encode_with_report(self, source: Any) -> tuple[list[int], EncodeStats]:
        """``encode`` plus the counts of what was clamped, clipped or dropped."""
        ids = self.encode(source)
        return ids, self.last_encode_stats

    def _encode_midi(self, midi: miditoolkit.MidiFile) -> list[str]:
        stats = EncodeStats()
        self.last_encode_stats = stats
        tpq = midi.ticks_per_beat
        pitched = [inst.notes for inst in midi.instruments if not inst.is_drum]
        stats.drum_notes_ignored = sum(len(inst.notes) for inst in midi.instruments if inst.is_drum)
        raw = np.array([(n.start, n.end, n.pitch, n.velocity) for notes in pitched for n in notes], dtype=np.int64)
        stats.notes_in = len(raw)
        if not len(raw):
            raise TokenizationError("<midi>", "no pitched (non-drum) notes")
        raw = raw.reshape(-1, 4)  # (N, [start, end, pitch, velocity])
        in_range = (raw[:, 2] >= PITCH_RANGE[0]) & (raw[:, 2] <= PITCH_RANGE[1])
        stats.pitch_dropped = int((~in_range).sum())
        raw = raw[in_range]
        if not len(raw):
            raise TokenizationError("<midi>", f"no notes with a pitch in {PITCH_RANGE[0]}..{PITCH_RANGE[1]}")
        if stats.pitch_dropped:
            logger.debug("dropped %d notes outside the pitch range", stats.pitch_dropped)

        onset = self._to_grid(raw[:, 0], tpq)
        duration = self._to_grid(raw[:, 1] - raw[:, 0], tpq)
        stats.duration_clipped = int((duration > MAX_DURATION).sum())
        duration = np.clip(duration, 1, MAX_DURATION)
        pitch = raw[:, 2]
        velocity = raw[:, 3]
        stats.velocity_clamped = int(((velocity < VELOCITIES[0]) | (velocity > VELOCITIES[-1])).sum())
        velocity = np.clip(velocity, VELOCITIES[0], VELOCITIES[-1])
        velocity = VELOCITIES[0] + 2 * ((velocity - VELOCITIES[0] + 1) // 2)
        order = np.lexsort((velocity, duration, pitch, onset))
        onset, duration, pitch, velocity = onset[order], duration[order], pitch[order], velocity[order]
        stats.notes_encoded = len(onset)
        last = int(onset[-1])

        starts, part_meters, parts = self._bar_grid(midi, onset, duration, last, stats)
        first = 0
        if not self.keep_leading_silence:
            first = int(np.searchsorted(starts, onset[0], side="right")) - 1
            while parts[first] > 0:  # back to the first part of that bar
                first -= 1
        origin = int(starts[first])  # file sub-beat where the song starts; positions below are relative to it
        stats.start, stats.leading_bars_dropped = origin, sum(p == 0 for p in parts[:first])
        bar_starts = starts[first:] - origin
        bar_meters, written = [], None
        for meter, part in zip(part_meters[first:], parts[first:]):
            new = self.time_signatures and part == 0 and meter != written
            bar_meters.append(meter_token(meter) if new else None)
            written = meter if part == 0 else written
        onset, last = onset - origin, last - origin

        tempo_at = self._tempo_events(midi, origin, last, stats)
        chord_at = {}
        previous = None
        for beat, label in enumerate(beat_chords(onset, onset + duration, pitch, SUB_BEATS_PER_BEAT)):
            position = beat * SUB_BEATS_PER_BEAT
            if position > last:
                break
            if label != previous:
                chord_at[position] = label
                previous = label

        positions = np.array(sorted(set(onset.tolist()) | tempo_at.keys() | chord_at.keys()), dtype=np.int64)
        bars = (np.searchsorted(bar_starts, positions, side="right") - 1).tolist()
        offsets = (positions - bar_starts[bars]).tolist()

        tokens: list[str] = []
        onsets, pitches, velocities, durations = onset.tolist(), pitch.tolist(), velocity.tolist(), duration.tolist()
        note, count, bar = 0, len(onsets), -1
        for position, bar_index, offset in zip(positions.tolist(), bars, offsets):
            while bar < bar_index:
                bar += 1
                tokens.append("Bar_None")
                if bar_meters[bar] is not None:
                    tokens.append(bar_meters[bar])
            tokens.append(BEAT_TOKENS[offset])
            if position in tempo_at:
                tokens.append(tempo_at[position])
            if position in chord_at:
                tokens.append(chord_at[position])
            while note < count and onsets[note] == position:
                tokens += (
                    PITCH_TOKENS[pitches[note]],
                    VELOCITY_TOKENS[velocities[note]],
                    DURATION_TOKENS[durations[note]],
                )
                note += 1
        tokens.append("EOS_None")
        stats.bar_ticks = [int(start + origin) * tpq // SUB_BEATS_PER_BEAT for start in bar_starts[:bar + 1]]
        return tokens

    @staticmethod
    def _to_grid(ticks: np.ndarray, tpq: int) -> np.ndarray:
        """Ticks at ``tpq`` per beat -> nearest sub-beat (half up), exact integer arithmetic."""
        return (2 * SUB_BEATS_PER_BEAT * ticks + tpq) // (2 * tpq)

    def _tempo_events(self, midi: miditoolkit.MidiFile, origin: int, last: int, stats: EncodeStats) -> dict[int, str]:
        """``{sub-beat after origin: Tempo token}`` where the rounded tempo changes (always one at 0).

        ``origin`` and ``last`` are file sub-beats; the tempo in force at ``origin`` is written at 0.
        """
        level_at: dict[int, int] = {0: self._tempo_level(DEFAULT_BPM)}
        changes = sorted(midi.tempo_changes, key=lambda t: t.time)
        for change in changes:
            position = int(self._to_grid(np.int64(change.time), midi.ticks_per_beat))
            if position > last + origin:
                stats.tempo_dropped += 1
                continue
            if not TEMPI[0] <= change.tempo <= TEMPI[-1]:
                stats.tempo_clamped += 1
            level_at[position] = self._tempo_level(change.tempo)
        start = max(origin, 0)
        shifted = {0: max((p, level) for p, level in level_at.items() if p <= start)[1]}
        shifted.update({p - origin: level for p, level in level_at.items() if p > start})
        events, previous = {}, None
        for position in sorted(shifted):
            if shifted[position] != previous:
                events[position] = f"Tempo_{shifted[position]}"
                previous = shifted[position]
        return events

    @staticmethod
    def _tempo_level(bpm: float) -> int:
        index = int(np.clip(np.floor((bpm - TEMPI[0]) / 3 + 0.5), 0, len(TEMPI) - 1))
        return TEMPI[index]

    def _bar_grid(
        self, midi: miditoolkit.MidiFile, onset: np.ndarray, duration: np.ndarray, last: int, stats: EncodeStats
    ) -> tuple[np.ndarray, list[tuple[int, int]], list[int]]:
        """Every bar part up to ``last`` (file sub-beats): its start, its bar's meter, its index in the bar.

        The first bar may start before the file's tick 0 when an inferred downbeat phase puts it there.
        """
        changes: list[tuple[int, tuple[int, int]]] = []
        origin = 0
        if self.time_signatures:
            changes = self._declared_meters(midi, stats)
            decision = decide_meter(changes, onset, duration)
            stats.meter, stats.meter_source, stats.meter_reason = decision.label, decision.source, decision.reason
            logger.debug("meter %s (%s): %s", decision.label, decision.source, decision.reason)
            if decision.source == "inferred":
                bar = meter_length(decision.meter)
                origin = decision.phase - bar if decision.phase > 0 else 0
                changes = [(origin, decision.meter)]
        starts: list[int] = []
        meters: list[tuple[int, int]] = []
        parts: list[int] = []
        meter, position, index = DEFAULT_METER, origin, 0
        while position <= last:
            while index < len(changes) and changes[index][0] <= position:
                if changes[index][0] < position:
                    stats.meter_changes_moved += 1
                meter = changes[index][1]
                index += 1
            for part, length in enumerate(meter_parts(meter)):
                if position > last:
                    break
                starts.append(position)
                meters.append(meter)
                parts.append(part)
                position += length
        return np.array(starts, dtype=np.int64), meters, parts

    def _declared_meters(self, midi: miditoolkit.MidiFile, stats: EncodeStats) -> list[tuple[int, tuple[int, int]]]:
        """The file's time signatures as ``[(sub-beat, supported meter)]`` (the last one at a sub-beat wins)."""
        meter_at: dict[int, tuple[int, int]] = {}
        for change in sorted(midi.time_signature_changes, key=lambda t: t.time):
            meter = nearest_meter(change.numerator, change.denominator)
            if meter != (change.numerator, change.denominator):
                stats.meters_remapped += 1
                logger.warning(
                    "time signature %d/%d is not supported; using %d/%d",
                    change.numerator,
                    change.denominator,
                    *meter,
                )
            meter_at[int(self._to_grid(np.int64(change.time), midi.ticks_per_beat))] = meter
        return sorted(meter_at.items())

    # ---------------------------------------------------------------- decode
    def _constraint_state(self, hold_bars: int | None) -> REMIConstraintState:
        """Incremental grammar for constrained sampling (see ``remi.grammar``); a note ends by its duration."""
        return REMIConstraintState(self.table)

    def _decode_tokens(self, tokens: list[str]) -> tuple[miditoolkit.MidiFile, int]:
        tokens = restore_order(tokens, *INFILL_TOKENS)  # a fill-in-the-middle sequence: back in time order
        state = self.constraint_state()
        kinds, values = self.table.kind_list, self.table.value_list
        notes: list[Note] = []
        tempi: list[TempoChange] = []
        meters: list[TimeSignature] = []
        markers: list[Marker] = []
        meter, pitch, velocity, pending, skipped = DEFAULT_METER, 0, 0, 0, 0
        for token in tokens:
            token_id = self.vocab.ids[token]
            if not state.accepts(token_id):
                if state.phase in (Phase.PITCH, Phase.VELOCITY):
                    skipped, pending = skipped + pending, 0
                    state.abandon_note()
                if not state.accepts(token_id):
                    skipped += 1
                    continue
            state.advance(token_id)
            kind, value = kinds[token_id], values[token_id]
            tick = (state.clock.start + max(state.beat, 0)) * TICKS_PER_SUB_BEAT
            if kind == Kind.PITCH:
                pitch, pending = value, 1
            elif kind == Kind.VELOCITY:
                velocity, pending = value, 2
            elif kind == Kind.DURATION:
                notes.append(Note(velocity=velocity, pitch=pitch, start=tick, end=tick + value * TICKS_PER_SUB_BEAT))
                pending = 0
            elif kind == Kind.TEMPO:
                tempi.append(TempoChange(tempo=value, time=tick))
            elif kind == Kind.CHORD:
                markers.append(Marker(text=token[len("Chord_") :], time=tick))
            elif kind == Kind.TIMESIG and METERS[value] != meter:
                meter = METERS[value]
                meters.append(
                    TimeSignature(numerator=meter[0], denominator=meter[1], time=state.clock.start * TICKS_PER_SUB_BEAT)
                )
        skipped += pending
        if not meters or meters[0].time > 0:
            meters.insert(0, TimeSignature(numerator=DEFAULT_METER[0], denominator=DEFAULT_METER[1], time=0))

        midi = miditoolkit.MidiFile(ticks_per_beat=TICKS_PER_BEAT)
        piano = Instrument(program=0, is_drum=False, name="Piano")
        piano.notes = notes
        midi.instruments.append(piano)
        midi.tempo_changes, midi.time_signature_changes, midi.markers = tempi, meters, markers
        midi.max_tick = max((n.end for n in notes), default=0)
        return midi, skipped

    # ------------------------------------------------------ format features
    def chord_id(self, chord: Chord) -> int:
        """The id of ``Chord_<root>_<quality>`` (``Chord_N_N`` for None); ValueError for an unknown quality."""
        if chord is not None and chord[1] not in CHORD_QUALITIES:
            raise ValueError(f"unknown chord quality {chord[1]!r} (REMI's: {', '.join(CHORD_QUALITIES)})")
        return self.vocab[chord_token(*chord) if chord else chord_token(None, None)]

    def infill_markers(self) -> tuple[int, int, int] | None:
        """Ids of Infill_Hole, Infill_Fill and Infill_End (a vocabulary built with ``infill=True``), else None."""
        if not all(token in self.vocab for token in INFILL_TOKENS):
            return None
        hole, fill, end = (self.vocab[token] for token in INFILL_TOKENS)
        return hole, fill, end

    def arrange(self, ids: Sequence[int], first_bar: int, bars: int, lead_bars: int = 0) -> Arrangement:
        """``ids`` cut around a span of bars (``remi.infill.arrange``: the meter may not change inside it)."""
        return arrange_bars(self, ids, first_bar, bars, lead_bars)

    # ------------------------------------------------------- shared helpers
    def transpose(self, ids: Sequence[int], semitones: int) -> list[int]:
        """Shift pitches and chord roots by ``semitones``; ValueError if a pitch leaves 22..107."""
        table = self._transpose_table(int(semitones))
        array = np.asarray(ids, dtype=np.int64)
        if array.size and (array.min() < 0 or array.max() >= len(table)):
            raise ValueError(f"token ids outside the vocabulary (size {len(table)})")
        shifted = table[array]
        if (shifted < 0).any():
            bad = sorted({self.table.value_list[i] for i in array[shifted < 0].tolist()})
            raise ValueError(
                f"transposing by {semitones} moves pitches {bad} outside {PITCH_RANGE[0]}..{PITCH_RANGE[1]}"
            )
        return shifted.tolist()

    def _transpose_table(self, semitones: int) -> np.ndarray:
        """``(vocab_size,)`` id -> transposed id, -1 where the pitch would leave the range."""
        if semitones not in self._transpose_tables:
            table = np.arange(len(self.vocab), dtype=np.int64)
            for idx, token in enumerate(self.vocab.tokens):
                kind = self.table.kind_list[idx]
                if kind == Kind.PITCH:
                    target = f"Note_Pitch_{self.table.value_list[idx] + semitones}"
                    table[idx] = self.vocab.ids.get(target, -1)
                elif kind == Kind.CHORD and not token.endswith("N_N"):
                    root, quality = token[len("Chord_") :].split("_", 1)
                    shifted = CHORD_ROOTS[(CHORD_ROOTS.index(root) + semitones) % 12]
                    table[idx] = self.vocab[f"Chord_{shifted}_{quality}"]
            self._transpose_tables[semitones] = table
        return self._transpose_tables[semitones]

    def bar_starts(self, ids: Sequence[int]) -> list[int]:
        """Indices of the Bar tokens (where training crops may start)."""
        return np.flatnonzero(np.asarray(ids, dtype=np.int64) == self.bar_id).tolist()
