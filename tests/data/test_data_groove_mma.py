"""data.groove_mma: POP909 chord charts rendered with MMA into a Groove2Groove-layout band corpus."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import miditoolkit
import numpy as np
import pytest

import data.groove_mma as gm
import data.mma_styles as styles
from data.pop909_charts import ROOT_NAMES, Chart, Chord, chart_melody, chart_song, load_song
from groove import GrooveTokenizer
from groove.dataset import SPLITS, list_splits, style_of
from groove.roles import ACCOMPANIMENT, BASS, TICKS_PER_BAR, TICKS_PER_BEAT

ANNOTATIONS = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "pop909_annotations"
SONGS = ["001", "008", "009"]  # one song per split (train, val, test)
STYLES = ["BossaNova", "8Beat"]
PITCH_CLASS = {name: pc for pc, name in enumerate(ROOT_NAMES)}


# ------------------------------------------------------------------ without mma
def test_split_of_is_by_song_number():
    assert [gm.split_of(s) for s in ("001", "008", "009", "010", "018", "909")] == \
        ["train", "val", "test", "train", "val", "test"]


def _mma_like_midi() -> miditoolkit.MidiFile:
    midi = miditoolkit.MidiFile(ticks_per_beat=192)
    bar = 4 * 192
    tracks = [("Drum", 0, True, [(0, 36), (bar, 38)]), ("Walk", 32, False, [(0, 36), (bar, 41)]),
              ("Bass-Sax", 66, False, [(0, 48)]), ("Chord-Piano", 0, False, [(0, 60), (0, 64), (bar, 65)]),
              ("Arpeggio", 24, False, [(96, 67), (2 * bar, 72)]), ("Solo", 66, False, [(0, 80)])]
    for name, program, is_drum, notes in tracks:
        inst = miditoolkit.Instrument(program=program, is_drum=is_drum, name=name)
        inst.notes = [miditoolkit.Note(velocity=80, pitch=p, start=s, end=s + 2 * bar) for s, p in notes]
        midi.instruments.append(inst)
    return midi


def test_mma_tracks_are_merged_onto_three_roles():
    band = gm.band_midi(_mma_like_midi(), bars=2)
    assert [(i.name, i.program, i.is_drum) for i in band.instruments] == \
        [("BB Drums", 0, True), ("BB Bass", 32, False), ("BB Piano", 0, False)]
    drums, bass, acc = ([(n.start, n.pitch, n.end) for n in i.notes] for i in band.instruments)
    end = 2 * 4 * 192
    assert bass == [(0, 36, end), (768, 41, end)]  # the walk track only, clipped to the chart's end
    assert sorted(p for _, p, _ in acc) == [48, 60, 64, 65, 67]  # chord, arpeggio, Bass-Sax; no solo, no bar 3
    piece = GrooveTokenizer().parse(band)
    assert piece.drums and piece.bass and len(piece.candidates) == 1


def test_articulation_follows_the_groove_line():
    chart = Chart("001", 0, 0, 100, [(Chord(0, "maj"), Chord(7, "7"))])
    plain = gm.mma_song(chart, "8Beat", 2, 7).splitlines()
    shaped = gm.mma_song(chart, "8Beat", 2, 7, articulation=55).splitlines()
    assert not any("Articulate" in line for line in plain)
    assert shaped == plain[:4] + ["AllTracks Articulate 55"] + plain[4:]  # after Groove, which sets its own
    assert shaped[-1] == "1 D / A7 /"


def test_style_sets():
    assert styles.STYLE_SETS["default"] == styles.DEFAULT_STYLES and len(styles.DEFAULT_STYLES) == 30
    wide = styles.WIDE_STYLES
    assert wide[:30] == styles.DEFAULT_STYLES and len(set(wide)) == len(wide) == 76


def test_missing_mma_and_annotations_are_one_line_errors(tmp_path, monkeypatch, capsys):
    with pytest.raises(SystemExit) as exit_info:
        gm.main(["--out", str(tmp_path / "c"), "--annotations", str(tmp_path / "nowhere")])
    assert exit_info.value.code != 0
    if shutil.which("mma"):
        assert "no such annotations folder" in capsys.readouterr().err
    monkeypatch.setattr(gm.shutil, "which", lambda name: None)
    with pytest.raises(SystemExit):
        gm.main(["--out", str(tmp_path / "c")])
    assert "apt-get install mma" in capsys.readouterr().err
    with pytest.raises(RuntimeError, match="apt-get install mma"):
        gm.require_mma()


def test_groove_mma_is_a_groove_kind_built_from_the_annotations(tmp_path):
    from data.build import BUILDERS, build_corpus
    from data.kinds import BUILDER_OF_KIND, FORMAT_OF_KIND, NEEDS_SOURCE

    assert FORMAT_OF_KIND["groove_mma"] == "groove" and BUILDER_OF_KIND["groove_mma"] == "groove"
    assert "groove_mma" in BUILDERS and "groove_mma" in NEEDS_SOURCE
    with pytest.raises(ValueError, match="set data.source to the raw groove_mma folder"):
        build_corpus("groove_mma", tmp_path / "c")


# --------------------------------------------------------------------- with mma
@pytest.fixture(scope="module")
def tiny_corpus(tmp_path_factory):
    if shutil.which("mma") is None:
        pytest.skip("mma not installed: apt-get install mma")
    if not ANNOTATIONS.is_dir():
        pytest.skip(f"POP909 annotations not found at {ANNOTATIONS}")
    root = tmp_path_factory.mktemp("groove_mma")
    corpus = gm.build_mma_corpus(root, ANNOTATIONS, STYLES, pieces=SONGS, charts_per_song=1, progress=False)
    return corpus, json.loads((root / "corpus.json").read_text())


@pytest.fixture
def melodies() -> Path:
    """POP909's MIDI files, whose melody and piano parts can replace MMA's accompaniment."""
    folder = ANNOTATIONS.parent / "pop909"
    if not folder.is_dir():
        pytest.skip(f"POP909 MIDI files not found at {folder}")
    return folder


def test_tiny_corpus_layout_and_splits(tiny_corpus):
    corpus, description = tiny_corpus
    files = list_splits(corpus.root)
    assert {split: len(paths) for split, paths in files.items()} == {"train": 2, "val": 2, "test": 2}
    pieces = description["pieces"]
    assert sorted(corpus.root / p["path"] for p in pieces) == sorted(p for paths in files.values() for p in paths)
    songs = {split: {p["song"] for p in pieces if p["split"] == split} for split in SPLITS}
    assert songs == {"train": {"001"}, "val": {"008"}, "test": {"009"}}  # no song in two splits
    for p in pieces:
        assert p["path"] == f"{p['split']}/{p['song']}_{p['chart']}.{p['style']}.mid"
        assert style_of(p["path"]) == p["style"] and p["split"] == gm.split_of(p["song"])
        assert -5 <= p["transposition"] <= 6 and 60 <= p["tempo"] <= 180 and len(p["chords"]) == p["bars"] == 16
    assert {(p["song"], p["style"]) for p in pieces} == {(s, style) for s in SONGS for style in STYLES}
    assert description["styles"] == STYLES and description["skipped"] == {}
    assert {s: v["pieces"] for s, v in description["splits"].items()} == {"train": 2, "val": 2, "test": 2}
    assert all(v["bars"] == 2 * 16 for v in description["splits"].values())


def _bass_pitch_class(line: str) -> int:
    """The bass pitch class of a bar's first chord in an MMA chord line (``Am7/G / D /`` -> G)."""
    first = line.split(" / ")[0]
    name = first.split("/")[1] if "/" in first else first
    return PITCH_CLASS[name[:2] if name[:2] in PITCH_CLASS else name[:1]]


def test_tiny_corpus_tokenises_with_three_roles_and_follows_the_chart(tiny_corpus):
    corpus, description = tiny_corpus
    tokenizer = GrooveTokenizer()
    for p in description["pieces"]:
        path = corpus.root / p["path"]
        piece = tokenizer.parse(path)
        assert piece.drums and piece.bass and len(piece.candidates) == 1, p["path"]
        ids = tokenizer.encode(path)
        assert len(tokenizer.bar_starts(ids)) == p["bars"]  # exactly the charted bars
        assert max(end for notes in piece.tracks() for _, end, _ in notes) <= p["bars"] * TICKS_PER_BAR
        hits = 0
        for bar, line in enumerate(p["chords"]):
            onsets = {pitch % 12 for start, _, pitch in piece.bass if abs(start - bar * TICKS_PER_BAR) <= 3}
            hits += _bass_pitch_class(line) in onsets
        assert hits >= 0.75 * p["bars"], (p["path"], hits)
        acc_onsets = [start for start, _, _ in piece.candidates[0]]
        assert len({start // TICKS_PER_BEAT for start in acc_onsets}) >= p["bars"]  # plays through the chart


def test_tiny_corpus_is_reproducible(tiny_corpus, tmp_path):
    corpus, description = tiny_corpus
    again = gm.build_mma_corpus(tmp_path, ANNOTATIONS, STYLES, pieces=SONGS[:1], charts_per_song=1, progress=False)
    for piece in again.pieces:
        assert (tmp_path / piece.path).read_bytes() == (corpus.root / piece.path).read_bytes()


def _median_length(root: Path, paths: list[str], role: int) -> float:
    """Median note length (grid ticks) of one role over the files."""
    tokenizer = GrooveTokenizer()
    return float(np.median([end - start for path in paths
                            for start, end, _ in tokenizer.parse(root / path).tracks()[role]]))


def test_drawn_articulation_shortens_the_notes_and_is_recorded(tiny_corpus, tmp_path):
    corpus, description = tiny_corpus
    with pytest.raises(ValueError, match="articulation must be"):
        gm.build_mma_corpus(tmp_path, ANNOTATIONS, STYLES, pieces=SONGS[:1], articulation=(50, 40))
    short = gm.build_mma_corpus(tmp_path, ANNOTATIONS, STYLES, pieces=SONGS[:1], charts_per_song=1,
                                articulation=(40, 40), progress=False)
    written = json.loads((tmp_path / "corpus.json").read_text())
    assert written["articulation"] == [40, 40] and {p["articulation"] for p in written["pieces"]} == {40}
    assert description["articulation"] is None and {p["articulation"] for p in description["pieces"]} == {None}
    paths = [p.path for p in short.pieces]
    assert [(p.style, p.transposition) for p in short.pieces] == \
        [(p["style"], p["transposition"]) for p in description["pieces"] if p["path"] in paths]  # same draws
    for role in (BASS, ACCOMPANIMENT):
        assert _median_length(tmp_path, paths, role) < 0.6 * _median_length(corpus.root, paths, role)



def test_a_lead_rendition_plays_the_songs_melody_over_the_band(tiny_corpus, melodies, tmp_path):
    corpus, description = tiny_corpus
    with pytest.raises(ValueError, match="lead_prob"):
        gm.build_mma_corpus(tmp_path, ANNOTATIONS, STYLES, pieces=SONGS[:1], lead_prob=1.5)
    with pytest.raises(FileNotFoundError, match="POP909 MIDI"):
        gm.build_mma_corpus(tmp_path, ANNOTATIONS, STYLES, pieces=SONGS[:1], lead_prob=0.5,
                            melodies=tmp_path / "nowhere")
    led = gm.build_mma_corpus(tmp_path, ANNOTATIONS, STYLES, pieces=SONGS[:1], charts_per_song=1, lead_prob=1.0,
                              melodies=melodies, progress=False)
    assert description["lead_prob"] == 0.0 and {p["lead"] for p in description["pieces"]} == {None}
    (chart,) = chart_song(SONGS[0], *load_song(ANNOTATIONS / SONGS[0]), 16, 1)
    melody = chart_melody(chart, miditoolkit.MidiFile(str(melodies / f"{SONGS[0]}.mid")))
    tokenizer = GrooveTokenizer()
    for piece in led.pieces:
        assert piece.lead in styles.LEAD_PROGRAMS
        bass, drums, acc = tokenizer.parse(tmp_path / piece.path).tracks()
        assert bass and drums  # MMA's rhythm section stays
        expected = {(round(start * TICKS_PER_BEAT), pitch + piece.transposition) for start, _, pitch in melody}
        assert {(start, pitch) for start, _, pitch in acc} == expected
        same = next(p for p in description["pieces"] if p["path"] == piece.path)
        assert (same["style"], same["transposition"]) == (piece.style, piece.transposition)


def test_a_piano_rendition_plays_the_songs_piano_part_above_the_bass(tiny_corpus, melodies, tmp_path):
    corpus, description = tiny_corpus
    with pytest.raises(ValueError, match="piano_prob"):
        gm.build_mma_corpus(tmp_path, ANNOTATIONS, STYLES, pieces=SONGS[:1], piano_prob=-0.1)
    keyed = gm.build_mma_corpus(tmp_path, ANNOTATIONS, STYLES, pieces=SONGS[:1], charts_per_song=1, piano_prob=1.0,
                                melodies=melodies, progress=False)
    assert json.loads((tmp_path / "corpus.json").read_text())["piano_prob"] == 1.0
    (chart,) = chart_song(SONGS[0], *load_song(ANNOTATIONS / SONGS[0]), 16, 1)
    part = chart_melody(chart, miditoolkit.MidiFile(str(melodies / f"{SONGS[0]}.mid")), "PIANO")
    kept = [(start, pitch) for start, _, pitch in part if pitch >= gm.PIANO_LOW]
    assert 0 < len(kept) < len(part)  # the left hand's low notes are left to the bass
    tokenizer = GrooveTokenizer()
    for piece in keyed.pieces:
        assert piece.piano in styles.PIANO_PROGRAMS and piece.lead is None
        bass, drums, acc = tokenizer.parse(tmp_path / piece.path).tracks()
        assert bass and drums
        expected = {(round(start * TICKS_PER_BEAT), pitch + piece.transposition) for start, pitch in kept}
        assert {(start, pitch) for start, _, pitch in acc} == expected
        same = next(p for p in description["pieces"] if p["path"] == piece.path)
        assert (same["style"], same["transposition"]) == (piece.style, piece.transposition)  # earlier draws kept
    led = gm.build_mma_corpus(tmp_path, ANNOTATIONS, STYLES, pieces=SONGS[:1], charts_per_song=1, lead_prob=1.0,
                              piano_prob=1.0, melodies=melodies, progress=False)
    assert all(p.lead is not None and p.piano is None for p in led.pieces)  # a lead wins over the piano
