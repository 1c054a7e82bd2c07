"""Follow my chords: does a model write bars that follow real chord progressions it is given?

    python -m bench.chord_following --corpus corpus/pop909 --songs 12 --out bench/results

For each held-out song of the corpus (its test split) with at least PROMPT_BARS + BARS bars, the
requested progression is the song's own chords of bars PROMPT_BARS + 1 .. PROMPT_BARS + BARS, one per
bar (the chord in force at each bar's first beat, as the tokenizer recognised it in the real notes;
`evaluation.chords.real_progressions`). Three ways of writing BARS bars:

* continuation: the song's first PROMPT_BARS bars prompt the model, `--chords` steering the next ones;
* unconditional: from the start token, steered;
* free: from the start token, not steered (what the progression gets by chance).

Each generated bar's chord is recognised again from its notes (`evaluation.chords`) and compared with
the requested one by root and family. Writes chord_following.csv (per song and way) and
chord_following.md (the table), and prints the table. One torch.Generator seeded once drives the
draws; each piece is a generation request (generation.request) with the model's own sampling defaults.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from data import load_corpus
from evaluation.chords import chord_agreement, real_progressions, recognised_chords
from generation.chords import chord_name, chord_symbol
from generation.pieces import first_bars, strip_eos
from generation.request import GenerationRequest
from training.checkpoint import load_model

PROMPT_BARS = 4  # bars of the real song prompting a continuation
BARS = 16  # bars written to the progression
WAYS = ("continuation", "unconditional", "free")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default=None, help="model (default: the shipped default, pretrained/latest)")
    parser.add_argument("--corpus", default="corpus/pop909", help="token corpus with a test split")
    parser.add_argument("--songs", type=int, default=12, help="held-out songs (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the decoding (default: %(default)s)")
    parser.add_argument("--out", default="bench/results", help="folder of chord_following.{csv,md}")
    args = parser.parse_args()
    if not Path(args.corpus).is_dir():
        parser.error(f"corpus not found: {args.corpus} (build it with train.py --config pop909_small, "
                     f"or as pretrained/pop909/README.md says)")
    torch.set_num_threads(args.threads)  # a recurrent step is tiny: more threads rarely help
    ckpt = load_model(args.checkpoint)
    tokenizer = ckpt.tokenizer
    corpus = load_corpus(Path(args.corpus))
    generator = torch.Generator().manual_seed(args.seed)
    songs = []
    for ids, name in zip(corpus.pieces("test"), corpus.names("test")):
        ids = strip_eos(ids, tokenizer.eos_id)
        chords = real_progressions(tokenizer, ids)
        if len(chords) >= PROMPT_BARS + BARS and len(songs) < args.songs:
            songs.append((name, ids, chords[PROMPT_BARS:PROMPT_BARS + BARS]))
    rows = []
    for name, ids, requested in tqdm(songs, desc="songs", unit="song"):
        for way in WAYS:
            request = GenerationRequest(  # as spe-generate --chords "..." --bars BARS asks
                prompt_ids=first_bars(tokenizer, ids, PROMPT_BARS) if way == "continuation" else None,
                chords=None if way == "free" else " ".join(map(chord_symbol, requested)),
                bars=BARS, tokens=40 * BARS * 4)
            result = request.run(ckpt, generator)[0]
            first_bar = PROMPT_BARS if way == "continuation" else 0
            recognised = recognised_chords(tokenizer, result.tokens, first_bar, BARS)
            rows.append({"song": name, "way": way, "agreement": chord_agreement(requested, recognised),
                         "requested": " ".join(chord_name(c) for c in requested),
                         "recognised": " ".join(chord_name(c) for c in recognised)})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "chord_following.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    model_name = args.checkpoint or ckpt.path.name
    lines = [f"{model_name}: the real chords of bars {PROMPT_BARS + 1}-{PROMPT_BARS + BARS} of {len(songs)} "
             f"held-out songs of {args.corpus}, {BARS} bars written; bars whose recognised chord has the "
             f"requested root and family (seed {args.seed})", "",
             "| way | songs | bars following, mean | per song, min-max |", "|---|---:|---:|---:|"]
    for way in WAYS:
        values = np.asarray([r["agreement"] for r in rows if r["way"] == way])
        lines.append(f"| {way} | {len(values)} | {values.mean():.1%} | {values.min():.0%}-{values.max():.0%} |")
    table = "\n".join(lines) + "\n"
    (out / "chord_following.md").write_text(table)
    print(table, end="")


if __name__ == "__main__":
    main()
