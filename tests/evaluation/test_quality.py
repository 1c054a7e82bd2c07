"""Generation-quality metrics on hand-made MIDI whose values are known by construction, and
`spe-evaluate quality` end to end on the shipped model with tiny sizes."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import miditoolkit
import numpy as np
import pytest

from evaluation.quality import (RealPiece, continuation_start, drop_leading_silence, first_tokens, measure,
                               prompt_of, statistics, target_met)
from apps.evaluate import main
from evaluation.quality_metrics import METRIC_NAMES, NotePiece, bar_lines, from_midi, piece_metrics
from cli_helpers import exit_status
from remi import REMITokenizer
from training.checkpoint import shipped_default

TPQ = 480  # ticks per quarter note of the hand-made files
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
C_MAJOR = [60, 62, 64, 65, 67, 69, 71, 72]


def midi(notes: list[tuple[float, float, int]],
         meters: list[tuple[int, int, float]] = ()) -> miditoolkit.MidiFile:
    """A one-piano MIDI file; notes (start, end, pitch) and meters (numerator, denominator, time) in
    quarter notes."""
    file = miditoolkit.MidiFile(ticks_per_beat=TPQ)
    piano = miditoolkit.Instrument(program=0, name="piano")
    piano.notes = [miditoolkit.Note(velocity=64, pitch=p, start=round(s * TPQ), end=round(e * TPQ))
                   for s, e, p in notes]
    file.instruments.append(piano)
    file.time_signature_changes = [miditoolkit.TimeSignature(n, d, round(t * TPQ)) for n, d, t in meters]
    file.max_tick = max((n.end for n in piano.notes), default=0)
    return file


def quarters(pitches: list[int], start: float = 0.0, length: float = 1.0) -> list[tuple[float, float, int]]:
    """One note per pitch, one per quarter note from `start`, each `length` quarters long."""
    return [(start + i, start + i + length, p) for i, p in enumerate(pitches)]


# muspy counts the beats (and bars) of a piece as its length // beat + 1 and marks every beat from a
# note's onset to the beat holding its end, inclusive: the hand-made pieces below end off the beat
# (staccato notes) so that these counts are the musical ones.
STACCATO = 0.5


# ----------------------------------------------------------------------- metrics by construction
def test_c_major_scale():
    values = piece_metrics(from_midi(midi(quarters(C_MAJOR, length=STACCATO))))
    # counts: C twice, six other pitch classes once -> 2/8 * 2 + 6 * 1/8 * 3 = 2.75 bits
    assert values["pitch_class_entropy"] == pytest.approx(2.75)
    assert values["scale_consistency"] == 1.0
    assert values["pitch_range"] == 12 and values["pitch_classes_used"] == 7
    assert values["polyphony"] == pytest.approx(1.0)  # one note at a time
    assert values["empty_beat_rate"] == 0.0
    # 2 bars of 4 distinct pitch classes each: H1 = log2(4); H4 falls back to the whole (2-bar) piece
    assert values["pch_entropy_1bar"] == pytest.approx(2.0)
    assert values["pch_entropy_4bar"] == pytest.approx(2.75)
    assert values["grooving_similarity"] == 1.0 and values["groove_consistency"] == 1.0


def test_a_bar_of_silence():
    # bars 1 and 3: C E G C; bar 2 is silent
    notes = quarters([60, 64, 67, 72], length=STACCATO) + quarters([60, 64, 67, 72], 8.0, STACCATO)
    values = piece_metrics(from_midi(midi(notes)))
    assert values["empty_beat_rate"] == pytest.approx(4 / 12)
    # bar pairs: (1, 2) and (2, 3) differ at the 4 onsets of a 16-position bar, (1, 3) are equal
    assert values["grooving_similarity"] == pytest.approx((0.75 + 1.0 + 0.75) / 3)
    assert values["pch_entropy_1bar"] == pytest.approx(1.5)  # C E G C: 1/2, 1/4, 1/4; empty bar skipped


def test_identical_and_known_grooves():
    rng = np.random.default_rng(0)
    rhythm = [0.0, 1.0, 1.5, 2.5, 3.0]  # onsets in a 4/4 bar
    same = [(4 * bar + t, 4 * bar + t + 0.5, int(rng.integers(48, 84))) for bar in range(4) for t in rhythm]
    values = piece_metrics(from_midi(midi(same)))
    assert values["grooving_similarity"] == 1.0 and values["groove_consistency"] == 1.0
    straight = quarters([60] * 4)  # onsets at sub-beats 0, 4, 8, 12
    eighths = [(4 + i / 2, 4 + i / 2 + 0.25, 62) for i in range(8)]  # 0, 2, ..., 14: 4 more onsets
    values = piece_metrics(from_midi(midi(straight + eighths)))
    assert values["grooving_similarity"] == pytest.approx(1 - 4 / 16)
    assert values["groove_consistency"] == pytest.approx(1 - 4 / 16)


def test_chords_polyphony_and_pitch_class_windows():
    # 4 bars, each a held triad: C major, F major, G major, C major (whole notes)
    triads = [(0, 4, 7), (5, 9, 0), (7, 11, 2), (0, 4, 7)]
    notes = [(4 * bar, 4 * bar + 4, 60 + p) for bar, triad in enumerate(triads) for p in triad]
    values = piece_metrics(from_midi(midi(notes)))
    assert values["polyphony"] == pytest.approx(3.0)
    assert values["pch_entropy_1bar"] == pytest.approx(math.log2(3))
    counts = np.bincount([p % 12 for t in triads for p in t], minlength=12)  # one 4-bar window
    probabilities = counts[counts > 0] / counts.sum()
    assert values["pch_entropy_4bar"] == pytest.approx(-(probabilities * np.log2(probabilities)).sum())
    assert values["scale_consistency"] == 1.0 and values["pitch_classes_used"] == 7


def test_bars_follow_the_files_meter():
    waltz = from_midi(midi(quarters([60, 64, 67] * 2), meters=[(3, 4, 0)]))
    assert waltz.bars.tolist() == [0, 12, 24]
    assert piece_metrics(waltz)["grooving_similarity"] == 1.0  # in 4/4 bars the pattern would shift
    jig = from_midi(midi(quarters([60] * 3), meters=[(6, 8, 0)]))
    assert jig.bars.tolist() == [0, 12]
    # a change that falls inside a bar takes effect at the next bar line
    assert bar_lines([(0, 4, 4), (6, 3, 4)], 40).tolist() == [0, 16, 28, 40]
    assert from_midi(midi(quarters([60] * 5))).bars.tolist() == [0, 16, 32]  # no meter: 4/4


def test_a_piece_without_notes():
    values = piece_metrics(from_midi(midi([])))
    assert values["empty_beat_rate"] == 1.0
    assert all(math.isnan(values[name]) for name in METRIC_NAMES if name != "empty_beat_rate")


def test_after_keeps_the_notes_from_a_bar_line():
    piece = from_midi(midi(quarters([60] * 8) + quarters(C_MAJOR, start=8.0)))
    later = piece.after(32)
    assert isinstance(later, NotePiece) and later.bars.tolist() == [0, 16, 32]
    assert later.onsets.tolist() == list(range(0, 32, 4)) and later.pitches.tolist() == C_MAJOR


def test_continuation_is_measured_after_the_prompt():
    """Tokenised with REMI: the 2-bar prompt (only Cs) is left out, the scale after it is measured."""
    tokenizer = REMITokenizer()
    file = midi(quarters([60] * 8) + quarters(C_MAJOR, start=8.0))
    piece = RealPiece("scale", [int(i) for i in tokenizer.encode(file)][:-1])
    prompt = prompt_of(tokenizer, piece, 2)
    assert prompt is not None and continuation_start(tokenizer, prompt) == 32
    values = measure(tokenizer, piece.ids, continuation_start(tokenizer, prompt))
    assert values["pitch_class_entropy"] == pytest.approx(2.75) and values["pitch_range"] == 12
    whole = measure(tokenizer, piece.ids)
    assert whole["pitch_class_entropy"] < 2.75  # the 8 prompt Cs weigh in
    assert prompt_of(tokenizer, piece, 4) is None  # no bar after the 4th


def test_silent_opening_bars_are_dropped():
    tokenizer = REMITokenizer(keep_leading_silence=True)  # tokens that keep the silent bars, as old corpora
    waltz = quarters([60, 64, 67] * 2, start=6.0, length=STACCATO)  # bars 1-2 of 3/4 are silent
    ids = [int(i) for i in tokenizer.encode(midi(waltz, meters=[(3, 4, 0)]))][:-1]
    trimmed = drop_leading_silence(tokenizer, ids)
    strings = tokenizer.tokens_to_strings(trimmed)
    assert strings.count("Bar_None") == tokenizer.tokens_to_strings(ids).count("Bar_None") - 2
    assert strings[:4] == ["Bar_None", "TimeSig_3/4", "Beat_0", tokenizer.tokens_to_strings(ids)[3]]
    assert strings[3].startswith("Tempo_")
    state = tokenizer.constraint_state()
    for token in trimmed:  # still a valid sequence, meter included
        state.advance(token)
    decoded = tokenizer.decode(trimmed)
    assert min(n.start for n in decoded.instruments[0].notes) == 0
    meter = decoded.time_signature_changes[0]
    assert (meter.numerator, meter.denominator) == (3, 4)
    assert measure(tokenizer, ids) == measure(tokenizer, trimmed)  # measured from the first sounding bar
    assert measure(tokenizer, ids)["empty_beat_rate"] == 0.0
    assert drop_leading_silence(tokenizer, trimmed) == trimmed


def test_targets_and_statistics():
    assert statistics([1.0, 2.0, 3.0, float("nan")]) == (2.0, 1.0, 3)
    assert target_met("within_std", 2.9, 2.0, 1.0) and not target_met("within_std", 3.1, 2.0, 1.0)
    assert target_met("at_most_twice", 0.02, 0.013, 0.01)
    assert not target_met("at_most_twice", 0.09, 0.013, 0.0)
    assert target_met("within_std", float("nan"), 2.0, 1.0) is None


# ------------------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def real_folder(tmp_path_factory) -> Path:
    """Five hand-made 8-bar piano pieces in 4/4 and an unreadable file."""
    folder = tmp_path_factory.mktemp("real_midi")
    rng = np.random.default_rng(1)
    for index in range(5):
        notes = []
        for bar in range(8):
            root = int(rng.choice([48, 53, 55, 57]))
            notes += [(4 * bar, 4 * bar + 4, root), (4 * bar, 4 * bar + 4, root + 7)]
            notes += [(4 * bar + t, 4 * bar + t + 0.5, int(rng.choice(C_MAJOR)) + 12)
                      for t in (0, 1, 2, 2.5, 3)]
        midi(notes).dump(str(folder / f"song_{index}.mid"))
    (folder / "broken.mid").write_text("not a MIDI file")
    return folder


def test_quality_end_to_end_on_the_shipped_model(real_folder, tmp_path, capsys):
    out = tmp_path / "quality"
    assert main(["quality", "--real", str(real_folder), "--pieces", "2", "--real-pieces", "6",
                 "--tokens", "48", "--prompt-bars", "2", "--out", str(out), "--no-progress"]) == 0
    with (out / "quality.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    real = [r for r in rows if r["source"] == "real"]
    shipped = shipped_default().name  # the default label: the shipped model's folder name
    generated = [r for r in rows if r["source"] == shipped]
    assert len(real) == 2 * 5 and len(generated) == 2 * 2  # the broken file is skipped
    assert {r["mode"] for r in rows} == {"unconditional", "continuation"}
    for row in real:  # the hand-made pieces: triads and scale tones of C major
        assert float(row["scale_consistency"]) >= 0.8 and float(row["empty_beat_rate"]) == 0.0
        assert 1.0 <= float(row["polyphony"]) <= 4.0
    with (out / "quality_summary.csv").open() as handle:
        summary = list(csv.DictReader(handle))
    assert len(summary) == 2 * len(METRIC_NAMES)
    assert {r["met"] for r in summary} <= {"true", "false", ""}
    table = (out / "quality.md").read_text()
    printed = capsys.readouterr().out
    assert table in printed and (out / "quality_along.md").read_text() in printed
    assert "within 1 std of real" in table and "<= 2 x real mean" in table
    for name in METRIC_NAMES:
        assert (out / f"quality_{name}.png").read_bytes()[:8] == PNG_MAGIC
    assert "length in bars" in (out / "quality_along.md").read_text()
    with (out / "quality_windows.csv").open() as handle:
        windows = list(csv.DictReader(handle))
    assert {(r["mode"], r["source"]) for r in windows} == {(m, s) for m in ("unconditional", "continuation")
                                                          for s in ("real", shipped)}
    assert all(int(r["bars"]) <= 8 and r["window"] == "" for r in windows)  # 8-bar pieces fill no window
    for mode in ("unconditional", "continuation"):
        assert (out / f"quality_along_{mode}.png").read_bytes()[:8] == PNG_MAGIC
    midi_files = sorted(p.name for p in (out / "generated" / shipped).iterdir())
    assert len(midi_files) == 4 and midi_files[0].startswith("continuation_000_song_")
    assert all(len(miditoolkit.MidiFile(str(out / "generated" / shipped / n)).instruments) == 1
               for n in midi_files)


def test_quality_against_a_corpus_split(real_folder, tmp_path):
    """Without --real the reference is a split of a token corpus (here: --corpus, split train)."""
    from data import build_midi_folder_corpus

    corpus = build_midi_folder_corpus(real_folder, tmp_path / "corpus", REMITokenizer(), progress=False)
    out = tmp_path / "quality"
    assert main(["quality", "--corpus", str(tmp_path / "corpus"), "--split", "train",
                 "--mode", "continuation",
                 "--pieces", "1", "--tokens", "32", "--prompt-bars", "2", "--label", "shipped",
                 "--out", str(out), "--no-progress"]) == 0
    with (out / "quality.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert {r["mode"] for r in rows} == {"continuation"}
    assert sorted(r["piece"] for r in rows if r["source"] == "real") == sorted(corpus.names("train"))
    assert [r["source"] for r in rows].count("shipped") == 1


@pytest.mark.parametrize("case", ["missing_real_folder", "empty_real_folder", "bad_pieces", "missing_corpus"])
def test_quality_bad_input_is_one_line(case, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    real = {"missing_real_folder": tmp_path / "nowhere", "empty_real_folder": tmp_path / "empty",
            "bad_pieces": tmp_path / "empty", "missing_corpus": None}[case]
    args = ["quality", "--real", str(real), "--out", str(tmp_path / "out"), "--no-progress"]
    if case == "bad_pieces":
        args += ["--pieces", "0"]
    if case == "missing_corpus":
        args = ["quality", "--corpus", str(tmp_path / "nope"), "--out", str(tmp_path / "out"), "--no-progress"]
    assert exit_status(main, args) == 2  # bad input (apps/cli.py)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("spe-evaluate: error: ")
    assert {"missing_real_folder": "no such folder", "empty_real_folder": "no MIDI files",
            "bad_pieces": "--pieces", "missing_corpus": "--real DIR"}[case] in err[0]
    assert not (tmp_path / "out").exists()


def test_quality_of_pieces_generated_elsewhere(real_folder, tmp_path, capsys):
    """--generated measures token files (as spe-generate writes them) cut to --tokens new tokens at a
    whole event, and generates nothing; a file that is not an unconditional piece is one line."""
    tokenizer = REMITokenizer()
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    for index, path in enumerate(sorted(real_folder.glob("song_*.mid"))[:3]):
        ids = [i for i in tokenizer.encode(path) if i != tokenizer.eos_id]
        (folder / f"piece_{index}.txt").write_text("\n".join(tokenizer.tokens_to_strings(ids)) + "\n")
    out = tmp_path / "quality"
    assert main(["quality", "--real", str(real_folder), "--generated", str(folder), "--tokens", "40",
                 "--real-pieces", "5", "--out", str(out), "--no-progress"]) == 0
    with (out / "quality.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert {r["mode"] for r in rows} == {"unconditional"}
    assert sorted(r["piece"] for r in rows if r["source"] == "elsewhere") == ["piece_0", "piece_1", "piece_2"]
    assert not (out / "generated").exists()
    ids = tokenizer.strings_to_ids((folder / "piece_0.txt").read_text().split())
    cut = first_tokens(tokenizer, ids, 41)
    assert len(cut) <= 41 and cut == ids[:len(cut)] and len(cut) > 30
    grammar = tokenizer.constraint_state()
    for token in cut:
        grammar.advance(token)
    assert grammar.allowed()[tokenizer.eos_id]  # a whole event ends the cut
    assert "pieces generated elsewhere (elsewhere: 3), cut to their first 40 new tokens" in capsys.readouterr().out

    (folder / "piece_9.txt").write_text("Bar_None\nNot_A_Token\n")
    assert exit_status(main, ["quality", "--real", str(real_folder), "--generated", str(folder),
                              "--out", str(tmp_path / "bad"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "piece_9.txt" in err[0] and not (tmp_path / "bad").exists()
