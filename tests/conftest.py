"""Shared fixtures: small real MIDI files made from the public-domain scores bundled with music21
(built once per test session into a temporary folder; parsing + MIDI export takes ~0.2-0.9 s a
score), and one thread for the end-to-end tests of tiny models.
"""

from __future__ import annotations

from pathlib import Path

import pytest

# (name, music21 corpus path, abc tune number or None, meter)
SCORES = [
    ("chorale_4_4", "bach/bwv66.6", None, "4/4"),
    ("chorale_3_4", "bach/bwv269", None, "3/4"),
    ("jig_6_8", "airdsAirs/book1.abc", 4, "6/8"),
    ("reel_2_2", "ryansMammoth/AlhambraReel.abc", None, "2/2"),
]


def _write_midi(corpus_path: str, number: int | None, out: Path) -> Path:
    from music21 import corpus

    score = corpus.parse(corpus_path, number=number) if number is not None else corpus.parse(corpus_path)
    score.write("midi", fp=str(out))
    return out


@pytest.fixture(scope="session")
def midi_files(tmp_path_factory) -> dict[str, Path]:
    """``{meter: path}`` for four short pieces in 4/4, 3/4, 6/8 and 2/2."""
    folder = tmp_path_factory.mktemp("music21_midi")
    return {meter: _write_midi(path, number, folder / f"{name}.mid") for name, path, number, meter in SCORES}


@pytest.fixture(scope="session")
def chorale_midi(midi_files) -> Path:
    """A four-part Bach chorale (BWV 66.6, 4/4) as a MIDI file."""
    return midi_files["4/4"]


@pytest.fixture(scope="session")
def midi_folder(midi_files, tmp_path_factory) -> Path:
    """A folder with the four pieces plus an empty file and a non-MIDI file (folder runs must go on)."""
    folder = tmp_path_factory.mktemp("midi_folder")
    for path in midi_files.values():
        (folder / path.name).write_bytes(path.read_bytes())
    (folder / "empty.mid").write_bytes(b"")
    (folder / "not_midi.mid").write_text("this is not a MIDI file")
    return folder


ONE_THREAD_FOLDERS = ("apps", "training", "generation", "evaluation")  # tests of tiny models run end to end


@pytest.fixture(autouse=True)
def one_thread(request):
    """In ONE_THREAD_FOLDERS, one intra-op thread: tiny tensors avoid thread-synchronisation
    overhead on loaded CPUs, and runs stay reproducible."""
    if request.path.parent.name not in ONE_THREAD_FOLDERS:
        yield
        return
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
