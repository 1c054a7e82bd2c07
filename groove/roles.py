"""Track roles of a MIDI file for the 3-track Groove2Groove format, and the quantised notes per role.

Rules (applied to every instrument of a ``miditoolkit.MidiFile`` that has notes):

* **drums**: ``is_drum`` (miditoolkit sets it for MIDI channel 10), or a name containing a drum-ish
  word ("drum", "kit", "perc"). Several drum tracks: the one with the most notes is used.
* **bass**: not drums, and GM program 32-39 (the bass family) or a name containing "bass"
  (Band-in-a-Box names such as "BB Bass" included). Several: the one with the most notes; the others
  become accompaniment candidates.
* **accompaniment**: every remaining pitched track is a candidate; ``encode`` uses the one with the most
  notes (ties: the first in file order), the training augmentation draws one at random.

Times are quantised to the format's grid (12 ticks per beat, round half up); a note shorter than one
tick after quantisation lasts one tick; a note that starts while the same pitch still sounds on the same
track ends the earlier note (a duplicate starting at the same tick is dropped).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import miditoolkit

from tokenization import declared_meters

TRACKS = ("bass", "drums", "accompaniment")  # role names, in token and decoded-track order
BASS, DRUMS, ACCOMPANIMENT = range(3)  # role indices into TRACKS
TICKS_PER_BEAT = 12  # the format's time grid
BEATS_PER_BAR = 4  # bars are taken as 4/4 (bar_starts, skipped bars, drum patterns)
TICKS_PER_BAR = TICKS_PER_BEAT * BEATS_PER_BAR
DRUM_WORDS = ("drum", "kit", "perc")  # lower-case name fragments that mark a drum track
BASS_PROGRAMS = range(32, 40)  # General MIDI bass family (0-based programs)

# A note on the grid: (start tick, end tick, pitch), end > start.
GridNote = tuple[int, int, int]


@dataclass
class GroovePiece:
    """One MIDI file's notes per role, on the 12-ticks-per-beat grid; input of encoding and augmentation."""

    name: str  # source name, for error messages
    bass: list[GridNote] = field(default_factory=list)  # the bass track (empty if none)
    drums: list[GridNote] = field(default_factory=list)  # the drum track (empty if none)
    candidates: list[list[GridNote]] = field(default_factory=list)  # accompaniment candidates, default first

    def tracks(self, accompaniment: int = 0) -> list[list[GridNote]]:
        """Notes per role (bass, drums, accompaniment) with the given accompaniment candidate."""
        acc = self.candidates[accompaniment] if self.candidates else []
        return [self.bass, self.drums, acc]

    @property
    def is_empty(self) -> bool:
        return not (self.bass or self.drums or any(self.candidates))


def is_drum_track(inst: miditoolkit.Instrument) -> bool:
    name = (inst.name or "").lower()
    return bool(inst.is_drum) or any(word in name for word in DRUM_WORDS)


def is_bass_track(inst: miditoolkit.Instrument) -> bool:
    return not is_drum_track(inst) and (int(inst.program) in BASS_PROGRAMS or "bass" in (inst.name or "").lower())


def quantise(tick: int, ticks_per_beat: int) -> int:
    """A MIDI tick on the 12-per-beat grid (round half up, integer arithmetic)."""
    return (2 * tick * TICKS_PER_BEAT + ticks_per_beat) // (2 * ticks_per_beat)


def clean_notes(notes: list[GridNote]) -> list[GridNote]:
    """Sorted notes of one track without zero-length notes or overlaps of the same pitch."""
    notes = sorted((start, max(end, start + 1), pitch) for start, end, pitch in notes)
    out: list[GridNote] = []
    sounding: dict[int, int] = {}  # pitch -> index in out of its latest note
    for start, end, pitch in notes:
        prev = sounding.get(pitch)
        if prev is not None and out[prev][1] > start:
            if out[prev][0] == start:  # duplicate onset: keep the longer note
                out[prev] = (start, max(end, out[prev][1]), pitch)
                continue
            out[prev] = (out[prev][0], start, pitch)
        sounding[pitch] = len(out)
        out.append((start, end, pitch))
    return sorted(out)


def grid_notes(inst: miditoolkit.Instrument, ticks_per_beat: int) -> list[GridNote]:
    return clean_notes(
        [(quantise(n.start, ticks_per_beat), quantise(n.end, ticks_per_beat), n.pitch) for n in inst.notes]
    )


def _most_notes_first(insts: list[tuple[int, miditoolkit.Instrument]]) -> list[miditoolkit.Instrument]:
    return [inst for _, inst in sorted(insts, key=lambda item: (-len(item[1].notes), item[0]))]


def piece_from_midi(midi: miditoolkit.MidiFile, name: str) -> GroovePiece:
    """Assign roles to the instruments of ``midi`` (rules in the module docstring) and quantise them."""
    tpb = midi.ticks_per_beat
    insts = [(i, inst) for i, inst in enumerate(midi.instruments) if inst.notes]
    drums = _most_notes_first([item for item in insts if is_drum_track(item[1])])
    basses = _most_notes_first([item for item in insts if is_bass_track(item[1])])
    chosen = {id(inst) for inst in drums[:1] + basses[:1]}
    others = _most_notes_first([item for item in insts if not is_drum_track(item[1]) and id(item[1]) not in chosen])
    return GroovePiece(
        name=name,
        bass=grid_notes(basses[0], tpb) if basses else [],
        drums=grid_notes(drums[0], tpb) if drums else [],
        candidates=[grid_notes(inst, tpb) for inst in others],
    )


def meter_problem(midi: miditoolkit.MidiFile) -> str | None:
    """The first meter ``midi`` declares other than 4/4, the format's only one, in words; None if none."""
    meters = [m for m in declared_meters(midi) if m != "4/4"]
    return f"meter {meters[0]} (the groove format is 4/4)" if meters else None


def band_problem(midi: miditoolkit.MidiFile, name: str) -> str | None:
    """Why ``midi`` is not a full band piece for the format (a meter other than 4/4, or a role with no
    track), or None when it is one."""
    meter = meter_problem(midi)
    if meter:
        return meter
    missing = [role for role, notes in zip(TRACKS, piece_from_midi(midi, name).tracks()) if not notes]
    if missing:
        return "no " + " and no ".join(missing) + " track"
    return None


@dataclass
class RoleChoice:
    role: str  # one of TRACKS
    track: str | None  # the chosen track's name (None: no track for this role)
    why: str  # in words: which rule chose it, or why there is none


def _describe(index: int, inst: miditoolkit.Instrument) -> str:
    channel = ", channel 10" if inst.is_drum else ""
    name = inst.name.strip() or "(no name)"
    return f"track {index + 1} {name!r} (program {inst.program}{channel}, {len(inst.notes)} notes)"


def explain_roles(midi: miditoolkit.MidiFile) -> list[RoleChoice]:
    """Which track `piece_from_midi` takes for each role, and why (the module docstring's rules)."""
    insts = [(i, inst) for i, inst in enumerate(midi.instruments) if inst.notes]
    drums = _most_notes_first([item for item in insts if is_drum_track(item[1])])
    basses = _most_notes_first([item for item in insts if is_bass_track(item[1])])
    chosen = {id(inst) for inst in drums[:1] + basses[:1]}
    others = _most_notes_first([item for item in insts if not is_drum_track(item[1]) and id(item[1]) not in chosen])
    index = {id(inst): i for i, inst in insts}
    out = []
    for role, found, rule in (("bass", basses, "a GM bass program (33-40) or 'bass' in its name"),
                              ("drums", drums, "channel 10 or 'drum', 'kit' or 'perc' in its name"),
                              ("accompaniment", others, "a pitched track, neither drums nor the bass")):
        if not found:
            out.append(RoleChoice(role, None, f"no track has {rule}: the model writes this part on its own"))
            continue
        more = f"; the most notes of {len(found)}" if len(found) > 1 else ""
        out.append(RoleChoice(role, found[0].name, f"{_describe(index[id(found[0])], found[0])}: {rule}{more}"))
    return out
