"""spe-generate end to end on tiny random checkpoints: outputs, grammar, prompts, bad input."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import miditoolkit
import mido
import numpy as np
import pretty_midi
import pytest
import torch

from generation.audio import AudioConfig, read_wav, tick_to_seconds
from apps.generate import main
from generation.own_file import absolute, note_pairs
from groove import GrooveTokenizer
from remi import REMITokenizer
from cli_helpers import band_midi, exit_status, save_tiny

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"



@pytest.fixture(scope="module")
def remi():
    return REMITokenizer()


@pytest.fixture(scope="module")
def remi_run(tmp_path_factory, remi) -> Path:
    return save_tiny(tmp_path_factory.mktemp("remi_run"), remi)


def read_tokens(path: Path) -> list[str]:
    return path.read_text().splitlines()


def assert_one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("spe-generate: error: ")
    return err[0]


def test_generation_writes_midi_tokens_and_pianoroll(remi_run, remi, tmp_path):
    out = tmp_path / "song.mid"
    assert main(["--checkpoint", str(remi_run), "--out", str(out), "--tokens", "40", "--seed", "1",
                 "--no-progress"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["song.mid", "song.ogg", "song.png", "song.txt",
                                                           "song.wav"]
    assert (tmp_path / "song.png").read_bytes()[:8] == PNG_MAGIC
    tokens = read_tokens(tmp_path / "song.txt")
    assert tokens[0] == "Bar_None" and 2 <= len(tokens) <= 41
    assert tokens[1].startswith("TimeSig_") and tokens[2] == "Beat_0"  # opens as encoded songs do
    assert tokens[3].startswith("Tempo_")
    state = remi.constraint_state()  # the sampled sequence is grammatical
    for token in remi.strings_to_ids(tokens):
        assert state.allowed()[token], remi.vocab.token(token)
        state.advance(token)
    midi = miditoolkit.MidiFile(str(out))  # a readable MIDI file with the decoded notes
    decoded = remi.decode(remi.strings_to_ids(tokens))
    def sounding(music):  # MIDI cannot hold zero-length notes (Note_Duration_0)
        return sorted((n.start, n.end, n.pitch) for i in music.instruments for n in i.notes
                      if n.end > n.start)

    assert sounding(midi) == sounding(decoded)


def test_same_seed_same_piece(remi_run, tmp_path):
    for name in ("a", "b"):
        assert main(["--checkpoint", str(remi_run), "--out", str(tmp_path / name / "s.mid"), "--tokens", "25",
                     "--seed", "7", "--no-progress"]) == 0
    assert (tmp_path / "a" / "s.txt").read_text() == (tmp_path / "b" / "s.txt").read_text()


def test_prompt_continuation_keeps_the_prompt(remi_run, remi, chorale_midi, tmp_path):
    out = tmp_path / "cont.mid"
    assert main(["--checkpoint", str(remi_run), "--out", str(out), "--prompt", str(chorale_midi),
                 "--prompt-bars", "2", "--tokens", "20", "--no-progress"]) == 0
    ids = remi.encode(chorale_midi)
    prompt = remi.tokens_to_strings(ids[:remi.bar_starts(ids)[2]])
    tokens = read_tokens(tmp_path / "cont.txt")
    assert tokens[:len(prompt)] == prompt
    assert len(prompt) < len(tokens) <= len(prompt) + 20


def test_a_continuation_is_written_into_the_prompts_own_file(remi_run, remi, chorale_midi, tmp_path, caplog):
    """--render file (the default): the chorale's own tracks, ticks and tempo, with only the generated
    bars changed; --render tokens: the decoded tokens, as the .txt says."""
    args = ["--checkpoint", str(remi_run), "--prompt", str(chorale_midi), "--prompt-bars", "2", "--tokens", "60",
            "--seed", "4", "--no-audio", "--no-progress"]
    with caplog.at_level("INFO", logger="apps.generate"):
        assert main(args + ["--out", str(tmp_path / "own.mid")]) == 0
    assert "own.mid: " + chorale_midi.name + " with beats" in caplog.text
    original, own = mido.MidiFile(chorale_midi), mido.MidiFile(tmp_path / "own.mid")
    assert own.ticks_per_beat == original.ticks_per_beat and len(own.tracks) == len(original.tracks)
    bar_line = remi.encode_with_report(chorale_midi)[1].bar_ticks[2]  # where the generated bars begin, in file ticks
    for mine, theirs in zip(own.tracks, original.tracks):  # the prompt's bars are all there, at their ticks
        before = Counter(e for e in absolute_strings(theirs) if e[0] < bar_line - original.ticks_per_beat // 8)
        assert before <= Counter(absolute_strings(mine))
    tempos = [m for m in own.tracks[0] if m.type == "set_tempo"]
    assert tempos == [m for m in original.tracks[0] if m.type == "set_tempo"]
    assert main(args + ["--out", str(tmp_path / "tokens.mid"), "--render", "tokens"]) == 0
    decoded = remi.decode(remi.strings_to_ids(read_tokens(tmp_path / "tokens.txt")))
    assert len(miditoolkit.MidiFile(str(tmp_path / "tokens.mid")).instruments) == len(decoded.instruments) == 1


def absolute_strings(track) -> list[tuple[int, str]]:
    return [(tick, str(m.copy(time=0))) for tick, m in absolute(track)]


def test_a_whole_song_is_continued_after_its_end(remi_run, remi, chorale_midi, tmp_path):
    out = tmp_path / "whole.mid"
    assert main(["--checkpoint", str(remi_run), "--out", str(out), "--prompt", str(chorale_midi),
                 "--prompt-bars", "all", "--tokens", "12", "--no-progress"]) == 0
    whole = remi.tokens_to_strings([i for i in remi.encode(chorale_midi) if i != remi.eos_id])
    tokens = read_tokens(tmp_path / "whole.txt")
    assert len(whole) > 200 and tokens[:len(whole)] == whole and len(whole) < len(tokens) <= len(whole) + 12
    # all of the song, as it was
    for mine, theirs in zip(mido.MidiFile(out).tracks, mido.MidiFile(chorale_midi).tracks):
        assert Counter(absolute_strings(theirs)) - Counter(absolute_strings(mine)) <= \
            Counter(e for e in absolute_strings(theirs) if e[1] == "MetaMessage('end_of_track', time=0)")


def test_chords_from_the_command_line_or_a_file(remi, tmp_path):
    run = save_tiny(tmp_path / "bar_run", remi, always="Bar_None")  # bar lines only, unless steered
    (tmp_path / "song.chords").write_text("C Am |\n F G7\n")
    for option, value in (("--chords", "C Am | F G7"), ("--chords-file", str(tmp_path / "song.chords"))):
        out = tmp_path / option.strip("-") / "chords.mid"
        assert main(["--checkpoint", str(run), "--out", str(out), option, value, "--tokens", "100",
                     "--no-progress", "--no-audio"]) == 0
        tokens = read_tokens(out.with_suffix(".txt"))
        assert tokens[1].startswith("TimeSig_") and tokens[3].startswith("Tempo_")  # a song's opening, then
        del tokens[3], tokens[1]
        assert tokens == [t for chord in ("C_M", "A_m", "F_M", "G_7") for t in ("Bar_None", "Beat_0", f"Chord_{chord}")]


def test_a_pop909_chord_annotation_is_followed_after_the_prompts_bars(remi, chorale_midi, tmp_path):
    """Chords in seconds, placed by the prompt's tempo map: the new bars follow those after the prompt."""
    run = save_tiny(tmp_path / "bar_run", remi, always="Bar_None")
    downbeats = pretty_midi.PrettyMIDI(str(chorale_midi)).get_downbeats()
    labels = ["C:maj", "A:min", "F:maj/3", "G:7", "N", "D:min7"]
    lines = [f"{downbeats[i]:.4f}\t{downbeats[i + 1]:.4f}\t{label}" for i, label in enumerate(labels)]
    (tmp_path / "chord_midi.txt").write_text("\n".join(lines) + "\n")
    out = tmp_path / "follow.mid"
    assert main(["--checkpoint", str(run), "--out", str(out), "--prompt", str(chorale_midi), "--prompt-bars", "2",
                 "--chords-file", str(tmp_path / "chord_midi.txt"), "--tokens", "100", "--no-progress",
                 "--no-audio"]) == 0
    ids = remi.encode(chorale_midi)
    prompt = remi.tokens_to_strings(ids[:remi.bar_starts(ids)[2]])
    tokens = read_tokens(out.with_suffix(".txt"))
    assert tokens[:len(prompt)] == prompt
    assert tokens[len(prompt):] == [t for chord in ("F_M", "G_7", "N_N", "D_m7")
                                    for t in ("Bar_None", "Beat_0", f"Chord_{chord}")]
    out = tmp_path / "placed.mid"  # placed by --chords-midi instead: every bar of the song, no prompt
    assert main(["--checkpoint", str(run), "--out", str(out), "--chords-file", str(tmp_path / "chord_midi.txt"),
                 "--chords-midi", str(chorale_midi), "--tokens", "100", "--no-progress", "--no-audio"]) == 0
    assert [t for t in read_tokens(out.with_suffix(".txt")) if t.startswith("Chord_")] == \
        ["Chord_C_M", "Chord_A_m", "Chord_F_M", "Chord_G_7", "Chord_N_N", "Chord_D_m7"]


def test_infill_rewrites_only_its_bars(remi, chorale_midi, tmp_path):
    fim = remi.with_infill()
    run = save_tiny(tmp_path / "fim_run", fim, max_len=4096)
    out = tmp_path / "infilled.mid"
    assert main(["--checkpoint", str(run), "--out", str(out), "--prompt", str(chorale_midi), "--infill-bars",
                 "2-3", "--tokens", "5000", "--seed", "2", "--no-audio", "--no-progress"]) == 0
    song = fim.tokens_to_strings(fim.encode(chorale_midi))
    written = read_tokens(out.with_suffix(".txt"))
    starts = fim.bar_starts(fim.strings_to_ids(song))
    assert written[:starts[1]] == song[:starts[1]]
    tail = song[starts[3]:]
    assert written[-len(tail):] == tail and written[:-len(tail)] != song[:starts[3]]
    assert len(fim.bar_starts(fim.strings_to_ids(written))) == len(starts)
    assert not any(token.startswith("Infill_") for token in written)
    grid = mido.MidiFile(chorale_midi).ticks_per_beat // 8  # a note this early belongs to the next 16th
    low, high = (tick - grid for tick in fim.encode_with_report(chorale_midi)[1].bar_ticks[1:4:2])  # bars 2-3, 1-based
    theirs, mine = file_notes(chorale_midi), file_notes(out)  # every note outside them, as it was
    assert Counter(n for n in theirs if not low <= n[2] < high) <= mine and mine != theirs
    assert other_messages(chorale_midi) == other_messages(out)  # tempo, meter, names, programs


def test_the_piano_roll_marks_both_ends_of_a_rewritten_span(remi, chorale_midi, tmp_path, monkeypatch):
    import generation.pieces

    drawn = []

    def draw(music, path, *args, generated=None):
        drawn.append(generated)
        Path(path).write_bytes(PNG_MAGIC)

    monkeypatch.setattr(generation.pieces, "save_pianoroll", draw)
    run = save_tiny(tmp_path / "fim_run", remi.with_infill(), max_len=4096)
    for render in ("file", "tokens"):
        out = tmp_path / f"{render}.mid"
        assert main(["--checkpoint", str(run), "--out", str(out), "--prompt", str(chorale_midi), "--infill-bars",
                     "2-3", "--tokens", "5000", "--seed", "2", "--no-audio", "--no-progress", "--render", render]) == 0
    assert drawn == [(4.0, 12.0), (4.0, 12.0)]  # bars 2-3 of 4/4 (file, then tokens): from the first bar line


def file_notes(path: Path) -> Counter:
    """(track, channel, onset, offset, pitch, velocity) of every note of a MIDI file."""
    found = Counter()
    for index, track in enumerate(mido.MidiFile(path).tracks):
        events = absolute(track)
        found.update((index, channel, events[on][0], events[off][0], events[on][1].note, events[on][1].velocity)
                     for on, off, channel in note_pairs(events))
    return found


def other_messages(path: Path) -> Counter:
    """(track, tick, message) of every message that is not a note."""
    return Counter((index, tick, str(m.copy(time=0))) for index, track in enumerate(mido.MidiFile(path).tracks)
                   for tick, m in absolute(track) if m.type not in ("note_on", "note_off", "end_of_track"))


def test_a_form_restates_its_returning_phrases(remi, tmp_path):
    run = save_tiny(tmp_path / "form_run", remi)
    out = tmp_path / "form.mid"
    assert main(["--checkpoint", str(run), "--out", str(out), "--form", "A2 B1 A2", "--restate", "1",
                 "--seed", "3", "--no-progress", "--no-audio"]) == 0
    ids = remi.strings_to_ids(read_tokens(out.with_suffix(".txt")))
    starts = remi.bar_starts(ids) + [len(ids)]
    assert len(starts) - 1 == 5  # the form's bars, no more
    bars = [ids[a:b] for a, b in zip(starts, starts[1:])]
    assert bars[3] == bars[0] and bars[4][:len(bars[1])] == bars[1][:len(bars[4])]
    assert bars[4] == bars[1] or ids[-1] == remi.eos_id or len(bars[4]) < len(bars[1])
    assert out.with_suffix(".png").is_file()


def test_a_form_continues_a_prompt_and_its_chords_follow_the_labels(remi, chorale_midi, tmp_path):
    run = save_tiny(tmp_path / "bar_run", remi, always="Bar_None")
    out = tmp_path / "form.mid"
    assert main(["--checkpoint", str(run), "--out", str(out), "--prompt", str(chorale_midi), "--prompt-bars", "1",
                 "--form", "A1 B2 A1", "--chords", "A: C; B: F G", "--restate", "0", "--no-progress",
                 "--no-audio"]) == 0
    tokens = read_tokens(out.with_suffix(".txt"))
    ids = remi.encode(chorale_midi)
    prompt = remi.tokens_to_strings(ids[:remi.bar_starts(ids)[1]])
    assert tokens[:len(prompt)] == prompt  # the prompt is the form's first bar
    expected = [t for chord in ("F_M", "G_M", "C_M") for t in ("Bar_None", "Beat_0", f"Chord_{chord}")]
    assert tokens[len(prompt):] == expected


def test_bars_limit_the_new_bars(remi, chorale_midi, tmp_path):
    run = save_tiny(tmp_path / "bar_run", remi, always="Bar_None")  # a model that only writes bar lines
    out = tmp_path / "bars.mid"
    assert main(["--checkpoint", str(run), "--out", str(out), "--prompt", str(chorale_midi),
                 "--prompt-bars", "1", "--bars", "3", "--tokens", "100", "--no-progress",
                 "--no-constraints"]) == 0
    ids = remi.encode(chorale_midi)
    prompt = remi.tokens_to_strings(ids[:remi.bar_starts(ids)[1]])
    assert read_tokens(tmp_path / "bars.txt") == prompt + ["Bar_None"] * 3


def test_groove_checkpoint_writes_midi_via_muspy(tmp_path):
    run = save_tiny(tmp_path / "groove_run", GrooveTokenizer(), data={"format": "groove", "kind": "trio"})
    out = tmp_path / "groove.mid"
    assert main(["--checkpoint", str(run), "--out", str(out), "--tokens", "30", "--no-progress"]) == 0
    assert read_tokens(tmp_path / "groove.txt")[0] == "Start_None"
    miditoolkit.MidiFile(str(out))
    assert (tmp_path / "groove.png").read_bytes()[:8] == PNG_MAGIC


def test_no_end_writes_to_the_token_budget(tmp_path, monkeypatch):
    import generation.sampling

    def eager_to_end(logits, top_p, temperature, allowed, generator, types):  # the model always wants End
        pick = torch.full((logits.shape[0],), GrooveTokenizer().eos_id)
        if allowed is not None and not bool(allowed[0, pick[0]]):
            pick = allowed.float().argmax(dim=-1)  # the first allowed token instead
        return pick

    monkeypatch.setattr(generation.sampling, "sample_next", eager_to_end)
    groove = {"format": "groove", "kind": "trio"}
    may_end = save_tiny(tmp_path / "may_end", GrooveTokenizer(), data=groove)
    runs_on = save_tiny(tmp_path / "runs_on", GrooveTokenizer(), data=groove, generate={"end": False})
    for run, flag, ends in ((may_end, [], True), (may_end, ["--no-end"], False),  # the model's default, or not
                            (runs_on, [], False), (runs_on, ["--end"], True)):
        out = tmp_path / f"{run.name}{len(flag)}.mid"
        assert main(["--checkpoint", str(run), "--out", str(out), "--tokens", "30", "--no-audio",
                     "--no-progress"] + flag) == 0
        tokens = read_tokens(out.with_suffix(".txt"))
        assert ("End_None" in tokens) == ends
        assert len(tokens) == (2 if ends else 31)  # Start, End; or Start + 30 new tokens


def test_hold_bars_sets_the_sampling_grammars_hold_limit(tmp_path, monkeypatch):
    import groove.tokenizer
    from groove.constraints import GrooveConstraintState
    from groove.roles import TICKS_PER_BAR

    limits = []

    class Recording(GrooveConstraintState):
        def __init__(self, table, hold_limit=None):
            super().__init__(table, hold_limit)
            limits.append(hold_limit)

    monkeypatch.setattr(groove.tokenizer, "GrooveConstraintState", Recording)
    groove = {"format": "groove", "kind": "trio"}
    free = save_tiny(tmp_path / "free", GrooveTokenizer(), data=groove)
    held = save_tiny(tmp_path / "held", GrooveTokenizer(), data=groove, generate={"hold_bars": 2})
    cases = ((free, [], None), (free, ["--hold-bars", "3"], 3), (held, [], 2), (held, ["--hold-bars", "0"], None))
    for run, hold, bars in cases:
        limits.clear()
        assert main(["--checkpoint", str(run), "--out", str(tmp_path / "held.mid"), "--tokens", "40",
                     "--no-audio", "--no-progress"] + hold) == 0
        assert limits and limits[0] == (None if bars is None else bars * TICKS_PER_BAR)  # the sampler's grammar


def test_the_shipped_groove_model_continues_a_band_prompt_with_audio(tmp_path):
    from training.checkpoint import shipped_models

    if "groove" not in shipped_models():
        pytest.skip("no shipped groove model")
    out = tmp_path / "band_out.mid"
    assert main(["--checkpoint", "groove", "--prompt", str(band_midi(tmp_path / "band.mid")), "--prompt-bars", "2",
                 "--tokens", "120", "--seed", "1", "--out", str(out), "--no-progress"]) == 0
    programs = {(inst.is_drum, inst.program) for inst in miditoolkit.MidiFile(str(out)).instruments}
    assert len(programs) >= 2 and any(drum for drum, _ in programs)
    assert out.with_suffix(".ogg").read_bytes()[:4] == b"OggS"


def test_audio_lasts_as_long_as_the_midi(remi, chorale_midi, tmp_path):
    run = save_tiny(tmp_path / "run", remi)
    out = tmp_path / "out" / "song.mid"
    assert main(["--checkpoint", str(run), "--out", str(out), "--prompt", str(chorale_midi), "--prompt-bars", "2",
                 "--tokens", "10", "--no-progress"]) == 0
    midi = miditoolkit.MidiFile(str(out))
    end = max(n.end for inst in midi.instruments for n in inst.notes)
    seconds = float(tick_to_seconds(midi, np.array([end]))[0])
    audio, rate = read_wav(out.with_suffix(".wav"))
    assert rate == AudioConfig().sample_rate and audio.shape[1] == 2
    assert len(audio) / rate == pytest.approx(seconds + AudioConfig().tail_seconds, abs=0.01)
    assert np.sqrt(np.mean(np.square(audio))) == pytest.approx(0.1, rel=0.05)  # -20 dBFS RMS
    assert out.with_suffix(".ogg").read_bytes()[:4] == b"OggS"


def test_no_audio(remi_run, tmp_path):
    out = tmp_path / "song.mid"
    assert main(["--checkpoint", str(remi_run), "--out", str(out), "--tokens", "10", "--no-progress",
                 "--no-audio"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["song.mid", "song.png", "song.txt"]


def test_num_samples_decodes_a_batch(remi_run, remi, tmp_path):
    out = tmp_path / "song.mid"
    assert main(["--checkpoint", str(remi_run), "--out", str(out), "--tokens", "30", "--seed", "3",
                 "--no-progress", "--no-audio", "--num-samples", "3"]) == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted(f"song_{i}{suffix}" for i in (1, 2, 3) for suffix in (".mid", ".png", ".txt"))
    pieces = [read_tokens(tmp_path / f"song_{i}.txt") for i in (1, 2, 3)]
    assert len({tuple(p) for p in pieces}) == 3  # independent draws
    for tokens in pieces:
        assert tokens[0] == "Bar_None" and len(tokens) <= 31
        state = remi.constraint_state()
        for token in remi.strings_to_ids(tokens):
            assert state.allowed()[token], remi.vocab.token(token)
            state.advance(token)


@pytest.mark.parametrize("case", ["missing_checkpoint", "not_a_checkpoint", "missing_prompt", "bad_prompt",
                                  "bad_out", "zero_tokens", "too_long", "bad_option", "zero_samples",
                                  "missing_soundfont", "huge_seed", "negative_seed", "inf_temperature",
                                  "nan_top_p", "bad_prompt_bars", "bad_chord", "chords_of_groove",
                                  "chords_unconstrained", "chords_twice", "missing_chords_file",
                                  "prompt_bars_beyond_song", "annotation_without_midi", "chords_midi_alone",
                                  "bad_chord_label", "infill_without_prompt", "infill_with_prompt_bars",
                                  "infill_beyond_song", "infill_of_a_plain_model", "bad_infill_range",
                                  "infill_with_chords", "hold_of_remi", "negative_hold_bars",
                                  "no_end_unconstrained", "form_bad_letter", "form_no_length",
                                  "form_too_long_for_tokens", "form_of_groove", "form_with_infill",
                                  "form_with_bars", "restate_without_form", "form_chords_unknown_label",
                                  "label_chords_without_form", "form_shorter_than_prompt",
                                  "infill_budget_too_small"])
def test_bad_input_fails_with_one_line_and_no_output(case, remi_run, remi, chorale_midi, tmp_path, capsys):
    out = tmp_path / "out" / "song.mid"
    args = ["--checkpoint", str(remi_run), "--out", str(out), "--tokens", "10", "--no-progress"]
    if case == "missing_checkpoint":
        args[1] = str(tmp_path / "nowhere")
    elif case == "not_a_checkpoint":
        (tmp_path / "junk" / "checkpoints").mkdir(parents=True)
        (tmp_path / "junk" / "checkpoints" / "latest").write_text("step_000001\n")
        args[1] = str(tmp_path / "junk")
    elif case == "missing_prompt":
        args += ["--prompt", str(tmp_path / "absent.mid")]
    elif case == "bad_prompt":
        (tmp_path / "bad.mid").write_text("this is not a MIDI file")
        args += ["--prompt", str(tmp_path / "bad.mid")]
    elif case == "bad_out":
        args[3] = str(tmp_path / "out" / "song.wav")
    elif case == "zero_tokens":
        args[5] = "0"
    elif case == "too_long":
        args[1] = str(save_tiny(tmp_path / "ape_run", remi, pe="learned_ape", max_len=16))
        args[5] = "30"
    elif case == "bad_option":
        args += ["--top-p", "lots"]
    elif case == "zero_samples":
        args += ["--num-samples", "0"]
    elif case == "missing_soundfont":
        args += ["--soundfont", str(tmp_path / "gm.sf2")]
    elif case.endswith("seed"):
        args += ["--seed", str(2**80) if case == "huge_seed" else "-1"]
    elif case == "inf_temperature":
        args += ["--temperature", "inf"]
    elif case == "nan_top_p":
        args += ["--top-p", "nan"]
    elif case == "bad_prompt_bars":
        args += ["--prompt", str(tmp_path / "absent.mid"), "--prompt-bars", "0"]
    elif case == "bad_chord":
        args += ["--chords", "C Am | Hb7 G"]
    elif case == "chords_of_groove":
        args[1] = str(save_tiny(tmp_path / "groove_run", GrooveTokenizer(), data={"format": "groove", "kind": "trio"}))
        args += ["--chords", "C G"]
    elif case == "chords_unconstrained":
        args += ["--chords", "C G", "--no-constraints"]
    elif case == "no_end_unconstrained":
        args += ["--no-end", "--no-constraints"]
    elif case in ("hold_of_remi", "negative_hold_bars"):
        args += ["--hold-bars", "2" if case == "hold_of_remi" else "-1"]
    elif case == "chords_twice":
        args += ["--chords", "C G", "--chords-file", str(tmp_path / "x.txt")]
    elif case == "missing_chords_file":
        args += ["--chords-file", str(tmp_path / "absent.chords")]
    elif case == "prompt_bars_beyond_song":
        args += ["--prompt", str(chorale_midi), "--prompt-bars", "500"]
    elif case in ("annotation_without_midi", "bad_chord_label"):
        label = "C:maj" if case == "annotation_without_midi" else "C:maj13"
        (tmp_path / "chord_midi.txt").write_text(f"0.0 2.0 {label}\n2.0 4.0 G:maj\n")
        args += ["--chords-file", str(tmp_path / "chord_midi.txt")]
        if case == "bad_chord_label":
            args += ["--chords-midi", str(chorale_midi)]
    elif case.startswith("form") or case.endswith("without_form"):
        args += {"form_bad_letter": ["--form", "A8 Q8"], "form_no_length": ["--form", "A8 B"],
                 "form_too_long_for_tokens": ["--form", "A8 B8 A8 B8"],
                 "form_with_infill": ["--form", "A4", "--infill-bars", "1-2", "--prompt", str(chorale_midi)],
                 "form_with_bars": ["--form", "A4", "--bars", "3"], "restate_without_form": ["--restate", "0.5"],
                 "form_chords_unknown_label": ["--form", "A4", "--chords", "B: C G"],
                 "label_chords_without_form": ["--chords", "A: C G"],
                 "form_shorter_than_prompt": ["--form", "A1", "--prompt", str(chorale_midi), "--prompt-bars", "2"],
                 }.get(case, ["--form", "A4 B4"])
        if case == "form_of_groove":
            run = save_tiny(tmp_path / "groove_run", GrooveTokenizer(), data={"format": "groove", "kind": "trio"})
            args[1] = str(run)
    elif case == "chords_midi_alone":
        args += ["--chords-midi", str(chorale_midi)]
    elif case.startswith("infill") or case == "bad_infill_range":
        if case != "infill_of_a_plain_model":
            args[1] = str(save_tiny(tmp_path / "fim_run", remi.with_infill(), max_len=4096))
        args += ["--infill-bars", {"infill_beyond_song": "3-500", "bad_infill_range": "4-2"}.get(case, "3-4")]
        if case != "infill_without_prompt":
            args += ["--prompt", str(chorale_midi)]
        args += {"infill_with_prompt_bars": ["--prompt-bars", "4"], "infill_with_chords": ["--chords", "C G"]
                 }.get(case, [])
        if case == "infill_budget_too_small":
            args[5] = "50"
    assert exit_status(main, args) != 0
    message = assert_one_error_line(capsys)
    if case == "too_long":
        assert "16 positions" in message
    if case.endswith("seed"):
        assert "--seed" in message and "2**64 - 1" in message
    if case == "bad_prompt_bars":
        assert "--prompt-bars" in message and "'all'" in message
    expected = {"bad_chord": "bad chord symbol 'Hb7'", "chords_of_groove": "REMI model",
                "chords_unconstrained": "--no-constraints", "chords_twice": "not both",
                "missing_chords_file": "chords file not found", "prompt_bars_beyond_song": "fewer than the 500",
                "annotation_without_midi": "give a prompt or a chords MIDI", "chords_midi_alone": "give that file too",
                "bad_chord_label": "bad chord label 'C:maj13'", "infill_without_prompt": "give it as the prompt",
                "infill_with_prompt_bars": "drop prompt bars", "infill_beyond_song": "the song has",
                "infill_of_a_plain_model": "fill-in-the-middle model", "bad_infill_range": "bar range",
                "infill_with_chords": "drop chords", "hold_of_remi": "applies to groove models",
                "negative_hold_bars": "hold bars must be >= 0", "no_end_unconstrained": "--no-constraints",
                "form_bad_letter": "unknown label 'Q'", "form_no_length": "no length in bars",
                "form_too_long_for_tokens": "cannot hold them", "form_of_groove": "pop piano",
                "form_with_infill": "drop a form", "form_with_bars": "drop bars",
                "restate_without_form": "give a form", "form_chords_unknown_label": "does not have",
                "label_chords_without_form": "need a form", "form_shorter_than_prompt": "nothing is left",
                "infill_budget_too_small": "infill bars 3-4 leaves 2 bars to write: 50 tokens cannot hold them"}
    assert expected.get(case, "") in message
    if case in ("inf_temperature", "nan_top_p"):
        assert ("--temperature" if case == "inf_temperature" else "--top-p") in message and "finite" in message
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_failure_while_writing_leaves_no_partial_files(remi_run, tmp_path, capsys, monkeypatch):
    import generation.pieces

    written = []
    real = generation.pieces.save_pianoroll

    def full_at_the_second(music, path, *args, **kwargs):  # the disk fills while the second sample is written
        if written:
            raise OSError("disk full")
        written.append(path)
        return real(music, path, *args, **kwargs)

    monkeypatch.setattr(generation.pieces, "save_pianoroll", full_at_the_second)
    out = tmp_path / "out" / "song.mid"
    assert main(["--checkpoint", str(remi_run), "--out", str(out), "--tokens", "10", "--no-progress",
                 "--num-samples", "2"]) == 1
    assert written  # the first sample's files were written, then removed with the rest
    assert "disk full" in assert_one_error_line(capsys)
    assert list((tmp_path / "out").iterdir()) == []


def test_outputs_are_all_or_none_and_inputs_are_never_overwritten(remi_run, chorale_midi, tmp_path, capsys):
    out = tmp_path / "song.mid"
    (tmp_path / "song.png").mkdir()  # an output that cannot be written: refused before anything
    args = ["--checkpoint", str(remi_run), "--tokens", "10", "--no-progress", "--no-audio"]
    assert exit_status(main, args + ["--out", str(out)]) == 2
    assert "song.png is a folder" in assert_one_error_line(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["song.png"]
    song = tmp_path / "mine.mid"
    song.write_bytes(chorale_midi.read_bytes())
    assert exit_status(main, args + ["--out", str(song), "--prompt", str(song)]) == 2
    assert "is an input of this command" in assert_one_error_line(capsys)
    assert song.read_bytes() == chorale_midi.read_bytes()
    junk = tmp_path / "junk.sf2"
    junk.write_bytes(b"RIFF\x00\x00\x00\x00not a soundfont")
    assert exit_status(main, ["--checkpoint", str(remi_run), "--tokens", "10", "--no-progress",
                              "--out", str(tmp_path / "a.mid"), "--soundfont", str(junk)]) == 2
    assert "not a SoundFont 2 file" in assert_one_error_line(capsys)


def test_leftovers_of_killed_runs_are_removed_and_replacing_is_said(remi_run, tmp_path, caplog):
    dead = 2**22 + 12345  # above Linux's default pid_max: no such process
    (tmp_path / f".song.partial-{dead}.mid").write_bytes(b"half a file")
    out = tmp_path / "song.mid"
    args = ["--checkpoint", str(remi_run), "--out", str(out), "--tokens", "10", "--no-progress", "--no-audio",
            "--num-samples", "2"]
    assert main(args) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"song_{i}{suffix}" for i in (1, 2) for suffix in (".mid", ".txt", ".png"))
    caplog.set_level("WARNING")
    assert main(args) == 0
    assert "replacing" in caplog.text and "song_1.mid" in caplog.text


KILLED_WHILE_WRITING = """
import os, signal, sys
import generation.pieces
from apps.generate import main

def killed(music, path, *args, **kwargs):
    open(path, "wb").write(b"half a piano roll")
    os.kill(os.getpid(), signal.SIGKILL)

generation.pieces.save_pianoroll = killed
main(sys.argv[1:])
"""


def test_a_kill_while_writing_leaves_no_output_and_the_next_run_cleans_up(remi_run, tmp_path):
    import subprocess
    import sys

    out = tmp_path / "song.mid"
    args = ["--checkpoint", str(remi_run), "--out", str(out), "--tokens", "10", "--no-progress", "--no-audio",
            "--num-samples", "2"]
    killed = subprocess.run([sys.executable, "-c", KILLED_WHILE_WRITING, *args], cwd=Path(__file__).parents[2],
                            capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left and all(".partial-" in name for name in left)  # no final file: the kill came before the renames
    assert main(args) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"song_{i}{suffix}" for i in (1, 2) for suffix in (".mid", ".txt", ".png"))


def test_a_piece_too_long_for_audio_keeps_its_midi_tokens_and_roll(remi, tmp_path, caplog):
    from generation.audio import AudioConfig
    from generation.pieces import write_piece
    from generation.sampling import GenerationResult

    ids = remi.strings_to_ids(["Bar_None", "Beat_0", "Note_Pitch_60", "Note_Velocity_60", "Note_Duration_480"] * 3)
    result = GenerationResult(tokens=ids, prompt_len=1, stopped_at_eos=False, seconds=0.0, noise_length=0)
    out = tmp_path / "long.mid"
    write_piece(remi, result, out, audio=AudioConfig(max_seconds=1.0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["long.mid", "long.png", "long.txt"]
    assert "without audio" in caplog.text
