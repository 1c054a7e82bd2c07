"""The paper's 24-layer pop model, trained and evaluated in one short run on one GPU.

    python -m bench.paper_size --train-minutes 5.5 --generate-minutes 2 --out eval/pop909_paper

configs/pop909_paper.yaml (24 layers, d_model 512, 2,048-token crops of whole songs, gated sineSPE with
the decayed state) is trained with a wall-time budget (train.max_minutes), then, each step on its own so
that one failure leaves the others' results:

1. teacher-forced NLL on the test songs, to 4x the crop (8,192 tokens) and to 2x (4,096), beside
   `--compare` (default: the shipped pop909_whole), as `evaluate.py nll` writes it;
2. unconditional pieces decoded as one batch up to `--tokens` new tokens, their token files rewritten
   after every `--chunk` tokens so that a deadline (`--generate-minutes`) keeps what was decoded;
   measure them anywhere with `evaluate.py quality --generated OUT/pop909_paper`;
3. the run's config.yaml, metrics.csv and train.log copied to OUT.

The weights stay in `--run` (about 300 MiB with the optimizer state). `--corpus-archive` names a
tar archive of the built corpus folder, unpacked when the corpus is not there (a machine without
../shared/data). Without a GPU it runs on the CPU, slowly (`--set` sizes it down, as the test does).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import subprocess
import sys
import tarfile
import time
import traceback
from pathlib import Path
from typing import Callable, Sequence

from generation.request import GenerationRequest
from model import resolve_device
from training.checkpoint import load_model
from training.config import load_config

logger = logging.getLogger(__name__)

CONFIG = "pop909_paper"
LABEL = "pop909_paper"  # the name of the trained model in the tables and of its pieces' folder


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="eval/pop909_paper", help="results folder (default: %(default)s)")
    parser.add_argument("--run", default="runs/pop909_paper", help="run directory (default: %(default)s)")
    parser.add_argument("--config", default=CONFIG, help="training config (default: %(default)s)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="config override, as train.py's (repeatable)")
    parser.add_argument("--train-minutes", type=float, default=5.5, help="training wall time (default: %(default)s)")
    parser.add_argument("--corpus-archive", default=None, help="tar of the corpus folder, unpacked if missing")
    parser.add_argument("--compare", nargs="*", default=["pop909_whole"],
                        help="models evaluated beside it, none without a value (default: %(default)s)")
    parser.add_argument("--nll-lengths", type=int, nargs="+", default=[8192, 4096],
                        help="--max-len of each NLL evaluation (default: %(default)s)")
    parser.add_argument("--samples", type=int, default=16, help="unconditional pieces (default: %(default)s)")
    parser.add_argument("--tokens", type=int, default=12000, help="new tokens per piece (default: %(default)s)")
    parser.add_argument("--chunk", type=int, default=1024, help="tokens between two writes (default: %(default)s)")
    parser.add_argument("--generate-minutes", type=float, default=2.0,
                        help="decoding deadline (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=11, help="sampling seed (default: %(default)s)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    out, run = Path(args.out), Path(args.run)
    out.mkdir(parents=True, exist_ok=True)
    cfg = load_config(args.config, args.overrides)
    if args.corpus_archive and not (Path(cfg.data.root) / "summary.json").is_file():
        with tarfile.open(args.corpus_archive) as archive:
            archive.extractall(Path(cfg.data.root).parent, filter="data")
    failures = []
    status = phase("train", failures, lambda: command(
        "train", ["--config", args.config, "--out", str(run), "--set", f"train.max_minutes={args.train_minutes}",
         *(item for override in args.overrides for item in ("--set", override))]))
    for name in ("config.yaml", "metrics.csv", "train.log"):
        if (run / name).is_file():
            shutil.copy(run / name, out / name)
    if status not in (0, None):
        return 1
    models = [item for model in [str(run), *args.compare] for item in ("--checkpoint", model)]
    labels = [item for label in [LABEL, *args.compare] for item in ("--label", label)]
    for length in args.nll_lengths:
        phase(f"nll {length}", failures, lambda: command(
            "evaluate", ["nll", *models, *labels, "--split", "test", "--max-len", str(length), "--full-length",
             "--out", str(out / f"nll_{length}"), "--no-progress"]))
    phase("generate", failures, lambda: generate_pieces(run, out / LABEL, args))
    (out / "failures.json").write_text(json.dumps(failures, indent=1) + "\n")
    return 1 if failures else 0


def command(name: str, argv: list[str]) -> int:
    """Run `python -m apps.NAME ARGV` as the user would, in its own process; its exit status."""
    return subprocess.run([sys.executable, "-m", f"apps.{name}", *argv], check=False).returncode


def phase(name: str, failures: list[dict[str, str]], work: Callable[[], object]) -> object:
    """Run one step; an exception or a non-zero status is recorded (with its traceback), not raised."""
    started = time.perf_counter()
    try:
        status = work()
    except Exception:  # noqa: BLE001 - every step's failure is kept and reported, the next steps still run
        failures.append({"phase": name, "traceback": traceback.format_exc()})
        logger.error("%s failed:\n%s", name, failures[-1]["traceback"])
        return None
    if status not in (0, None):
        failures.append({"phase": name, "traceback": f"exit status {status}"})
    logger.info("%s: %.0f s, status %s", name, time.perf_counter() - started, status)
    return status


def generate_pieces(run: Path, folder: Path, args: argparse.Namespace) -> None:
    """Unconditional pieces as one batch, their token files rewritten after every chunk."""
    ckpt = load_model(run, resolve_device("auto"))
    tokenizer = ckpt.tokenizer
    request = GenerationRequest(tokens=args.tokens, num_samples=args.samples, seed=args.seed)  # unprompted pieces
    plan = request.plan(ckpt, request.check())
    sampling = plan.sampling
    decoder = plan.decoder(ckpt.model, ckpt.model.head.weight.device)
    deadline = time.perf_counter() + 60.0 * args.generate_minutes
    folder.mkdir(parents=True, exist_ok=True)
    done = 0
    while done < args.tokens and not all(decoder.at_eos) and time.perf_counter() < deadline:
        step = min(args.chunk, args.tokens - done)
        decoder.run(step)
        done += step
        results = decoder.results()
        for index, result in enumerate(results):
            path = folder / f"{LABEL}_{index + 1:02d}.txt"
            path.write_text("\n".join(tokenizer.tokens_to_strings(result.tokens)) + "\n")
        summary = {"new_tokens": done, "seconds": decoder.seconds, "samples": args.samples,
                   "ended_at_eos": sum(decoder.at_eos), "sampling": vars(sampling), "seed": args.seed,
                   "lengths": [len(r.generated) for r in results]}
        (folder.parent / "generation.json").write_text(json.dumps(summary, indent=1) + "\n")
        logger.info("generated %d tokens per piece in %.0f s (%d of %d ended)", done, decoder.seconds,
                    sum(decoder.at_eos), args.samples)


if __name__ == "__main__":
    raise SystemExit(main())
