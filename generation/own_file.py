"""The user's file, kept: a continuation or an infill written into the MIDI file its prompt came from.

The tokenizer reads a prompt onto its own bar grid and quantises it, so the decoded piece is the
user's song moved and rounded. Written into the user's own file instead, only the generated bars change:

* the notes the tokenizer reads (those on pitched, non-drum channels) that start inside the generated
  bars are taken out; every other message stays at its tick, in its track, on its channel: the other
  notes, the drums, the tempo map, time and key signatures, markers, lyrics, controllers, programs;
* the generated notes are placed on the file's grid: the decoded piece's beat b is the file's beat
  ``origin + b`` (``BaseTokenizer.time_origin``), in the file's ticks per beat, so they follow its
  tempo map and meter (the model's own tempo tokens are not written);
* they go to the track and channel that held most of the notes taken out (when none was: most of the
  file's pitched notes); a generated note never overlaps a kept note of its pitch on that channel (one
  key cannot sound twice): it starts after the kept note ends, or ends where the kept note starts, and
  is left out when nothing of it remains.

A note is in the generated bars when its onset, rounded to the tokenizers' 16th-note grid as the
encoder rounds it, is: a note played a little before a bar line of the range belongs to the range.

The generated bars run from the first bar line after the prompt to the bar line after the last
generated token, in the decoded piece's beats; for an infill the user's bars after the range (the
result's last ``tail`` tokens) are not generated. Notes a continuation adds to the prompt's last bar
(before any new bar line) are added beside the user's notes there, which stay.

    own = OwnFile.of(tokenizer, "song.mid")          # None: the format cannot place pieces back
    placed = place(tokenizer, result, own)
    placed.midi.save("song_continued.mid")
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import mido

from generation.sampling import GenerationResult
from tokenization import BaseTokenizer, PieceNote

logger = logging.getLogger(__name__)

RENDERS = ("file", "tokens")  # where a prompted piece is written: into the prompt's own file, or as decoded tokens
DRUM_CHANNEL = 9  # General MIDI's percussion channel (0-based): no tokenizer reads it as pitched notes
GRID = 4  # onsets per beat of the formats that place pieces back (REMI's 16ths)


@dataclass
class OwnFile:
    """The user's file a prompt came from, and where the decoded piece sits in it."""

    path: Path  # the user's MIDI file
    origin: float  # beats from the file's tick 0 to the decoded piece's beat 0
    tail: int = 0  # tokens at the end of a result that are the user's own bars (an infill's suffix, its end token)

    @classmethod
    def of(cls, tokenizer: BaseTokenizer, path: str | Path, tail: int = 0) -> OwnFile | None:
        """None when the tokenizer's format cannot place its pieces back into a file."""
        origin = tokenizer.time_origin(Path(path))
        return None if origin is None else cls(Path(path), origin, tail)


def own_file(tokenizer: BaseTokenizer, prompt: str | Path | None, render: str, tail: int = 0) -> OwnFile | None:
    """Where a prompted piece is written (the CLI's and the studio's choice): into the prompt's own
    file (render "file", when the format can place pieces back), or None: as the decoded tokens."""
    if render not in RENDERS:
        raise ValueError(f"render must be one of {', '.join(RENDERS)}, got {render!r}")
    if prompt is None or render == "tokens":
        return None
    own = OwnFile.of(tokenizer, prompt, tail)
    if own is None:
        logger.info("%s pieces cannot be written into the prompt's own file: writing the decoded tokens",
                    type(tokenizer).__name__)
    return own


@dataclass
class Placed:
    """The user's file with the generated bars in it."""

    midi: mido.MidiFile  # to be saved as it is
    span: tuple[float, float]  # the generated bars (and any notes added before them), in the file's beats [start, end)
    added: int  # generated notes written
    removed: int  # the user's notes taken out (they started in the generated bars)
    track: int  # index of the track that received the generated notes


def place(tokenizer: BaseTokenizer, result: GenerationResult, own: OwnFile) -> Placed:
    """The user's file with the bars `result` generated after its prompt (see the module docstring)."""
    end = len(result.tokens) - own.tail
    notes = new_notes(tokenizer.notes(result.tokens[:result.prompt_len]), tokenizer.notes(result.tokens[:end]))
    start, stop = generated_bars(tokenizer, result, own.tail)
    midi = mido.MidiFile(own.path, clip=True)
    per_beat = midi.ticks_per_beat

    def tick(beat: float) -> int:
        return max(0, round((own.origin + beat) * per_beat))

    low, high = tick(start), tick(stop)
    half = per_beat / (2 * GRID)  # an onset this much before a grid line rounds up to it
    tracks = [absolute(track) for track in midi.tracks]  # each: [(tick, message)]
    dropped: list[set[int]] = [set() for _ in tracks]  # indices of the messages taken out, per track
    removed, held = Counter(), Counter()  # (track, channel) -> notes taken out / pitched notes
    kept: dict[tuple[int, int, int], list[tuple[int, int]]] = defaultdict(list)  # (track, channel, pitch) -> spans
    for index, events in enumerate(tracks):
        for on, off, channel in note_pairs(events):
            held[index, channel] += 1
            if low <= events[on][0] + half < high:
                dropped[index] |= {on, off}
                removed[index, channel] += 1
            else:
                kept[index, channel, events[on][1].note].append((events[on][0], events[off][0]))
    target, channel = (removed or held or Counter({(0, 0): 1})).most_common(1)[0][0]
    added = []
    for n in notes:
        span = around(tick(n.start), max(tick(n.end), tick(n.start) + 1), kept[target, channel, n.pitch])
        if span is not None:
            added.append((*span, n.pitch, n.velocity))
    out = mido.MidiFile(type=midi.type, ticks_per_beat=per_beat)
    for index, events in enumerate(tracks):
        rest = [event for i, event in enumerate(events) if i not in dropped[index]]
        out.tracks.append(relative(merged(rest, added, channel) if index == target else rest))
    first = min([start] + [n.start for n in notes])  # a continuation may add notes to the prompt's last bar
    span = (own.origin + first, own.origin + max(stop, start))
    return Placed(out, span, len(added), sum(removed.values()), target)


def generated_bars(tokenizer: BaseTokenizer, result: GenerationResult, tail: int = 0) -> tuple[float, float]:
    """The generated bars [start, stop) in the decoded piece's beats: from the first bar line after the
    prompt to the bar line after the last generated token (the last `tail` tokens are the user's)."""
    end = len(result.tokens) - tail
    return next_bar_time(tokenizer, result.tokens[:result.prompt_len]), next_bar_time(tokenizer, result.tokens[:end])


def around(start: int, end: int, taken: list[tuple[int, int]]) -> tuple[int, int] | None:
    """[start, end) shortened so as not to overlap any of the `taken` spans (kept notes of the same
    key): moved past one that sounds at its start, cut where a later one starts; None when nothing is left."""
    for begin, finish in sorted(taken):
        if begin <= start < finish:
            start = finish
        elif start < begin < end:
            end = begin
    return (start, end) if start < end else None


def new_notes(before: Sequence[PieceNote], after: Sequence[PieceNote]) -> list[PieceNote]:
    """The notes of a piece (`after`, `tokenizer.notes(ids)`) that the piece of its first tokens
    (`before`) lacks (a decode is in token order, so they are each track's last ones)."""
    have = Counter(note.track for note in before)
    seen: Counter = Counter()
    fresh = []
    for note in after:
        seen[note.track] += 1
        if seen[note.track] > have[note.track]:
            fresh.append(note)
    return fresh


def next_bar_time(tokenizer: BaseTokenizer, ids: Sequence[int]) -> float:
    """Where (in the decoded piece's beats) the first bar after `ids` begins."""
    state = tokenizer.constraint_state()
    for token in ids:
        state.advance(int(token))
    return float(state.next_bar_time())


def absolute(track: mido.MidiTrack) -> list[tuple[int, mido.Message]]:
    """(tick from the file's start, message) for every message of a track."""
    now, events = 0, []
    for message in track:
        now += message.time
        events.append((now, message))
    return events


def note_pairs(events: list[tuple[int, Any]]) -> list[tuple[int, int, int]]:
    """(index of the note-on, index of its note-off, channel) for every pitched note of a track (a
    note-on without its note-off is left alone); a note-off ends the earliest open note of its pitch."""
    open_notes: dict[tuple[int, int], deque] = defaultdict(deque)
    pairs = []
    for index, (_, message) in enumerate(events):
        if message.type not in ("note_on", "note_off") or message.channel == DRUM_CHANNEL:
            continue
        key = (message.channel, message.note)
        if message.type == "note_on" and message.velocity > 0:
            open_notes[key].append(index)
        elif open_notes[key]:
            pairs.append((open_notes[key].popleft(), index, message.channel))
    return pairs


def merged(events: list[tuple[int, Any]], notes: list[tuple[int, int, int, int]], channel: int
           ) -> list[tuple[int, Any]]:
    """A track's messages with the notes (start, end, pitch, velocity) added on `channel`; at one tick
    the new note-offs come first and the new note-ons last, and the end of the track follows them all."""
    ranked = [(tick, 1, i, message) for i, (tick, message) in enumerate(events) if message.type != "end_of_track"]
    for start, end, pitch, velocity in notes:
        ranked.append((start, 2, len(ranked), mido.Message("note_on", channel=channel, note=pitch, velocity=velocity)))
        ranked.append((end, 0, len(ranked), mido.Message("note_off", channel=channel, note=pitch, velocity=0)))
    ranked.sort(key=lambda item: item[:3])
    last = max((item[0] for item in ranked), default=0)
    last = max([last] + [tick for tick, message in events if message.type == "end_of_track"])
    return [(tick, message) for tick, _, _, message in ranked] + [(last, mido.MetaMessage("end_of_track"))]


def relative(events: list[tuple[int, Any]]) -> mido.MidiTrack:
    """A track from (tick, message) pairs in time order: delta times again."""
    track, previous = mido.MidiTrack(), 0
    for tick, message in events:
        track.append(message.copy(time=tick - previous))
        previous = tick
    return track
