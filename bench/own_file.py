"""Is the user's file kept? generate.py's infill and continuations on held-out songs, compared with the songs.

    python -m bench.own_file --songs 5 --out eval/own_file [--render file|tokens]

For each held-out song of the corpus's test split (its MIDI file under the corpus's data.source), the
README's commands run as a user runs them, one process each:

* infill: ``generate.py --prompt SONG --infill-bars 9-12 --seed 5 --no-audio``
* continuation of the first 8 bars: ``--prompt-bars 8 --bars 4``; of the whole song: ``--prompt-bars all --bars 4``

and the written file is compared with the song, message by message (mido). The generated bars are
taken from the tokenizer's bar grid of the song (``EncodeStats.bar_ticks``): bars 9-12, bars 9-12, and
everything after the song's last bar. Per case:

* kept: of the song's pitched notes that start outside the generated bars (onsets rounded to the
  16th grid, as the tokenizer reads them), the share found in the
  output with the same track, channel, start and end tick, pitch and velocity;
* on time: the share found at the same pitch and the same start and end in seconds (within 1 ms),
  whatever the track: what a listener lining the files up hears (the measure that also applies to
  ``--render tokens``, whose file has its own ticks);
* other messages kept: the song's tempo, meter, key, marker, lyric, program and controller messages
  found at the same tick in the same track (as a share);
* generated: notes of the output that the song does not have, and the share of them on the file's
  16th-note grid.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Sequence

import mido
import numpy as np
from tqdm import tqdm

from generation.own_file import DRUM_CHANNEL, GRID, absolute, note_pairs
from tokenization import load_midi
from tokenization.midi_io import tick_to_seconds
from training.checkpoint import load_model

CASES = {  # name: (generate.py arguments, first generated bar (0-based), bars generated; None: after the song)
    "infill 9-12": (["--infill-bars", "9-12"], 8, 4),
    "continue bars 1-8": (["--prompt-bars", "8", "--bars", "4"], 8, 4),
    "continue all": (["--prompt-bars", "all", "--bars", "4"], None, None),
}


def notes_of(midi: mido.MidiFile) -> list[tuple[int, int, int, int, int, int]]:
    """(track, channel, start, end, pitch, velocity) of every pitched note."""
    out = []
    for index, track in enumerate(midi.tracks):
        events = absolute(track)
        for on, off, channel in note_pairs(events):
            message = events[on][1]
            out.append((index, channel, events[on][0], events[off][0], message.note, message.velocity))
    return out


def others_of(midi: mido.MidiFile) -> Counter:
    """(track, tick, message) of every message that is not a note or the end of a track."""
    return Counter((index, tick, str(message.copy(time=0))) for index, track in enumerate(midi.tracks)
                   for tick, message in absolute(track)
                   if message.type not in ("note_on", "note_off", "end_of_track")
                   and not (getattr(message, "channel", None) == DRUM_CHANNEL))


def seconds(path: Path, ticks: np.ndarray) -> np.ndarray:
    return tick_to_seconds(load_midi(path), ticks)


def compare(song: Path, output: Path, span: tuple[int, float]) -> dict[str, float]:
    """The measures of the module docstring; `span`: the generated bars in the song's ticks."""
    original, written = mido.MidiFile(song, clip=True), mido.MidiFile(output, clip=True)
    half = original.ticks_per_beat / (2 * GRID)  # onsets round to the 16th grid, as the tokenizer reads them
    before = [n for n in notes_of(original) if not span[0] <= n[2] + half < span[1]]
    after = notes_of(written)
    exact = Counter(after)
    kept = sum(min(count, exact[note]) for note, count in Counter(before).items())
    old = seconds(song, np.array([[n[2], n[3]] for n in before], dtype=np.float64))  # (N, 2)
    new = seconds(output, np.array([[n[2], n[3]] for n in after], dtype=np.float64))  # (M, 2)
    heard = {(pitch, round(s * 1000), round(e * 1000)) for (*_, pitch, _), (s, e) in zip(after, new)}
    on_time = sum(any((n[4], round(s * 1000) + ds, round(e * 1000) + de) in heard
                      for ds in (-1, 0, 1) for de in (-1, 0, 1)) for n, (s, e) in zip(before, old))
    others, others_out = others_of(original), others_of(written)
    per_16th = written.ticks_per_beat / 4
    generated = list((exact - Counter(notes_of(original))).elements())  # notes the song does not have
    return {"notes_outside": len(before), "kept": kept / max(1, len(before)),
            "on_time": on_time / max(1, len(before)),
            "other_messages_kept": sum((others & others_out).values()) / max(1, sum(others.values())),
            "generated_notes": len(generated),
            "generated_on_grid": sum(abs(n[2] / per_16th - round(n[2] / per_16th)) < 1e-6 for n in generated)
            / max(1, len(generated))}


def generated_span(tokenizer, song: Path, first: int | None, bars: int | None) -> tuple[int, float]:
    """The generated bars in the song's ticks, from the tokenizer's bar grid of the song."""
    tokenizer.encode(song)
    ticks = tokenizer.last_encode_stats.bar_ticks
    if first is None:  # after the song's last bar: from the end of that bar
        return ticks[-1] + (ticks[-1] - ticks[-2]), float("inf")
    return ticks[first], ticks[first + bars] if first + bars < len(ticks) else float("inf")


def run(args: argparse.Namespace) -> dict:
    summary = json.loads((Path(args.corpus) / "summary.json").read_text())
    source = Path(summary["settings"]["folder"])
    songs = [source / entry["source"] for entry in json.loads((Path(args.corpus) / "test_index.json").read_text())]
    songs = [s for s in songs if s.is_file()][:args.songs]
    tokenizer = load_model(args.checkpoint).tokenizer
    out = Path(args.out)
    rows: dict[str, list[dict]] = {case: [] for case in CASES}
    for song in tqdm(songs, desc=f"own file (--render {args.render})", unit="song"):
        for case, (extra, first, bars) in CASES.items():
            path = out / args.render / f"{song.stem}_{case.replace(' ', '_')}.mid"
            command = [sys.executable, "generate.py", "--prompt", str(song), "--seed", "5", "--no-audio",
                       "--no-progress", "--render", args.render, "--out", str(path), *extra]
            subprocess.run(command, check=True, capture_output=True, text=True, cwd=Path(__file__).parents[1])
            rows[case].append({"song": song.stem, **compare(song, path, generated_span(tokenizer, song, first, bars))})
    return rows


def table(rows: dict, render: str) -> str:
    keys = ("kept", "on_time", "other_messages_kept", "generated_on_grid")
    lines = [f"`--render {render}`, {len(next(iter(rows.values())))} held-out songs, seed 5 (mean, min-max):\n",
             "| case | notes kept exactly | notes on time (seconds) | other messages kept "
             "| generated notes on the 16th grid | generated notes |",
             "|---|---:|---:|---:|---:|---:|"]
    for case, found in rows.items():
        cells = [f"{np.mean([r[k] for r in found]):.3f} ({min(r[k] for r in found):.3f}-{max(r[k] for r in found):.3f})"
                 for k in keys]
        lines.append(f"| {case} | " + " | ".join(cells) + f" | {np.mean([r['generated_notes'] for r in found]):.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default="corpus/pop909_bars", help="a built POP909 corpus (its test split)")
    parser.add_argument("--checkpoint", default=None,
                        help="the model whose tokenizer gives the bar grid (default: shipped)")
    parser.add_argument("--songs", type=int, default=5)
    parser.add_argument("--render", choices=("file", "tokens"), default="file")
    parser.add_argument("--out", default="eval/own_file")
    args = parser.parse_args(argv)
    rows = run(args)
    text = table(rows, args.render)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / f"own_file_{args.render}.md").write_text(text)
    (Path(args.out) / f"own_file_{args.render}.json").write_text(json.dumps(rows, indent=1))
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
