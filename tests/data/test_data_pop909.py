"""POP909 corpus: synthetic songs in the dataset's layout (always), and real shared songs (when present)."""

from __future__ import annotations

from pathlib import Path

import miditoolkit
import pytest
from miditoolkit import Instrument, Note, TempoChange, TimeSignature

import data
from training.config import RunConfig
from data.build import prepare_corpus
from data import SPLITS, build_pop909_corpus
from data.pop909 import merge_tracks, pop909_files
from remi import REMITokenizer

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "pop909"
TPQ = 480
STEP = TPQ // 4  # ticks per sub-beat


def pop909_song(beats_per_bar: int, bars: int, pickup_beats: int = 0, names=("MELODY", "BRIDGE", "PIANO")):
    """A song as POP909 stores it: tempo track, MELODY/BRIDGE/PIANO tracks, a declared 1/4 meter."""
    midi = miditoolkit.MidiFile(ticks_per_beat=TPQ)
    melody, bridge, piano = (Instrument(program=0, is_drum=False, name=name) for name in names)
    bar = beats_per_bar * 4
    start = pickup_beats * 4
    melody.notes = [Note(70, 72 + b % 5, b * 4 * STEP, (b * 4 + 2) * STEP) for b in range(pickup_beats)]
    for i in range(bars):
        at = start + i * bar
        piano.notes.append(Note(80, 36 + i % 7, at * STEP, (at + bar) * STEP))  # bass: the whole bar
        for beat in range(1, beats_per_bar):
            piano.notes += [Note(60, 55 + k, (at + beat * 4) * STEP, (at + beat * 4 + 3) * STEP) for k in (0, 4, 7)]
        eighths = range(0, bar, 2)
        melody.notes += [Note(70, 72 + (i + e) % 5, (at + e) * STEP, (at + e + 2) * STEP) for e in eighths]
        bridge.notes.append(Note(50, 65 + i % 3, (at + 4) * STEP, (at + 8) * STEP))
    midi.instruments = [melody, bridge, piano]
    midi.tempo_changes = [TempoChange(92, 0)]
    midi.time_signature_changes = [TimeSignature(1, 4, 0)]
    midi.max_tick = max(n.end for inst in midi.instruments for n in inst.notes)
    return midi


SONGS = {  # name: (beats per bar, bars, pickup beats, meter expected)
    "001": (4, 20, 0, "4/4"),
    "002": (4, 20, 1, "4/4"),
    "003": (3, 24, 0, "3/4"),
    "004": (4, 18, 2, "4/4"),
    "005": (3, 24, 2, "3/4"),
    "006": (4, 22, 0, "4/4"),
}


@pytest.fixture
def pop909_folder(tmp_path):
    """The dataset repository's layout: POP909/NNN/NNN.mid, alternative takes in versions/."""
    root = tmp_path / "POP909"
    for name, (beats, bars, pickup, _) in SONGS.items():
        (root / name / "versions").mkdir(parents=True)
        pop909_song(beats, bars, pickup).dump(str(root / name / f"{name}.mid"))
        pop909_song(beats, 2).dump(str(root / name / "versions" / f"{name}-v1.mid"))  # not a song of its own
    (root / "007").mkdir()
    pop909_song(4, 4, names=("Piano 1", "Piano 2", "Strings")).dump(str(root / "007" / "007.mid"))
    return root


def test_corpus_meters_bars_and_merged_tracks(pop909_folder, tmp_path):
    assert sorted(pop909_files(pop909_folder)) == [*SONGS, "007"]
    corpus = build_pop909_corpus(pop909_folder, tmp_path / "corpus", progress=False)
    summary = corpus.summary
    assert [s["name"] for s in summary["skipped"]] == ["007"]
    assert "none of the tracks" in summary["skipped"][0]["reason"]
    assert summary["notes_left_out"] == 0
    tok = corpus.tokenizer
    assert tok.config()["time_signatures"] is True
    pieces = {name: ids for split in SPLITS for name, ids in zip(corpus.names(split), corpus.pieces(split))}
    assert sorted(pieces) == sorted(SONGS)
    for name, (beats, bars, pickup, meter) in SONGS.items():
        report = summary["songs"][name]
        assert report["declared"] == ["1/4"] and report["meter"] == meter, report
        assert report["source"] == ("default" if meter == "4/4" and pickup == 0 else "inferred")
        assert report["reason"].startswith("declared time signatures ignored")
        assert report["bars"] == bars + (pickup > 0)  # one bar per downbeat, plus the pickup's bar
        strings = tok.tokens_to_strings(pieces[name].tolist())
        assert strings.count("Bar_None") == report["bars"] and f"TimeSig_{meter}" in strings[:2]
        midi = pop909_song(beats, bars, pickup)
        assert sum(s.startswith("Note_Pitch") for s in strings) == sum(len(i.notes) for i in midi.instruments)
    assert summary["meters"] == {"4/4 (default)": 2, "3/4 (inferred)": 2, "4/4 (inferred)": 2}
    again = build_pop909_corpus(pop909_folder, tmp_path / "corpus2", progress=False)
    assert all(again.names(split) == corpus.names(split) for split in SPLITS)  # split by song, deterministic


def test_merge_tracks_keeps_the_three_parts_only():
    midi = pop909_song(4, 2)
    extra = Instrument(program=40, is_drum=False, name="VIOLIN")
    extra.notes = [Note(60, 80, 0, 480)]
    midi.instruments.append(extra)
    merged, left_out = merge_tracks(midi, "song")
    assert len(merged.instruments) == 1 and merged.instruments[0].name == "Piano"
    assert len(merged.instruments[0].notes) == sum(len(i.notes) for i in midi.instruments[:3])
    assert left_out == 1 and merged.time_signature_changes == [] and merged.tempo_changes == midi.tempo_changes
    assert merge_tracks(midi, "song", keep_meters=True)[0].time_signature_changes == midi.time_signature_changes


def test_train_builds_the_pop909_kind(pop909_folder, tmp_path):
    settings = {"kind": "pop909", "root": str(tmp_path / "c"), "source": str(pop909_folder)}
    cfg = RunConfig.from_dict({"data": settings})
    prepare_corpus(cfg.data)
    assert data.load_corpus(tmp_path / "c").summary["builder"] == "pop909"
    with pytest.raises(ValueError, match="set data.source"):
        prepare_corpus(RunConfig.from_dict({"data": {"kind": "pop909", "root": str(tmp_path / "d")}}).data)


# POP909's own downbeat annotations (beat_midi.txt, third column, in the dataset repository; the shared
# copy has only the MIDI files), counted by hand from the bar of each song's first note; see
# bench/pop909_bars.py. 034 and 152 are in triple time: POP909 marks a downbeat every 6 beats there and
# every 3 beats in its second column; our 3/4 bars are compared with the latter.
ANNOTATED_DOWNBEATS = {
    "001": (73, "4/4"), "009": (118, "4/4"), "029": (109, "4/4"), "034": (147, "3/4"), "152": (185, "3/4"),
}


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"needs the shared POP909 songs in {SHARED} (absent here)")
@pytest.mark.parametrize("name", sorted(ANNOTATED_DOWNBEATS))
def test_real_songs_have_their_annotated_number_of_bars(name):
    downbeats, meter = ANNOTATED_DOWNBEATS[name]
    tok = REMITokenizer(time_signatures=True)
    midi, _ = merge_tracks(miditoolkit.MidiFile(str(SHARED / f"{name}.mid")), name)
    ids, stats = tok.encode_with_report(midi)
    bars = len(tok.bar_starts(ids))
    assert stats.meter == meter, stats.meter_reason
    assert abs(bars - downbeats) <= 0.05 * downbeats, (bars, downbeats)
    declared = REMITokenizer(time_signatures=True).encode(miditoolkit.MidiFile(str(SHARED / f"{name}.mid")))
    assert len(tok.bar_starts(declared)) <= 1.05 * downbeats  # the policy alone: no bar per beat either
