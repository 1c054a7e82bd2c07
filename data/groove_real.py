"""A Groove2Groove folder with real band songs added to a base folder's training split.

The synthetic pieces (MMA renditions) teach grooves; real band songs (for example the OpenMSX songs)
teach how real parts go. The real songs the format reads (4/4, see ``groove.roles.band_problem``) are
split for cross-validation: the full band pieces (drums, bass and an accompaniment: the songs
``evaluate.py groove --real`` scores) are dealt into ``folds`` folds by a seeded shuffle of their names;
with ``fold`` = k the k-th fold is the test split and every other real song joins the training split;
with ``fold`` = None every real song joins it and the test split is the base's. A song missing a role
(no drums, say) is never a test piece but still trains its other parts.

The training split samples one crop per file and epoch, so each real song is linked ``repeat`` times
(``<name>.r<i>.mid``) to weigh it against the base's many short pieces. The base's files are linked, not
copied. ``out/real_songs.json`` lists which songs went where.

    python -m data.groove_real --base corpus/groove_rhythm/midi --real ../shared/data/openmsx_band \
        --out corpus/groove_real0/midi --fold 0 --folds 2 --repeat 60
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np

from groove.dataset import list_splits
from groove.roles import band_problem, meter_problem
from tokenization import TokenizationError, load_midi, midi_files


def real_songs(folder: Path) -> tuple[list[str], list[str], dict[str, str]]:
    """The songs below ``folder`` (names relative to it): full band pieces, other 4/4 songs, and the
    songs left out with the reason."""
    full, partial, left_out = [], [], {}
    for path in midi_files(folder):
        name = str(path.relative_to(folder))
        try:
            midi = load_midi(path)
        except TokenizationError as error:
            left_out[name] = error.reason
            continue
        meter = meter_problem(midi)
        if meter:
            left_out[name] = meter
        elif band_problem(midi, name) is None:
            full.append(name)
        else:
            partial.append(name)
    return full, partial, left_out


def deal_folds(names: list[str], folds: int, seed: int) -> list[list[str]]:
    """``names`` shuffled by ``seed`` and dealt into ``folds`` folds of sizes differing by at most one."""
    order = np.random.default_rng(seed).permutation(len(names))
    return [sorted(names[i] for i in order[k::folds]) for k in range(folds)]


def _link(target: Path, link: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(target.resolve(), link.parent.resolve()), link)


def build(base: str | Path, real: str | Path, out: str | Path, fold: int | None = None, folds: int = 2,
          repeat: int = 60, seed: int = 0) -> dict:
    """Write the folder (module docstring); returns the description also written as real_songs.json."""
    base, real, out = Path(base), Path(real), Path(out)
    if folds < 2:
        raise ValueError(f"folds must be at least 2, got {folds}")
    if fold is not None and not 0 <= fold < folds:
        raise ValueError(f"fold must be in 0..{folds - 1}, got {fold}")
    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, got {repeat}")
    if not real.is_dir():
        raise FileNotFoundError(f"{real}: no such folder of real band songs")
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"{out} is not empty (links of another fold would stay): remove it or choose another --out")
    splits = list_splits(base)
    full, partial, left_out = real_songs(real)
    if not full:
        raise ValueError(f"{real}: no song with drums, bass and an accompaniment in 4/4")
    test = deal_folds(full, folds, seed)[fold] if fold is not None else []
    train = sorted(set(full + partial) - set(test))
    for split, files in splits.items():
        if split == "test" and fold is not None:
            continue
        for path in files:
            _link(path, out / split / path.relative_to(base / split))
    for name in train:
        stem = Path(name).with_suffix("")
        for i in range(repeat):
            _link(real / name, out / "train" / "real" / f"{stem}.r{i}.mid")
    for name in test:
        _link(real / name, out / "test" / name)
    report = {"base": str(base), "real": str(real), "fold": fold, "folds": folds, "repeat": repeat, "seed": seed,
              "train": train, "test": test, "left_out": left_out}
    (out / "real_songs.json").write_text(json.dumps(report, indent=1))
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--base", required=True, help="Groove2Groove folder (train/, val/, test/) to add the songs to")
    parser.add_argument("--real", required=True, help="folder of real band MIDI songs")
    parser.add_argument("--out", required=True, help="output folder, same layout (links)")
    parser.add_argument("--fold", type=int, default=None,
                        help="the fold held out as the test split (none: train on every song)")
    parser.add_argument("--folds", type=int, default=2, help="number of cross-validation folds")
    parser.add_argument("--repeat", type=int, default=60, help="links per real song in the training split")
    parser.add_argument("--seed", type=int, default=0, help="seed of the fold shuffle")
    args = parser.parse_args(argv)
    try:
        report = build(args.base, args.real, args.out, args.fold, args.folds, args.repeat, args.seed)
    except (FileNotFoundError, ValueError) as err:
        raise SystemExit(f"error: {err}") from None
    print(f"{len(report['train'])} real songs x {args.repeat} in train, {len(report['test'])} held out as test, "
          f"{len(report['left_out'])} left out -> {args.out}")


if __name__ == "__main__":
    main()
