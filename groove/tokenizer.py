"""``GrooveTokenizer``: the 3-track event format of the Groove2Groove experiments (794 tokens).

A piece is ``Start_None``, then note events in time order, then ``End_None``. Notes are
``NoteOn_<track>:<pitch>`` / ``NoteOff_<track>:<pitch>`` for the roles bass, drums and accompaniment
(how MIDI tracks get their role: ``groove.roles``); time advances with ``TimeShift_<beats>:<offset>``
tokens on a grid of 12 ticks per beat (semantics and vocabulary: ``groove.vocab``). At one tick, note-offs
come before note-ons, each sorted by (track, pitch). The encoder never crosses a 4/4 bar line with one
shift: it stops on every bar line before the next event (at most one extra token per bar), so that every
bar start is a token boundary where the sequence can be cut and decoded from time 0 bar-aligned
(``bar_starts``). Velocities and tempo are not represented.

``decode`` returns a ``muspy.Music`` at resolution 12 with three tracks, always in the order bass
(program 33), drums (``is_drum``), accompaniment (program 0); invalid events are skipped and counted
(``decode_with_report``), notes still sounding at the end are closed there (at least one tick long).
The round trip MIDI -> ids -> Music is exact for notes on the 1/12-beat grid (times, pitches, roles).
``write_midi`` writes that Music with muspy's own writer; ``notes`` reads it through ``music_to_midi``.

A note sounds until its NoteOff, across any number of bars (``holds_notes``): sampling can close the
notes held ``hold_bars`` bars (``constraint_state(hold_bars)``, ``groove.constraints``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Iterable

import miditoolkit
import numpy as np

from groove.augment import Augmentation, AugmentedPiece, augment
from groove.constraints import ClosedNote, GrooveConstraintState
from groove.roles import (
    DRUMS,
    explain_roles,
    TICKS_PER_BAR,
    TICKS_PER_BEAT,
    TRACKS,
    GridNote,
    GroovePiece,
    piece_from_midi,
)
from groove.vocab import (
    END,
    NOTE_OFF,
    NOTE_ON,
    START,
    TIME_SHIFT,
    GrooveTokenTable,
    format_tokens,
    note_token,
    shift_target,
    shift_token,
    shifts_between,
)
from tokenization import BaseTokenizer, PieceNote, TokenizationError, load_midi, midi_notes, source_name

if TYPE_CHECKING:  # imported where used: muspy loads music21 and pretty_midi, which encoding does not need
    import muspy

DECODE_PROGRAMS = (33, 0, 0)  # GM program of the decoded bass, drums, accompaniment tracks
DECODE_VELOCITY = 80  # velocity of decoded notes (the format has none)
DECODE_QPM = 120.0  # tempo written into decoded pieces (the format has none)
DEFAULT_VELOCITY = 64  # velocity given to muspy notes that have none, when converting to MIDI


def music_to_midi(music: muspy.Music) -> miditoolkit.MidiFile:
    """The same notes as a ``miditoolkit.MidiFile`` (ticks per beat = the Music's resolution)."""
    import muspy
    midi = miditoolkit.MidiFile(ticks_per_beat=music.resolution or muspy.DEFAULT_RESOLUTION)
    for track in music.tracks:
        inst = miditoolkit.Instrument(program=track.program, is_drum=track.is_drum, name=track.name or "")
        inst.notes = [
            miditoolkit.Note(
                velocity=DEFAULT_VELOCITY if n.velocity is None else n.velocity,
                pitch=n.pitch,
                start=n.time,
                end=n.time + n.duration,
            )
            for n in track.notes
        ]
        midi.instruments.append(inst)
    return midi


def notes_to_music(notes: Iterable[ClosedNote]) -> muspy.Music:
    import muspy
    tracks = [
        muspy.Track(program=program, is_drum=role == DRUMS, name=name, notes=[])
        for role, (name, program) in enumerate(zip(TRACKS, DECODE_PROGRAMS))
    ]
    for n in sorted(notes, key=lambda n: (n.start, n.track, n.pitch)):
        note = muspy.Note(time=n.start, pitch=n.pitch, duration=n.end - n.start, velocity=DECODE_VELOCITY)
        tracks[n.track].notes.append(note)
    return muspy.Music(
        resolution=TICKS_PER_BEAT,
        tempos=[muspy.Tempo(time=0, qpm=DECODE_QPM)],
        time_signatures=[muspy.TimeSignature(time=0, numerator=4, denominator=4)],
        tracks=tracks,
    )


def tracks_to_tokens(tracks: list[list[GridNote]]) -> list[str]:
    """Token strings (with Start and End) for notes per role, stopping on every bar line."""
    events = sorted(
        (tick, is_on, role, pitch)
        for role, notes in enumerate(tracks)
        for start, end, pitch in notes
        for tick, is_on in ((start, 1), (end, 0))
    )
    tokens, time = [START], 0
    for tick, is_on, role, pitch in events:
        if tick > time:
            stops = list(range((time // TICKS_PER_BAR + 1) * TICKS_PER_BAR, tick, TICKS_PER_BAR)) + [tick]
            for stop in stops:
                tokens += [shift_token(b, o) for b, o in shifts_between(time, stop)]
                time = stop
        tokens.append(note_token("NoteOn" if is_on else "NoteOff", role, pitch))
    return tokens + [END]


class GrooveTokenizer(BaseTokenizer, token_format="groove"):
    """Bass / drums / accompaniment events with beat-relative time shifts (see the module docstring)."""

    special_tokens: ClassVar[tuple[str, ...]] = (START, END)
    holds_notes: ClassVar[bool] = True

    def __init__(self) -> None:
        super().__init__()
        self.table = GrooveTokenTable.from_vocab(self.vocab)

    # ---------------------------------------------------------------- hooks
    def _build_vocab_tokens(self) -> list[str]:
        return format_tokens()

    def _load(self, source: Any) -> miditoolkit.MidiFile:
        muspy = sys.modules.get("muspy")  # a muspy.Music can only come from a program that imported it
        if muspy is not None and isinstance(source, muspy.Music):
            return music_to_midi(source)
        return load_midi(source)

    def describe_tracks(self, midi: miditoolkit.MidiFile) -> list[tuple[str, bool]]:
        """Which track became bass, drums and accompaniment, and why; a missing role is a warning."""
        return [(f"{choice.role}: {choice.why}" if choice.track is None else f"{choice.role} = {choice.why}",
                 choice.track is None) for choice in explain_roles(midi)]

    def _encode_midi(self, midi: miditoolkit.MidiFile) -> list[str]:
        piece = piece_from_midi(midi, "<midi>")
        if piece.is_empty:
            raise TokenizationError(piece.name, "no notes")
        return tracks_to_tokens(piece.tracks())

    def _decode_tokens(self, tokens: list[str]) -> tuple[muspy.Music, int]:
        state = self.constraint_state()
        notes, skipped = [], 0
        for token in tokens:
            idx = self.vocab.ids.get(token, -1)
            if not state.accepts(idx):
                skipped += 1
                continue
            closed = state.advance_note(idx)
            if closed is not None:
                notes.append(closed)
        return notes_to_music(notes + state.close_all()), skipped

    def _write_midi(self, piece: muspy.Music, path: Path) -> None:
        piece.write_midi(str(path))

    def _piece_notes(self, piece: muspy.Music) -> list[PieceNote]:
        return midi_notes(music_to_midi(piece))

    # ----------------------------------------------------------- properties
    @property
    def pad_id(self) -> int:
        """Padding is the end token (the vocabulary has no PAD; padded positions are out of the loss)."""
        return self.table.end_id

    @property
    def start_id(self) -> int:
        return self.table.start_id

    # -------------------------------------------------------- augmentation
    def parse(self, source: Any) -> GroovePiece:
        """The notes per role of a path, bytes, MIDI object or ``muspy.Music`` (reusable across draws)."""
        if isinstance(source, GroovePiece):
            return source
        name = source_name(source)
        piece = piece_from_midi(self._load(source), name)
        if piece.is_empty:
            raise TokenizationError(name, "no notes")
        return piece

    def augment(
        self, source: Any, rng: np.random.Generator, settings: Augmentation | None = None
    ) -> AugmentedPiece:
        """One draw of the training augmentation (``groove.augment``) of a source or a parsed piece."""
        return augment(self.parse(source), rng, settings or Augmentation())

    def encode_augmented(
        self, source: Any, rng: np.random.Generator, settings: Augmentation | None = None
    ) -> list[int]:
        """Token ids of one augmentation draw: random accompaniment, skipped bars, dropped tracks, transposition."""
        return self.strings_to_ids(tracks_to_tokens(self.augment(source, rng, settings).tracks))

    def transpose(self, ids: Iterable[int], semitones: int) -> list[int]:
        """Shift the bass and accompaniment pitches (never drums); ValueError if a pitch leaves 0..127."""
        ids = np.asarray(list(ids), dtype=np.int64)  # (N,)
        if ids.size and (ids.min() < 0 or ids.max() >= len(self.vocab)):
            raise ValueError("token id outside the vocabulary")
        kind, track = self.table.kind[ids], self.table.track[ids]
        moved = ((kind == NOTE_ON) | (kind == NOTE_OFF)) & (track != DRUMS)
        pitch = self.table.pitch[ids[moved]] + semitones
        if pitch.size and (pitch.min() < 0 or pitch.max() > 127):
            raise ValueError(f"transposing by {semitones} moves pitches outside 0..127")
        which = np.where(kind[moved] == NOTE_ON, 0, 1)  # 0: note-on table, 1: note-off table
        out = ids.copy()
        out[moved] = np.stack([self.table.note_on, self.table.note_off])[which, track[moved], pitch]
        return out.tolist()

    def bar_starts(self, ids: Iterable[int]) -> list[int]:
        """Indices of the tokens at which a 4/4 bar starts (time exactly on a bar line, before End).

        Index 0 is always one; then, after each time shift landing on a bar line, the first token that is
        not a note-off (the notes ending on the bar line belong to the bar before). A sequence cut at one
        of them decodes from time 0 with its bars aligned (the encoder stops on every bar line); only the
        note-offs of notes sounding across the bar line are then invalid.
        """
        starts, time, on_line = [], 0, True
        for i, idx in enumerate(int(x) for x in ids):
            if idx == self.table.end_id:
                break
            known = 0 <= idx < len(self.vocab)
            if on_line and not (i > 0 and known and self.table.kind[idx] == NOTE_OFF):
                starts.append(i)
                on_line = False
            if known and self.table.kind[idx] == TIME_SHIFT:
                target = shift_target(time, int(self.table.beats[idx]), int(self.table.offset[idx]))
                if target > time:
                    time, on_line = target, target % TICKS_PER_BAR == 0
        return starts

    def _constraint_state(self, hold_bars: int | None) -> GrooveConstraintState:
        """Incremental grammar for constrained sampling (``allowed``, ``advance``), closing the notes held
        ``hold_bars`` 4/4 bars when given; see ``groove.constraints``."""
        return GrooveConstraintState(self.table, None if hold_bars is None else hold_bars * TICKS_PER_BAR)
