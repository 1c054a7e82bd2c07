"""REMI encoding throughput: our ``REMITokenizer`` against MidiTok's REMI on the same MIDI files.

Both tokenizers start from the file path (loading included: ours parses with miditoolkit/mido, MidiTok
with symusic) and run in this process, interleaved, ``--repeats`` times; the best pass of each is
reported in files/s and notes/s. MidiTok runs with 16 positions per 4/4 bar (``beat_res={(0, 4): 4}``),
once with its other defaults (time signatures, no tempo or chord tokens) and once matched to ours
(pitches 22..107, 24 velocities, tempo, chord and time-signature tokens). A last row times ours on
files already parsed by miditoolkit, i.e. the tokenizer without MIDI parsing.

    .venv/bin/python -m bench.remi_throughput                 # ~40 Bach chorales from music21
    .venv/bin/python -m bench.remi_throughput --folder my_midis --repeats 5

Default data: the first ``--count`` Bach chorales bundled with music21, written as MIDI into a
temporary folder (music21 writes 10080 ticks per beat, so ours also rescales).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path
from typing import Callable

import miditoolkit

from remi import REMITokenizer
from tokenization import midi_files

logger = logging.getLogger("remi_throughput")


def write_chorales(folder: Path, count: int) -> list[Path]:
    """Write the first ``count`` parseable Bach chorales of music21's corpus as MIDI files."""
    from music21 import corpus

    paths = []
    for source in corpus.getComposer("bach"):
        if len(paths) == count:
            break
        score = corpus.parse(source)
        out = folder / f"{Path(str(source)).stem}.mid"
        score.write("midi", fp=str(out))
        paths.append(out)
    return paths


def miditok_tokenizers() -> dict[str, Callable[[Path], object]]:
    """MidiTok REMI encoders (16 positions per bar) with and without tempo/chord/meter tokens."""
    from miditok import REMI, TokenizerConfig

    default = REMI(TokenizerConfig(beat_res={(0, 4): 4}))
    matched = REMI(
        TokenizerConfig(
            beat_res={(0, 4): 4},
            pitch_range=(22, 108),
            num_velocities=24,
            special_tokens=["PAD", "EOS"],
            use_tempos=True,
            use_chords=True,
            use_time_signatures=True,
        )
    )
    return {"miditok REMI (defaults)": default.encode, "miditok REMI (matched)": matched.encode}


def best_pass(encode: Callable[[Path], object], files: list[Path]) -> float:
    """Seconds to encode every file once."""
    start = time.perf_counter()
    for path in files:
        encode(path)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--folder", type=Path, help="MIDI folder (default: Bach chorales from music21)")
    parser.add_argument("--count", type=int, default=40, help="chorales to generate without --folder")
    parser.add_argument("--repeats", type=int, default=3, help="passes per tokenizer (best is kept)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    with tempfile.TemporaryDirectory() as tmp:
        if args.folder is None:
            files = write_chorales(Path(tmp), args.count)
        else:
            files = midi_files(args.folder)
        ours = REMITokenizer()
        usable = []
        for path in files:
            try:
                ours.encode(path)
                usable.append(path)
            except ValueError as err:
                logger.warning("skipping %s", err)
        parsed = {path: miditoolkit.MidiFile(str(path)) for path in usable}
        notes = sum(len(inst.notes) for midi in parsed.values() for inst in midi.instruments)
        runners = {
            "ours (REMITokenizer)": ours.encode,
            **miditok_tokenizers(),
            "ours, MIDI already parsed": lambda path: ours.encode(parsed[path]),
        }
        times = {name: float("inf") for name in runners}
        for _ in range(args.repeats):
            for name, encode in runners.items():
                times[name] = min(times[name], best_pass(encode, usable))

    print(f"{len(usable)} files, {notes} notes, best of {args.repeats} passes")
    print(f"{'tokenizer':32s} {'files/s':>9s} {'notes/s':>10s}")
    for name, seconds in times.items():
        print(f"{name:32s} {len(usable) / seconds:9.1f} {notes / seconds:10.0f}")
    ours_time = times["ours (REMITokenizer)"]
    for name, seconds in times.items():
        if name.startswith("miditok"):
            print(f"ratio ours / {name}: {seconds / ours_time:.2f}x")


if __name__ == "__main__":
    main()
