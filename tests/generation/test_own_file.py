"""The user's file kept: generated bars placed into the prompt's own MIDI file, everything else untouched."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import mido
import pytest

from generation.own_file import OwnFile, absolute, around, note_pairs, place
from generation.sampling import GenerationResult
from remi import REMITokenizer

TPQ = 384  # not the tokenizer's resolution, so that ticks must be converted
BAR = 4 * TPQ
EARLY = 10  # ticks before a bar line: such a note belongs to the bar that follows


@pytest.fixture(scope="module")
def remi():
    return REMITokenizer()


def song(path: Path, pickup: bool = False) -> Path:
    """Four tracks: a conductor (tempo change, meter, markers), piano (channel 0, with lyrics and a
    pedal), bass (channel 1) and drums (channel 9); bar 0 is silent (the tokenizer starts at bar 1)
    but for the last beat's note with `pickup`; one piano note comes a little early before each of
    bars 3 and 5."""
    conductor = [(0, mido.MetaMessage("time_signature", numerator=4, denominator=4)),
                 (0, mido.MetaMessage("set_tempo", tempo=500000)), (0, mido.MetaMessage("key_signature", key="C")),
                 (2 * BAR, mido.MetaMessage("marker", text="verse")),
                 (3 * BAR, mido.MetaMessage("set_tempo", tempo=420000)),
                 (5 * BAR, mido.MetaMessage("marker", text="chorus"))]
    piano = [(0, mido.Message("program_change", channel=0, program=4))]
    bass, drums = [], []
    if pickup:
        piano += [(BAR - TPQ, mido.Message("note_on", channel=0, note=55, velocity=70)),
                  (BAR, mido.Message("note_off", channel=0, note=55, velocity=0))]
    for bar in range(1, 9):
        piano.append((bar * BAR, mido.MetaMessage("lyrics", text=f"la{bar}")))
        piano.append((bar * BAR, mido.Message("control_change", channel=0, control=64, value=127)))
        for beat in range(4):
            onset = bar * BAR + beat * TPQ - (EARLY if bar in (3, 5) and beat == 0 else 0)
            pitch = 60 + (bar + 2 * beat) % 12
            piano += [(onset, mido.Message("note_on", channel=0, note=pitch, velocity=70)),
                      (onset + TPQ // 2, mido.Message("note_off", channel=0, note=pitch, velocity=0))]
            drums += [(onset, mido.Message("note_on", channel=9, note=36, velocity=90)),
                      (onset + TPQ // 8, mido.Message("note_off", channel=9, note=36, velocity=0))]
        bass += [(bar * BAR, mido.Message("note_on", channel=1, note=36 + bar, velocity=80)),
                 (bar * BAR + 3 * TPQ, mido.Message("note_off", channel=1, note=36 + bar, velocity=0))]
    midi = mido.MidiFile(type=1, ticks_per_beat=TPQ)
    for events in (conductor, piano, bass, drums):
        events.sort(key=lambda event: event[0])
        track, now = mido.MidiTrack(), 0
        for tick, message in events:
            track.append(message.copy(time=tick - now))
            now = tick
        midi.tracks.append(track)
    midi.save(path)
    return path


def transposed(remi: REMITokenizer, ids: list[int], step: int) -> list[int]:
    strings = [f"Note_Pitch_{int(s.split('_')[-1]) + step}" if s.startswith("Note_Pitch_") else s
               for s in remi.tokens_to_strings(ids)]
    return remi.strings_to_ids(strings)


def messages(midi: mido.MidiFile) -> Counter:
    """(track, tick, message) of every message but the ends of tracks, as a multiset."""
    return Counter((index, tick, str(message.copy(time=0))) for index, track in enumerate(midi.tracks)
                   for tick, message in absolute(track) if message.type != "end_of_track")


def notes(midi: mido.MidiFile) -> list[tuple[int, int, int, int, int]]:
    """(track, channel, onset, offset, pitch) of every note."""
    found = []
    for index, track in enumerate(midi.tracks):
        events = absolute(track)
        found += [(index, channel, events[on][0], events[off][0], events[on][1].note)
                  for on, off, channel in note_pairs(events)]
    return found


@pytest.mark.parametrize("pickup", [False, True])
def test_a_continuation_changes_only_the_generated_bars(remi, tmp_path, pickup):
    path = song(tmp_path / "song.mid", pickup)
    own = OwnFile.of(remi, path)
    # a silent bar 0 is not encoded: the decoded beat 0 is the file's beat 4
    assert own.origin == (0.0 if pickup else 4.0)
    ids = [i for i in remi.encode(path) if i != remi.eos_id]
    starts = remi.bar_starts(ids)  # the file's bars 0 (the pickup's) or 1 to 8
    first = 3 if pickup else 2  # the generated bars are the file's bars 3 and 4
    prompt = ids[:starts[first]]
    result = GenerationResult(prompt + transposed(remi, ids[starts[first]:starts[first + 2]], 1), len(prompt), False,
                              0.0, 0)
    placed = place(remi, result, own)
    low, high = 3 * BAR, 5 * BAR  # the file's bars 3 and 4
    assert placed.span == (12.0, 20.0) and placed.track == 1  # the piano track lost most notes

    original = mido.MidiFile(path)
    taken = [n for n in notes(original) if n[1] != 9 and low <= n[2] + TPQ // 8 < high]
    assert {n[2] for n in taken} >= {low - EARLY} and all(n[2] != high - EARLY for n in taken)
    assert placed.removed == len(taken) == 10  # 8 piano notes (one played early), 2 bass notes
    gone = Counter()
    for track, channel, on, off, pitch in taken:
        velocity = 70 if channel == 0 else 80
        gone[track, on, str(mido.Message("note_on", channel=channel, note=pitch, velocity=velocity))] += 1
        gone[track, off, str(mido.Message("note_off", channel=channel, note=pitch, velocity=0))] += 1
    written = messages(placed.midi)
    assert messages(original) - gone <= written  # every other message, at its tick, in its track
    assert sum((messages(original) - gone).values()) == sum(written.values()) - 2 * placed.added

    added = [n for n in notes(placed.midi) if n not in notes(original)]
    assert len(added) == placed.added > 0
    assert all(track == 1 and channel == 0 and low <= on < high and on % (TPQ // 4) == 0
               for track, channel, on, _, _ in added)
    assert Counter(n[4] for n in added) == Counter(n[4] + 1 for n in taken)  # what the tokens said, transposed
    assert max(n[3] for n in added) <= high + TPQ  # note-offs close to the span: nothing trails on


def test_a_generated_note_never_sounds_twice_on_one_key():
    assert around(0, 100, [(50, 150)]) == (0, 50)
    assert around(60, 120, [(50, 100)]) == (100, 120)
    assert around(60, 90, [(50, 100)]) is None
    assert around(0, 100, [(100, 200), (-50, 0)]) == (0, 100)


def test_an_infill_keeps_the_users_bars_after_the_range(remi, tmp_path):
    path = song(tmp_path / "song.mid")
    ids = remi.encode(path)
    starts = remi.bar_starts(ids)
    prompt, suffix = ids[:starts[2]], ids[starts[4]:]  # bars 3-4 (the file's) rewritten, the suffix ends with EOS
    tokens = prompt + transposed(remi, ids[starts[2]:starts[4]], -2) + suffix
    placed = place(remi, GenerationResult(tokens, len(prompt), True, 0.0, 0), OwnFile.of(remi, path, tail=len(suffix)))
    assert placed.span == (12.0, 20.0)
    kept = Counter(n for n in notes(mido.MidiFile(path)) if n[1] == 9 or not 3 * BAR <= n[2] + TPQ // 8 < 5 * BAR)
    written = Counter(notes(placed.midi))
    assert kept <= written and kept[1, 0, 5 * BAR - EARLY, 5 * BAR - EARLY + TPQ // 2, 65] == 1  # bar 5's early note
    assert sum((written - kept).values()) == placed.added > 0
    assert all(3 * BAR <= on < 5 * BAR for _, _, on, _, _ in written - kept)


def test_a_format_that_cannot_place_its_pieces_back_says_so(tmp_path):
    from groove import GrooveTokenizer
    assert OwnFile.of(GrooveTokenizer(), song(tmp_path / "song.mid")) is None
