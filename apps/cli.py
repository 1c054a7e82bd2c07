"""Command-line plumbing shared by every command (spe-train, spe-generate, spe-evaluate, spe-studio,
spe-export).

Exit statuses, the same for every command:
- 0: done;
- 1: the command could not finish: an I/O failure (disk full, unreadable file) or a failure the
  command declares (training diverged), reported on ONE stderr line (`prog: error: reason`);
- 2: bad input: arguments, config, checkpoint, corpus or MIDI files (argparse's own status too),
  reported on one line;
- 130: interrupted (Ctrl-C).
Any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
from typing import Callable, NoReturn

import torch

from generation.sampling import check_seed
from model import DEVICE_NAMES
from training.checkpoint import PRETRAINED

EXIT_FAILURE = 1  # the command could not finish (I/O failure, or one of its declared failures)
EXIT_BAD_INPUT = 2  # bad arguments, config or input files
EXIT_INTERRUPTED = 130  # Ctrl-C


class OneLineParser(argparse.ArgumentParser):
    """argparse with usage errors on a single stderr line (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def run_app(prog: str, body: Callable[[], int | None],
            failures: tuple[type[BaseException], ...] = ()) -> int:
    """Run a command's body; returns its exit status (None: 0) or that of its error (see the
    module docstring).

    ValueError (bad input, TokenizationError included) -> 2; OSError and the command's declared
    `failures` -> 1; each on one stderr line. Everything else propagates with its traceback.
    """
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        status = body()
    except ValueError as error:
        _error_line(prog, error)
        return EXIT_BAD_INPUT
    except (OSError, *failures) as error:
        _error_line(prog, error)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted\n")
        return EXIT_INTERRUPTED
    return status or 0


def _error_line(prog: str, error: BaseException) -> None:
    sys.stderr.write(f"{prog}: error: {error}".replace("\n", " ").rstrip() + "\n")


def checkpoint_argument(parser: argparse.ArgumentParser, repeat: bool = False) -> None:
    """Add --checkpoint (a run dir, a checkpoint dir; default: the shipped pretrained/ model)."""
    parser.add_argument("--checkpoint", action="append" if repeat else "store", default=None,
                        help="run directory (its latest checkpoint) or checkpoint directory; "
                             f"default: {PRETRAINED.name}/ in the repository when present"
                             + ("; repeat to compare models" if repeat else ""))
    parser.add_argument("--device", default="auto", choices=DEVICE_NAMES,
                        help="where to run the model (auto: CUDA when available) (default: %(default)s)")


def seed_value(text: str) -> int:
    """argparse type of --seed: an integer torch.Generator accepts (argparse names the option)."""
    try:
        return check_seed(int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer in 0 .. 2**64 - 1, got {text!r}") from None


def finite_float(text: str) -> float:
    """argparse type of a real option (--temperature, --top-p): a finite number."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def recall_argument(parser: argparse.ArgumentParser) -> None:
    """--recall / --no-recall: the copy cache of generation.recall in sampling (None: the model's)."""
    parser.add_argument("--recall", action=argparse.BooleanOptionalAction, default=None,
                        help="mix a copy cache of the piece so far into sampling, so that passages come back "
                             "(generation.recall; default: on when the model has fitted recall weights)")


def threads_argument(parser: argparse.ArgumentParser) -> None:
    """Add --threads: CPU threads of recurrent decoding (default 1)."""
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads for decoding (default: %(default)s). A recurrent step is a "
                             "series of tiny operations: more threads help little on an idle machine and "
                             "slow it down badly when another process shares the cores")


def set_threads(threads: int) -> None:
    """Apply --threads (ValueError below 1)."""
    if threads < 1:
        raise ValueError(f"--threads must be >= 1, got {threads}")
    torch.set_num_threads(threads)

