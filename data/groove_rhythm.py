"""A Groove2Groove folder with the bass and accompaniment rhythms varied per piece (``groove.rhythm``).

Each piece of the train and val splits gets, for its bass and for its accompaniment independently and with
probability ``prob``, one rhythm variation drawn for the whole piece (a push of some beats ahead by an
eighth, or pumped eighths; with ``--walk`` also pumped sixteenths and, for the bass, passing notes into
the next note); the drums are kept. The test split is copied unchanged, so that a model trained
on the varied corpus is selected on the same MMA pieces as one trained on the source. The draws depend
only on (seed, file name). ``out/variations.json`` lists each piece's variations.

    python -m data.groove_rhythm --source corpus/groove_wide/midi --out corpus/groove_rhythm/midi --prob 0.5
"""

from __future__ import annotations

import argparse
import json
import shutil
import zlib
from dataclasses import asdict
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from groove import GrooveTokenizer
from groove.dataset import list_splits
from groove.rhythm import draw_variation, vary
from groove.roles import ACCOMPANIMENT, BASS, TRACKS
from groove.tokenizer import tracks_to_tokens

VARIED_SPLITS = ("train", "val")  # the test split is copied as it is


def vary_piece(tokenizer: GrooveTokenizer, path: Path, rng: np.random.Generator, prob: float,
               out: Path, walk: bool = False) -> dict[str, dict]:
    """Write ``path`` with its bass and accompaniment rhythms varied (each with probability ``prob``; the
    draws of ``groove.rhythm.draw_variation``, with ``walk`` its wider set) to ``out``; returns the
    variations drawn, by role name."""
    tracks = tokenizer.parse(path).tracks()
    drawn = {}
    for role in (BASS, ACCOMPANIMENT):
        if tracks[role] and rng.random() < prob:
            variation = draw_variation(rng, walk, approach=role == BASS)
            tracks[role] = vary(tracks[role], variation)
            drawn[TRACKS[role]] = {**asdict(variation), "beats": list(variation.beats)}  # as JSON keeps it
    tokenizer.write_midi(tokenizer.strings_to_ids(tracks_to_tokens(tracks)), out)
    return drawn


def build(source: str | Path, out: str | Path, prob: float = 0.5, seed: int = 0, progress: bool = True,
          walk: bool = False) -> dict:
    """Write the varied folder (module docstring); returns the description also written as variations.json."""
    if not 0.0 <= prob <= 1.0:
        raise ValueError(f"prob must be in [0, 1], got {prob}")
    source, out = Path(source), Path(out)
    tokenizer = GrooveTokenizer()
    pieces: dict[str, dict] = {}
    for split, files in list_splits(source).items():
        for path in tqdm(files, desc=f"varying {split}", disable=not progress):
            target = out / split / path.relative_to(source / split)
            target.parent.mkdir(parents=True, exist_ok=True)
            if split not in VARIED_SPLITS:
                shutil.copyfile(path, target)
                continue
            rng = np.random.default_rng([seed, zlib.crc32(path.name.encode())])
            pieces[f"{split}/{path.name}"] = vary_piece(tokenizer, path, rng, prob, target, walk)
    report = {"source": str(source.resolve()), "prob": prob, "seed": seed, "walk": walk, "pieces": pieces}
    (out / "variations.json").write_text(json.dumps(report, indent=1))
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--source", required=True, help="Groove2Groove folder (train/, val/, test/)")
    parser.add_argument("--out", required=True, help="output folder, same layout")
    parser.add_argument("--prob", type=float, default=0.5, help="probability of varying each of bass, accompaniment")
    parser.add_argument("--seed", type=int, default=0, help="seed of the draws")
    parser.add_argument("--walk", action="store_true",
                        help="also pumped sixteenths and, for the bass, passing notes (approach)")
    args = parser.parse_args(argv)
    try:
        report = build(args.source, args.out, args.prob, args.seed, walk=args.walk)
    except (FileNotFoundError, ValueError) as err:
        raise SystemExit(f"error: {err}") from None
    varied = sum(bool(v) for v in report["pieces"].values())
    print(f"{len(report['pieces'])} pieces, {varied} with a varied rhythm -> {args.out}")


if __name__ == "__main__":
    main()
