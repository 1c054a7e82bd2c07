"""spe-export: turn a trained run into a shipped model folder (bf16 weights, meta.json, model card).

    spe-export --checkpoint runs/pop909_sine --out pretrained --title "Pop piano (POP909), gated sineSPE" \
               --section eval/nll_summary.md --section eval/quality/quality.md

The folder loads like any checkpoint (`--checkpoint FOLDER`; `pretrained/` is the default of every
command) and can be fine-tuned (`train.py --init-from FOLDER`), not resumed.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Sequence

from apps.cli import OneLineParser, run_app
from training.export import export_model

logger = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="spe-export", description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True, help="run directory or checkpoint directory")
    parser.add_argument("--out", required=True, help="folder to write (created if needed)")
    parser.add_argument("--title", required=True, help="the model card's title")
    parser.add_argument("--section", action="append", default=[],
                        help="markdown file appended to the model card (repeatable)")
    parser.add_argument("--notes", default="", help="a paragraph added to the model card")
    parser.add_argument("--fp32", action="store_true", help="keep every weight in float32")
    parser.add_argument("--average-with", default=None, metavar="CHECKPOINT",
                        help="ship the mean of this run's weights and CHECKPOINT's (the same model, e.g. the one "
                             "the run was fine-tuned from)")
    parser.add_argument("--average-weight", type=float, default=0.5,
                        help="with --average-with: the weight of this run's weights (default: %(default)s)")
    parser.add_argument("--set", dest="generate", action="append", default=[], metavar="generate.KEY=VALUE",
                        help="change a sampling default of the shipped model, e.g. --set "
                             "generate.temperature=1.0, or data.root / data.source (repeatable)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Console script spe-export; returns the exit status."""
    args = build_parser().parse_args(argv)
    return run_app("spe-export", lambda: run(args))


def run(args: argparse.Namespace) -> None:
    for section in args.section:
        if not Path(section).is_file():
            raise ValueError(f"--section {section}: no such file")
    card = export_model(args.checkpoint, args.out, title=args.title, bf16=not args.fp32,
                        sections=args.section, notes=args.notes, generate=args.generate,
                        average_with=args.average_with, average_weight=args.average_weight)
    logger.info("exported %s to %s (model card %s)", args.checkpoint, args.out, card)


if __name__ == "__main__":
    raise SystemExit(main())
