"""Chord progressions: lead-sheet symbols, the steered sampler's bars, and chords recognised again."""

from __future__ import annotations

from pathlib import Path

import miditoolkit
import pytest
import torch

from evaluation.chords import chord_agreement, real_progressions, recognised_chords
from generation.chords import (ChordSteer, annotation_bars, chord_name, family, is_annotation, parse_chord,
                              parse_annotation, parse_harte, parse_progression, place_annotation)
from data.pop909 import merge_tracks
from generation.pieces import bar_stop, start_ids
from generation.sampling import SamplingConfig, generate
from groove import GrooveTokenizer
from model import MusicPerformer
from remi import REMITokenizer
from training.config import RunConfig


def test_lead_sheet_symbols():
    chords = parse_progression("C Am | F G7 |N| Bbmaj7 F#m7b5 Ebdim7 Gsus4 Daug Esus2 Bdim")
    assert [chord_name(c) for c in chords] == ["C_M", "A_m", "F_M", "G_7", "N_N", "A#_M7", "F#_/o7", "D#_o7",
                                               "G_sus4", "D_+", "E_sus2", "B_o"]
    assert parse_chord("Cb") == (11, "M") and parse_chord("B#m7") == (0, "m7")
    assert family(parse_chord("G7")) == family(parse_chord("G")) == (7, "major")
    assert family(parse_chord("Bm7b5")) == (11, "diminished") and family(None) is None


@pytest.mark.parametrize("text, named", [("C Hm", "'Hm'"), ("Cmaj9", "'Cmaj9'"), ("c", "'c'"),
                                         ("C | | x7", "'x7'")])
def test_a_bad_symbol_is_named(text, named):
    with pytest.raises(ValueError, match=f"bad chord symbol {named}"):
        parse_progression(text)
    with pytest.raises(ValueError, match="empty"):
        parse_progression(" | ")


def test_pop909_labels():
    labels = ["C#:maj", "Bb:min7", "F:sus4(b7)", "G:7/3", "A:hdim7", "E:maj6", "D:minmaj7/5", "N", "Cb:dim"]
    assert [chord_name(parse_harte(label)) for label in labels] == ["C#_M", "A#_m7", "F_sus4", "G_7", "A_/o7",
                                                                    "E_M", "D_m", "N_N", "B_o"]
    for bad in ("H:maj", "C:maj9", "C", "Cm:maj"):
        with pytest.raises(ValueError, match=f"bad chord label '{bad}'"):
            parse_harte(bad)


def test_an_annotation_is_placed_in_bars_by_its_longest_chord():
    text = "0.0 1.5 C:maj\n1.5 2.0 G:maj\n2.0 2.4 A:min\n2.4 4.0 F:maj\n5.0 5.5 N\n5.5 8.0 G:7\n"
    assert is_annotation(text) and not is_annotation("C Am F G7") and not is_annotation("")
    bars = annotation_bars(parse_annotation(text), downbeats=[0.0, 2.0, 4.0, 6.0, 8.0, 10.0], end=12.0)
    # bar 4.0-6.0: 1.0 s without a chord, 0.5 s of N, 0.5 s of G7 -> N; the annotation ends at 8.0
    assert [chord_name(c) for c in bars] == ["C_M", "F_M", "N_N", "G_7"]
    for bad in ("0 1 C:maj\n1 x G:maj\n", "0 1 C:maj\n2 1 G:maj\n", "0 1 C:maj\n1 2 G:maj x\n"):
        with pytest.raises(ValueError, match="line 2"):
            parse_annotation(bad)
    with pytest.raises(ValueError, match="chord tokens"):
        place_annotation(parse_annotation(text), None, GrooveTokenizer())


POP909 = Path(__file__).resolve().parents[3] / "shared" / "data"


@pytest.mark.skipif(not (POP909 / "pop909_annotations").is_dir(),
                    reason=f"needs POP909 and its annotations in {POP909} (absent here)")
def test_pop909_annotations_agree_with_the_chords_recognised_from_the_notes():
    """Placed by the MIDI's tempo map, the annotation's chords are those the tokenizer recognises in the
    same bars (chorder on the notes) for most bars of real songs."""
    tokenizer = REMITokenizer()
    agree = total = 0
    for song in ("001", "002", "004"):
        midi, _ = merge_tracks(miditoolkit.MidiFile(str(POP909 / "pop909" / f"{song}.mid")), song)  # as the corpus
        spans = parse_annotation((POP909 / "pop909_annotations" / song / "chord_midi.txt").read_text())
        placed = place_annotation(spans, midi, tokenizer)
        recognised = real_progressions(tokenizer, tokenizer.encode(midi))
        pairs = [(a, b) for a, b in zip(placed, recognised) if a is not None and b is not None]
        agree += sum(family(a) == family(b) for a, b in pairs)
        total += len(pairs)
        assert abs(len(placed) - len(recognised)) <= 2
    assert total > 150 and agree / total > 0.6


@pytest.fixture(scope="module")
def tiny_remi():
    tokenizer = REMITokenizer()
    config = RunConfig.from_dict({"model": {"n_layer": 1, "n_head": 2, "d_model": 16, "d_ff": 32, "pe": "sine_spe",
                                            "num_realizations": 4, "feature_dims": 8, "attention": "torch"}})
    torch.manual_seed(0)
    model = MusicPerformer(config.model_config(tokenizer.vocab_size)).eval()
    with torch.no_grad():  # a constant logit lead for Bar_None: bars of a few events, then a bar line
        model.ln_f.bias.fill_(1.0)
        model.head.weight[tokenizer.bar_id] += 3.0 / model.cfg.d_model
    return tokenizer, model


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_steered_bar_opens_on_its_chord(tiny_remi, seed):
    tokenizer, model = tiny_remi
    chords = parse_progression("C Am N G7 Ebdim7")
    result = generate(model, tokenizer, start_ids(tokenizer), 600, SamplingConfig(),
                      torch.Generator().manual_seed(seed),
                      stop=bar_stop(tokenizer, 0, len(chords), every=1), steer=ChordSteer(tokenizer, chords, 0))
    strings = tokenizer.tokens_to_strings(result.tokens)
    bars = [i for i, t in enumerate(strings) if t == "Bar_None"]
    assert len(bars) == len(chords) + 1 and not result.stopped_at_eos  # the stop fires at the 6th bar line
    for b, chord in enumerate(chords):
        bar = strings[bars[b]:bars[b + 1]]
        body = bar[1:] if not bar[1].startswith("TimeSig") else bar[2:]
        assert body[:2] == ["Beat_0", f"Chord_{chord_name(chord)}"], bar[:4]
        assert sum(t.startswith("Chord_") for t in bar) == 1


def test_chords_need_a_remi_model():
    with pytest.raises(ValueError, match="REMI model"):
        ChordSteer(GrooveTokenizer(), parse_progression("C"), 0)


def block_chords(progression: list[tuple[int, int, int]], bars: int = 1) -> miditoolkit.MidiFile:
    """A 4/4 piano piece holding each triad (three pitches) for one bar."""
    midi = miditoolkit.MidiFile(ticks_per_beat=480)
    piano = miditoolkit.Instrument(program=0, name="piano")
    for bar, pitches in enumerate(progression):
        piano.notes += [miditoolkit.Note(80, p, bar * 1920, bar * 1920 + 1900) for p in (pitches[0] - 12, *pitches)]
    midi.instruments.append(piano)
    return midi


def test_chords_are_recognised_again_from_the_notes():
    tokenizer = REMITokenizer()
    midi = block_chords([(60, 64, 67), (57, 60, 64), (62, 65, 69), (55, 59, 62)])  # C Am Dm G
    ids = [int(i) for i in tokenizer.encode(midi)][:-1]
    expected = parse_progression("C Am Dm G")
    assert [family(c) for c in recognised_chords(tokenizer, ids, 0, 4)] == [family(c) for c in expected]
    assert [family(c) for c in real_progressions(tokenizer, ids)] == [family(c) for c in expected]
    assert recognised_chords(tokenizer, ids, 2, 4)[2:] == [None, None]  # past the notes
    assert chord_agreement(expected, recognised_chords(tokenizer, ids, 0, 4)) == 1.0
    assert chord_agreement(parse_progression("C A Dm Gm"), expected) == 0.5  # A major, G minor differ


def test_a_chord_symbol_reads_back_as_the_same_chord():
    from generation.chords import QUALITIES, chord_symbol, parse_chord

    chords = [None] + [(root, quality) for root in range(12) for quality in QUALITIES.values()]
    assert [parse_chord(chord_symbol(chord)) for chord in chords] == chords
