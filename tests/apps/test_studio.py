"""The studio's callbacks without a browser: generate, continue, undo, samples, groove similarity, bad input."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import miditoolkit
import mido
import pytest

from generation.audio import AudioConfig, read_wav
from training.checkpoint import load_model, shipped_default, shipped_models
from generation.own_file import absolute
from generation.pieces import count_bars
from apps.studio_session import (MAX_UPLOAD_BYTES, SHIPPED, SHIPPED_SUFFIX, Request, StudioError, StudioSession,
                                 model_choices, model_path, page_request, public_message,
                                 sampling_defaults)
from groove import GrooveTokenizer
from cli_helpers import band_midi, exit_status, save_tiny

needs_shipped = pytest.mark.skipif(shipped_default() is None, reason="no shipped pretrained/ model")


def tokens_of(path: Path) -> list[str]:
    return path.read_text().split()


@needs_shipped
def test_generate_continue_undo_with_the_shipped_model(tmp_path):
    session = StudioSession(tmp_path / "work")
    view = session.generate(Request(model=SHIPPED, length=24, unit="tokens", num_samples=2, seed=1))
    assert len(view.samples) == 2 and view.take == 1 and "generated 2 sample(s)" in view.status
    first = [tokens_of(s.tokens) for s in view.samples]
    assert first[0] != first[1]  # two draws of one batch
    for sample in view.samples:
        assert sample.midi.is_file() and sample.pianoroll.read_bytes()[:4] == b"\x89PNG"
        audio, rate = read_wav(sample.wav)
        assert rate == 44100 and len(audio) > rate // 2 and abs(audio).max() > 0.01
        assert sample.ogg.read_bytes()[:4] == b"OggS"
        assert [Path(p).suffix for p in sample.downloads()] == [".mid", ".wav", ".ogg", ".txt"]

    decoded = [len(t) for t in session.decoder.tokens]  # shown pieces drop a trailing unfinished event
    longer = session.continue_(16, "tokens")
    assert longer.take == 2 and "continued" in longer.status
    for old, sample, fed in zip(first, longer.samples, decoded):
        new = tokens_of(sample.tokens)
        assert new[:len(old)] == old and len(old) < len(new) <= fed + 16
    assert longer.samples[0].midi != view.samples[0].midi  # every step keeps its own files

    back = session.undo()
    assert back.take == 1 and back.samples[0].midi == view.samples[0].midi
    assert [len(t) for t in session.decoder.tokens] >= [len(t) for t in first]
    again = session.continue_(8, "tokens")  # continuing after an undo starts from the restored state
    assert tokens_of(again.samples[0].tokens)[:len(first[0])] == first[0]
    session.undo()
    with pytest.raises(StudioError, match="nothing to undo"):
        session.undo()


@needs_shipped
def test_a_piece_too_long_for_audio_is_shown_without_audio(tmp_path, monkeypatch):
    import apps.studio_session

    monkeypatch.setattr(apps.studio_session, "AudioConfig", lambda: AudioConfig(max_seconds=0.01))
    view = StudioSession(tmp_path / "work").generate(Request(model=SHIPPED, length=2, unit="bars", seed=1))
    sample = view.samples[0]
    assert sample.wav is None and sample.ogg is None and sample.midi.is_file() and sample.pianoroll.is_file()
    assert "no audio for sample(s) 1" in view.status
    assert [Path(p).suffix for p in sample.downloads()] == [".mid", ".txt"]


@needs_shipped
def test_bars_are_counted_per_sample_from_a_prompt(tmp_path, chorale_midi):
    session = StudioSession(tmp_path / "work")
    view = session.generate(Request(prompt=str(chorale_midi), prompt_bars=2, length=1, unit="bars",
                                    num_samples=2, seed=3))
    tokenizer = session.ckpt.tokenizer
    for sample, tokens in zip(view.samples, session.decoder.tokens):
        prompt_len = session.decoder.prompt_len
        new_bars = count_bars(tokenizer, tokens, prompt_len)
        assert len(new_bars) <= 2  # one new bar, plus the first token of the next when the stop fired
        assert sample.new_tokens > 0


def test_a_whole_uploaded_song_is_continued_after_its_end(tmp_path, chorale_midi):
    from remi import REMITokenizer

    run = save_tiny(tmp_path / "runs" / "tiny", REMITokenizer())
    session = StudioSession(tmp_path / "work", runs=[run])
    request = page_request(str(run), str(chorale_midi), 2, 6, "tokens", 1.0, 0.9, 0, 1, True)
    assert request.whole_prompt
    view = session.generate(request)
    whole = [i for i in session.ckpt.tokenizer.encode(chorale_midi) if i != session.ckpt.tokenizer.eos_id]
    assert session.decoder.prompt_len == len(whole) and session.decoder.tokens[0][:len(whole)] == whole
    assert view.samples[0].new_tokens > 0
    theirs, view = mido.MidiFile(chorale_midi), session.continue_(4, "tokens")  # written into the uploaded file
    for track, mine in zip(theirs.tracks, mido.MidiFile(view.samples[0].midi).tracks):
        assert Counter(note_events(track)) <= Counter(note_events(mine))
    assert len(mido.MidiFile(view.samples[0].midi).tracks) == len(theirs.tracks) > 1
    view = session.generate(page_request(str(run), str(chorale_midi), 2, 6, "tokens", 1.0, 0.9, 0, 1, True,
                                         render="tokens"))
    assert len(mido.MidiFile(view.samples[0].midi).tracks) < len(theirs.tracks)  # the decoded tokens: one piano track
    # as generate.py says
    with pytest.raises(StudioError, match=r"the prompt .* has \d+ bars, fewer than the 40 asked"):
        session.generate(page_request(str(run), str(chorale_midi), 40, 6, "tokens", 1.0, 0.9, 0, 1))
    with pytest.raises(StudioError, match="render must be one of file, tokens"):
        session.generate(page_request(str(run), str(chorale_midi), 2, 6, "tokens", 1.0, 0.9, 0, 1, render="wav"))


def note_events(track: mido.MidiTrack) -> list[tuple[int, str]]:
    """(tick, message) of a track's notes."""
    return [(tick, str(m.copy(time=0))) for tick, m in absolute(track) if m.type in ("note_on", "note_off")]


def test_chords_in_the_page_are_followed_bar_by_bar(tmp_path):
    from remi import REMITokenizer

    run = save_tiny(tmp_path / "runs" / "bars", REMITokenizer(), always="Bar_None")
    session = StudioSession(tmp_path / "work", runs=[run])
    view = session.generate(page_request(str(run), None, 4, 2, "tokens", 1.0, 0.9, 0, 1, False, "C Am | F G7"))
    strings = session.ckpt.tokenizer.tokens_to_strings(session.decoder.tokens[0])
    assert [t for t in strings if t.startswith("Chord_")] == ["Chord_C_M", "Chord_A_m", "Chord_F_M", "Chord_G_7"]
    assert strings.count("Bar_None") == 5 and view.samples[0].new_tokens > 0  # 4 bars, then the stop's bar line
    with pytest.raises(StudioError, match="bad chord symbol 'Hm'"):
        session.generate(page_request(str(run), None, 4, 2, "tokens", 1.0, 0.9, 0, 1, False, "C Hm"))
    groove = save_tiny(tmp_path / "runs" / "groove", GrooveTokenizer(), data={"format": "groove", "kind": "trio"})
    with pytest.raises(StudioError, match="REMI model"):
        StudioSession(tmp_path / "work", runs=[groove]).generate(Request(model=str(groove), chords="C G"))


def test_a_form_in_the_page_restates_its_returning_phrases_with_their_chords(tmp_path):
    from remi import REMITokenizer

    run = save_tiny(tmp_path / "runs" / "bars", REMITokenizer(), always="Bar_None")
    session = StudioSession(tmp_path / "work", runs=[run])
    session.generate(page_request(str(run), None, 4, 2, "tokens", 1.0, 0.9, 0, 1, False, "A: C; B: F G",
                                  "A1 B2 A1"))
    strings = session.ckpt.tokenizer.tokens_to_strings(session.decoder.tokens[0])
    assert [t for t in strings if t.startswith("Chord_")] == ["Chord_C_M", "Chord_F_M", "Chord_G_M", "Chord_C_M"]
    for form, chords, message in (("A8 Q8", "", "unknown label 'Q'"), ("A4", "B: C", "does not have"),
                                  ("A40 B40", "", "leaves 80 bars to write: at most 64")):
        with pytest.raises(StudioError, match=message):
            session.generate(page_request(str(run), None, 4, 2, "bars", 1.0, 0.9, 0, 1, False, chords, form))
    groove = save_tiny(tmp_path / "runs" / "groove", GrooveTokenizer(), data={"format": "groove", "kind": "trio"})
    with pytest.raises(StudioError, match="pop piano"):
        StudioSession(tmp_path / "work", runs=[groove]).generate(Request(model=str(groove), form="A4"))


def test_infill_rewrites_the_bars_typed_and_keeps_the_rest(tmp_path, chorale_midi):
    from remi import REMITokenizer

    fim = REMITokenizer().with_infill()
    run = save_tiny(tmp_path / "runs" / "fim", fim, max_len=4096, always="Bar_None")
    session = StudioSession(tmp_path / "work", runs=[run])
    request = Request(model=str(run), prompt=str(chorale_midi), num_samples=2, audio=False)
    view = session.infill(request, "2-3")
    assert "rewrote bars 2-3" in view.status and len(view.samples) == 2
    song = fim.tokens_to_strings(fim.encode(chorale_midi))
    starts = fim.bar_starts(fim.strings_to_ids(song))
    for sample in view.samples:
        tokens = tokens_of(sample.tokens)
        assert tokens[:starts[1]] == song[:starts[1]] and tokens[-(len(song) - starts[3]):] == song[starts[3]:]
        assert len(fim.bar_starts(fim.strings_to_ids(tokens))) == len(starts)
        middle = tokens[starts[1]:len(tokens) - (len(song) - starts[3])]
        assert all(any(t.startswith("Note_Pitch") for t in bar)
                   for bar in " ".join(middle).split("Bar_None")[1:] for bar in [bar.split()])
        written = mido.MidiFile(sample.midi)  # the uploaded file, its tempo and tracks as they were
        metas = [m for m in mido.MidiFile(chorale_midi).tracks[0] if m.is_meta]
        assert [m for m in written.tracks[0] if m.is_meta] == metas
    with pytest.raises(StudioError, match="cannot be continued|keeps the rest"):
        session.continue_(2, "bars")
    with pytest.raises(StudioError, match="the song has"):
        session.infill(request, "2-60")
    with pytest.raises(StudioError, match="bar range"):
        session.infill(request, "three")
    with pytest.raises(StudioError, match="rewriting bars needs the song"):
        session.infill(Request(model=str(run)), "2-3")
    plain = save_tiny(tmp_path / "runs" / "plain", REMITokenizer())
    if "pop909_infill" not in shipped_models():
        with pytest.raises(StudioError, match="fill-in-the-middle model"):
            StudioSession(tmp_path / "work", runs=[plain]).infill(
                Request(model=str(plain), prompt=str(chorale_midi)), "2-3")


def test_groove_continuation_shows_style_similarity(tmp_path):
    run = save_tiny(tmp_path / "groove_run", GrooveTokenizer(), data={"format": "groove", "kind": "trio"})
    upload = band_midi(tmp_path / "band.mid")
    session = StudioSession(tmp_path / "work", runs=[run])
    view = session.generate(Request(model=str(run), prompt=str(upload), prompt_bars=2, length=40, unit="tokens",
                                    num_samples=2, audio=False))
    assert view.samples[0].wav is None
    assert session.reference is not None and session.decoder.prompt_len < len(session.reference)
    rows = view.similarity
    assert sorted({(r[0], r[1]) for r in rows}) == [(1, "onset-duration"), (1, "time-pitch"),
                                                     (2, "onset-duration"), (2, "time-pitch")]
    assert all(len(r) == 6 and all(0.0 <= v <= 1.0 for v in r[2:]) for r in rows)
    more = session.continue_(20, "tokens")
    assert len(more.similarity) == 4


def test_a_model_that_writes_all_it_is_asked_runs_on_in_the_studio(tmp_path):
    """generate.end = False (the shipped groove model's default) applies in the studio as in generate.py."""
    groove = {"format": "groove", "kind": "trio"}
    for end, expected in ((True, 1), (False, 30)):
        run = save_tiny(tmp_path / f"end_{end}", GrooveTokenizer(), data=groove, always="End_None",
                        generate={"end": end})
        session = StudioSession(tmp_path / f"work_{end}", runs=[run])
        view = session.generate(Request(model=str(run), length=30, unit="tokens", audio=False))
        assert view.samples[0].new_tokens == expected and view.samples[0].at_eos == end


def test_the_shipped_groove_model_continues_an_uploaded_band_song(tmp_path):
    if "groove" not in shipped_models():
        pytest.skip("no shipped groove model")
    session = StudioSession(tmp_path / "work")
    view = session.generate(Request(model="groove" + SHIPPED_SUFFIX, prompt=str(band_midi(tmp_path / "band.mid")),
                                    prompt_bars=2, length=2, unit="bars", num_samples=1, audio=True))
    assert read_wav(view.samples[0].wav)[0].size > 0
    assert {r[1] for r in view.similarity} == {"onset-duration", "time-pitch"}
    assert len(miditoolkit.MidiFile(str(view.samples[0].midi)).instruments) >= 2


@pytest.mark.parametrize("case", ["not_midi", "empty", "huge", "no_notes", "gone"])
def test_bad_uploads_are_clear_errors(tmp_path, case):
    path = tmp_path / "prompt.mid"
    if case == "not_midi":
        path.write_text("hello, this is a text file")
        expected = "not a MIDI file"
    elif case == "empty":
        path.write_bytes(b"")
        expected = "empty"
    elif case == "huge":
        with path.open("wb") as handle:
            handle.write(b"MThd")
            handle.truncate(MAX_UPLOAD_BYTES + 1)
        expected = "MiB"
    elif case == "no_notes":
        miditoolkit.MidiFile(ticks_per_beat=480).dump(str(path))
        expected = "prompt"
    else:
        expected = "not found"
    if case == "no_notes":
        run = save_tiny(tmp_path / "run", GrooveTokenizer(), data={"format": "groove", "kind": "trio"})
        with pytest.raises(StudioError, match=expected):
            StudioSession(tmp_path / "work", runs=[run]).generate(Request(model=str(run), prompt=str(path),
                                                                          audio=False))
    else:
        with pytest.raises(StudioError, match=expected):
            StudioSession(tmp_path / "work").generate(Request(prompt=str(path), audio=False))


def test_bad_settings_and_models(tmp_path):
    from remi import REMITokenizer

    runs = tmp_path / "runs"
    good = save_tiny(runs / "good", REMITokenizer())
    (runs / "junk" / "checkpoints" / "step_000001").mkdir(parents=True)  # not a complete checkpoint
    session = StudioSession(tmp_path / "work", runs=[runs])
    assert session.generate(Request(model=str(good), length=4, unit="tokens", audio=False)).samples
    for model in [str(tmp_path / "nowhere"), str(tmp_path), str(runs / "junk"), "/etc", "../../etc/passwd",
                  str(good / "checkpoints"), "pop909"]:
        with pytest.raises(StudioError) as caught:
            session.generate(Request(model=model))
        assert str(caught.value) == "unknown model: choose one of the models in the list", model
    with pytest.raises(StudioError, match="bars must be >= 1, got 0"):
        session.generate(Request(length=0))
    with pytest.raises(StudioError, match="samples"):
        session.generate(Request(num_samples=9))
    with pytest.raises(StudioError, match="top_p"):
        session.generate(Request(model=str(good), top_p=0.0))
    with pytest.raises(StudioError, match="temperature"):
        session.generate(Request(model=str(good), temperature=float("inf")))
    for seed in (2**80, -1):
        with pytest.raises(StudioError, match="seed must be an integer in 0 .. 2\\*\\*64 - 1"):
            session.generate(Request(model=str(good), seed=seed, audio=False))
    with pytest.raises(StudioError, match="Generate first"):
        StudioSession(tmp_path / "fresh", runs=[runs]).continue_(4)


def test_a_listed_run_that_cannot_load_names_no_server_path(tmp_path):
    from remi import REMITokenizer

    run = save_tiny(tmp_path / "runs" / "broken", REMITokenizer())
    meta = run / "checkpoints" / "step_000003" / "meta.json"
    meta.write_text("{" + " " * (meta.stat().st_size - 1))  # the manifest's size, unreadable content
    session = StudioSession(tmp_path / "work", runs=[tmp_path / "runs"])
    with pytest.raises(StudioError) as caught:
        session.generate(Request(model=str(run)))
    assert "cannot load the model 'broken'" in str(caught.value)
    assert str(tmp_path) not in public_message(caught.value)


def test_public_messages_name_no_server_path():
    error = StudioError("cannot read /srv/uploads/tmp1234/song.mid as a prompt: bad chunk in '/home/x/y.mid'")
    assert public_message(error) == "cannot read song.mid as a prompt: bad chunk in 'y.mid'"
    assert public_message(StudioError("ratio 3/4 at bar 2")) == "ratio 3/4 at bar 2"


def test_page_values_are_checked_by_field():
    request = page_request(SHIPPED, None, 2.0, "8", "tokens", "0.9", 0.95, 12.0, 1)
    assert (request.prompt_bars, request.length, request.seed, request.temperature) == (2, 8, 12, 0.9)
    for args, field in [((1, 8, 1.0, 0.9, float("nan"), 1), "seed"), ((1, 8, 1.0, 0.9, 1.5, 1), "seed"),
                        ((1, 8, "inf", 0.9, 0, 1), "temperature"), ((1, 8, 1.0, "wide", 0, 1), "top-p"),
                        ((1, float("inf"), 1.0, 0.9, 0, 1), "length"), ((1, 8, 1.0, 0.9, 0, "two"), "samples")]:
        bars, length, temperature, top_p, seed, samples = args
        with pytest.raises(StudioError, match=field):
            page_request(SHIPPED, None, bars, length, "tokens", temperature, top_p, seed, samples)
    unset = page_request(SHIPPED, None, 1, 8, "tokens", None, "", 0, 1)  # the model's own, as generate.py
    assert unset.temperature is None and unset.top_p is None


def test_the_page_starts_from_the_models_own_sampling_defaults(tmp_path):
    from remi import REMITokenizer
    from training.config import GenerateConfig

    run = save_tiny(tmp_path / "runs" / "tiny", REMITokenizer())
    ckpt_config = load_model(run).config.generate
    assert sampling_defaults(str(run), [run]) == (ckpt_config.temperature, ckpt_config.top_p)
    assert sampling_defaults("no such model", [run]) == (GenerateConfig().temperature, GenerateConfig().top_p)
    session = StudioSession(tmp_path / "work", runs=[run])
    session.generate(Request(model=str(run), length=3, unit="tokens", audio=False))
    assert session.decoder.sampling.temperature == ckpt_config.temperature


def test_model_choices_list_runs(tmp_path):
    from remi import REMITokenizer

    run = save_tiny(tmp_path / "runs" / "tiny", REMITokenizer())
    (run / "checkpoints" / "latest").unlink()  # a run is listed by its complete checkpoints
    choices = model_choices([tmp_path / "runs", tmp_path / "absent"])
    assert str(run) in choices and model_path(str(run), [tmp_path / "runs"]) == run
    assert (SHIPPED in choices) == (shipped_default() is not None)
    assert all(f"{name} (shipped)" in choices and model_path(f"{name} (shipped)") == folder
               for name, folder in shipped_models().items())


def test_page_callbacks_turn_errors_into_messages(tmp_path):
    pytest.importorskip("gradio")
    from apps.studio import Studio

    studio = Studio(tmp_path / "work")
    junk = tmp_path / "junk.mid"
    junk.write_text("not midi")
    out = studio.generate(None, SHIPPED, str(junk), 2, 8, "tokens", 1.0, 0.9, 0, 1)
    assert isinstance(out[0], StudioSession) and out[1].startswith("**Error:**") and "not a MIDI" in out[1]
    out = studio.undo(out[0])
    assert "nothing to undo" in out[1]
    if shipped_default() is not None:
        out = studio.generate(out[0], SHIPPED, None, 2, 8, "tokens", 1.0, 0.9, 0, 2)
        session, status, choice, roll, wav, downloads, _ = out
        assert "generated 2" in status and Path(roll).is_file() and Path(wav).suffix == ".wav"
        assert [Path(p).suffix for p in downloads] == [".mid", ".wav", ".ogg", ".txt"]
        shown = studio.show(session, "2")
        assert shown[1] == str(session.history[-1].view.samples[1].pianoroll)


@pytest.mark.parametrize("args, message", [(["--port", "0"], "--port"), (["--threads", "0"], "--threads"),
                                           (["--device", "tpu"], "invalid choice")])
def test_spe_studio_rejects_bad_options_on_one_line(args, message, capsys):
    from apps.studio import main

    assert exit_status(main, args) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("spe-studio: error: ") and message in err[0]
