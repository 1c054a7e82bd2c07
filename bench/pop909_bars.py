"""POP909 bars per song with the REMI meter policy, against two references.

For every song below ``folder``: MELODY, BRIDGE and PIANO merged (``data.pop909.merge_tracks``), encoded
with ``REMITokenizer(time_signatures=True)``; ``bars`` = Bar tokens (POP909's meters are at most 16
sub-beats, one Bar per bar). References:

* ``grid``: the song's length on the MIDI's own beat grid, first note onset to last note end, in beats,
  divided by the beats per bar of the meter used (``ceil``), plus one when the inferred downbeat puts a
  pickup bar before the first full bar. It checks that bar lines follow the meter (no bar per beat,
  no bars lost at the start), not which meter was chosen;
* ``annotated``: POP909's own downbeat annotations (``beat_midi.txt``, third column) for the songs of
  :data:`ANNOTATED`, counted by hand from the dataset repository (music-x-lab/POP909-Dataset); the shared
  copy holds only the MIDI files. It checks the meter choice too.

Prints the share of songs within 5% of each reference, the meters used, and the worst songs; writes
``--out`` (JSON, one entry per song) and ``--plot`` (bars against the references) when given.

    python -m bench.pop909_bars ../shared/data/pop909 --plot bench/results/pop909_bars.png
"""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter
from pathlib import Path

from tqdm.auto import tqdm

from bench import save_figure
from data.pop909 import merge_tracks, pop909_files
from remi import REMITokenizer
from remi.vocab import meter_length
from tokenization import load_midi

# song -> downbeats in POP909's beat_midi.txt (third column), counted by hand from the bar of the first
# note on (029 has 19 beats of silence first, and four irregular bars, as annotated). Triple-time songs
# are marked with a downbeat every 6 beats there (column two marks every 3 beats); both are given.
ANNOTATED: dict[str, dict[str, int]] = {
    "001": {"downbeats": 73},
    "009": {"downbeats": 118},
    "029": {"downbeats": 109},
    "034": {"downbeats": 74, "every_3_beats": 147},
    "152": {"every_3_beats": 185},  # one 5-beat bar; column three is irregular near the end, not counted
}


def measure(path: Path, tokenizer: REMITokenizer) -> dict:
    """Bars, meter and the grid reference of one song."""
    midi, _ = merge_tracks(load_midi(path), str(path))  # as the pop909 corpus: declared meters left out
    ids, stats = tokenizer.encode_with_report(midi)
    bars = len(tokenizer.bar_starts(ids))
    notes = midi.instruments[0].notes
    tpq = midi.ticks_per_beat
    first = min(n.start for n in notes) / tpq
    last = max(n.end for n in notes) / tpq
    meter = tuple(int(x) for x in stats.meter.split("/")) if "/" in stats.meter else (4, 4)
    per_bar = meter_length(meter) / 4  # beats
    downbeat = (stats.start % meter_length(meter)) / 4  # beats: where the bar grid starts, mod one bar
    pickup = (downbeat - first) % per_bar > 1e-9 and stats.start < 0
    grid = math.ceil((last - first) / per_bar - 1e-9) + int(pickup)
    return {
        "bars": bars,
        "grid": grid,
        "meter": stats.meter,
        "source": stats.meter_source,
        "reason": stats.meter_reason,
        "leading_bars_dropped": stats.leading_bars_dropped,
        "start_sub_beat": stats.start,
    }


def plot(rows: dict[str, dict], path: Path) -> None:
    """Bars per song against the grid reference, by meter, with the hand-counted POP909 downbeats."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 5))
    for meter, colour in (("4/4", "tab:blue"), ("3/4", "tab:orange")):
        chosen = [r for r in rows.values() if r["meter"] == meter]
        label = f"{meter} ({len(chosen)} songs)"
        ax.scatter([r["grid"] for r in chosen], [r["bars"] for r in chosen], s=8, c=colour, label=label)
    for name, counts in ANNOTATED.items():
        if name in rows:
            reference = counts.get("every_3_beats", counts.get("downbeats"))
            ax.scatter([reference], [rows[name]["bars"]], marker="x", s=60, c="black")
            ax.annotate(name, (reference, rows[name]["bars"]), textcoords="offset points", xytext=(4, -10))
    top = max(max(r["grid"], r["bars"]) for r in rows.values()) * 1.05
    ax.plot([0, top], [0, top], c="grey", lw=0.8)
    ax.fill_between([0, top], [0, 0.95 * top], [0, 1.05 * top], color="grey", alpha=0.15, label="within 5%")
    ax.set(xlabel="reference: length in beats / beats per bar (x: POP909 annotated downbeats)",
           ylabel="bars written by REMI", title=f"POP909, {len(rows)} songs: bars per song")
    ax.legend(loc="upper left")
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="POP909 folder (NNN/NNN.mid or NNN.mid)")
    parser.add_argument("--limit", type=int, default=None, help="first N songs only (default: all)")
    parser.add_argument("--out", default=None, help="write the per-song figures here (JSON)")
    parser.add_argument("--plot", default=None, help="write a plot of bars against the references here (PNG)")
    args = parser.parse_args(argv)
    tokenizer = REMITokenizer(time_signatures=True)
    songs = list(pop909_files(args.folder).items())[: args.limit]
    rows = {name: measure(path, tokenizer) for name, path in tqdm(songs, desc="POP909", unit="song")}

    def within(bars: int, reference: int) -> bool:
        return abs(bars - reference) <= 0.05 * reference

    grid_ok = [n for n, r in rows.items() if within(r["bars"], r["grid"])]
    print(f"songs: {len(rows)}; bars within 5% of the grid reference: {len(grid_ok)} ({len(grid_ok) / len(rows):.1%})")
    meters = Counter(f"{r['meter']} ({r['source']})" for r in rows.values())
    print("meters used:", ", ".join(f"{k}: {n}" for k, n in meters.most_common()))
    worst = sorted(rows, key=lambda n: -abs(rows[n]["bars"] - rows[n]["grid"]) / rows[n]["grid"])[:5]
    for name in worst:
        print(f"  {name}: {rows[name]['bars']} bars, grid {rows[name]['grid']}, {rows[name]['reason']}")
    for name, counts in ANNOTATED.items():
        if name in rows:
            bars = rows[name]["bars"]
            rows[name]["annotated"] = counts
            verdict = {k: f"{v} ({'within' if within(bars, v) else 'outside'} 5%)" for k, v in counts.items()}
            print(f"  annotated {name}: {bars} bars ({rows[name]['meter']}); POP909 {verdict}")
    if args.plot:
        plot(rows, Path(args.plot))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
