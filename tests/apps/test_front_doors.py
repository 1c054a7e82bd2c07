"""The command line and the studio read one generation request (generation/request.py): each bad input
gets the same message through both front doors (the studio's with server paths cut to their names)."""

from __future__ import annotations

from pathlib import Path

import miditoolkit
import pytest

from apps.generate import main as generate_main
from apps.studio_session import StudioError, StudioSession, page_request, public_message
from training.checkpoint import shipped_default

needs_shipped = pytest.mark.skipif(shipped_default() is None, reason="no shipped pretrained/ model")


def eight_bars(path: Path) -> Path:
    """Eight 4/4 bars of quarter notes."""
    midi = miditoolkit.MidiFile(ticks_per_beat=480)
    piano = miditoolkit.Instrument(program=0, name="Piano")
    piano.notes = [miditoolkit.Note(80, 60 + beat % 12, beat * 480, beat * 480 + 450) for beat in range(32)]
    midi.instruments.append(piano)
    midi.dump(str(path))
    return path


# (case, command-line options, the page's values, what the message says); "{song}" is an 8-bar MIDI
# file, "{text}" a text file named .mid, "{empty}" an empty file
CASES = [
    ("no bars", ["--bars", "0"], {"length": 0, "unit": "bars"}, "bars must be >= 1, got 0"),
    ("no tokens", ["--tokens", "0"], {"length": 0, "unit": "tokens"}, "tokens must be >= 1, got 0"),
    ("no samples", ["--num-samples", "0"], {"samples": 0}, "samples must be >= 1, got 0"),
    ("cold", ["--temperature", "0"], {"temperature": 0}, "temperature must be finite and > 0"),
    ("top-p over 1", ["--top-p", "1.5"], {"top_p": 1.5}, "top_p must be in (0, 1]"),
    ("bad chord", ["--chords", "C Xq"], {"chords": "C Xq"}, "Xq"),
    ("chords per label, no form", ["--chords", "A: C G"], {"chords": "A: C G"},
     "chords per label (A: ...) need a form"),
    ("bad form", ["--form", "A0"], {"form": "A0"}, "A0"),
    ("restate out of range", ["--form", "A4 B4", "--restate", "2"], {"form": "A4 B4", "restate": 2},
     "restate must be in [0, 1], got 2"),
    ("form after the whole song", ["--prompt", "{song}", "--prompt-bars", "all", "--form", "A4 B4"],
     {"prompt": "{song}", "whole": True, "form": "A4 B4"}, "a form starts with the prompt's first bars"),
    ("form within the prompt", ["--prompt", "{song}", "--prompt-bars", "4", "--form", "A2 B2"],
     {"prompt": "{song}", "prompt_bars": 4, "form": "A2 B2"}, "nothing is left to write"),
    ("prompt too short", ["--prompt", "{song}", "--prompt-bars", "12"], {"prompt": "{song}", "prompt_bars": 12},
     "has 8 bars, fewer than the 12 asked for"),
    ("prompt not MIDI", ["--prompt", "{text}"], {"prompt": "{text}"}, "is not a MIDI file"),
    ("prompt empty", ["--prompt", "{empty}"], {"prompt": "{empty}"}, "is empty"),
    ("prompt missing", ["--prompt", "{missing}"], {"prompt": "{missing}"}, "prompt file not found"),
    ("hold limit on a piano model", ["--hold-bars", "2"], {"hold_bars": 2}, "a hold limit applies to groove models"),
    ("infill beyond the song", ["--prompt", "{song}", "--infill-bars", "9-12"], {"prompt": "{song}", "infill": "9-12"},
     "the song has 8 bars"),
    ("infill range backwards", ["--prompt", "{song}", "--infill-bars", "12-9"],
     {"prompt": "{song}", "infill": "12-9"}, "expected a bar range like 9-12"),
    ("infill, no song", ["--infill-bars", "2-3"], {"infill": "2-3"}, "rewriting bars needs the song"),
]


@pytest.fixture
def files(tmp_path):
    text = tmp_path / "notes.mid"
    text.write_text("not a MIDI file")
    empty = tmp_path / "empty.mid"
    empty.touch()
    return {"song": str(eight_bars(tmp_path / "song.mid")), "text": str(text), "empty": str(empty),
            "missing": str(tmp_path / "missing.mid")}


def command_line_message(argv: list[str], out: Path, capsys) -> str:
    status = generate_main([*argv, "--out", str(out), "--no-audio", "--no-progress"])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert status == 2 and error.startswith("spe-generate: error: "), error
    assert not out.exists()
    return error.removeprefix("spe-generate: error: ")


def page_message(values: dict, workdir: Path) -> str:
    page = {"model": None, "prompt": None, "prompt_bars": 4, "length": 4, "unit": "bars", "temperature": None,
            "top_p": None, "seed": 0, "samples": 1, **values}
    infill = page.pop("infill", None)
    session = StudioSession(workdir)
    with pytest.raises(StudioError) as error:
        request = page_request(**page)
        if infill is None:
            session.generate(request)
        else:
            session.infill(request, infill)
    return public_message(error.value)


@needs_shipped
@pytest.mark.parametrize("case,argv,values,says", CASES, ids=[case[0] for case in CASES])
def test_both_front_doors_give_the_same_message(case, argv, values, says, files, tmp_path, capsys):
    argv = [arg.format(**files) for arg in argv]
    values = {key: value.format(**files) if isinstance(value, str) else value for key, value in values.items()}
    cli = command_line_message(argv, tmp_path / "out.mid", capsys)
    page = page_message(values, tmp_path / "work")
    assert says in cli
    assert public_message(StudioError(cli)) == page


def test_the_page_names_its_own_bounds(tmp_path):
    """The studio's limits (any local client may ask) use the command line's wording."""
    with pytest.raises(StudioError, match="bars must be <= 64 here, got 65"):
        StudioSession(tmp_path).generate(page_request(None, None, 4, 65, "bars", None, None, 0, 1))
