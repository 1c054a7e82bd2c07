"""Command-line plumbing shared by spe-generate and spe-evaluate.

- bad input ends with ONE line on stderr (`prog: error: reason`) and a non-zero exit status;
- output files are written under temporary names in their final folder and renamed only when every
  output of the command succeeded, so a failure never leaves half-written files behind;
- checkpoints are found the same way everywhere (run dir, checkpoint dir, or the shipped `pretrained/`).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any, Callable, NoReturn

import torch

from model import DEVICE_NAMES

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent
PRETRAINED = REPO_ROOT / "pretrained"  # the model shipped with the repository (when present)

# Exceptions that mean bad input or an unusable environment (not a bug): reported on one line.
USER_ERRORS = (ValueError, OSError, RuntimeError, KeyError, ImportError)


class OneLineParser(argparse.ArgumentParser):
    """argparse with usage errors on a single stderr line (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def run_app(prog: str, body: Callable[[], None]) -> int:
    """Run a command's body; expected errors become one stderr line and exit status 1."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        body()
    except USER_ERRORS as error:
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        sys.stderr.write(f"{prog}: error: {message}\n".replace("\n", " ").rstrip() + "\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted\n")
        return 130
    return 0


class AtomicOutputs:
    """Context manager: `temp(final)` names a temporary file beside `final`; all are renamed on
    success and all are deleted if the block raises.

        with AtomicOutputs() as outputs:
            midi.dump(outputs.temp("song.mid"))
    """

    def __init__(self) -> None:
        self.pending: dict[Path, Path] = {}  # temporary path -> final path

    def temp(self, final: str | Path) -> Path:
        final = Path(final)
        final.parent.mkdir(parents=True, exist_ok=True)
        temp = final.with_name(f".{final.stem}.partial-{os.getpid()}{final.suffix}")  # keeps the suffix
        self.pending[temp] = final
        return temp

    def discard(self, final: str | Path) -> None:
        """Give up an optional output: delete its temporary file, do not create it."""
        for temp, target in list(self.pending.items()):
            if target == Path(final):
                temp.unlink(missing_ok=True)
                del self.pending[temp]

    def __enter__(self) -> AtomicOutputs:
        return self

    def __exit__(self, kind: Any, error: Any, trace: Any) -> None:
        if error is None:
            for temp, final in self.pending.items():
                if not temp.exists():
                    raise RuntimeError(f"output {final} was not written")
            for temp, final in self.pending.items():
                os.replace(temp, final)
                logger.info("wrote %s", final)
        else:
            for temp in self.pending:
                temp.unlink(missing_ok=True)
        self.pending.clear()


def checkpoint_argument(parser: argparse.ArgumentParser, repeat: bool = False) -> None:
    """Add --checkpoint (a run dir, a checkpoint dir; default: the shipped pretrained/ model)."""
    parser.add_argument("--checkpoint", action="append" if repeat else "store", default=None,
                        help="run directory (its latest checkpoint) or checkpoint directory; "
                             f"default: {PRETRAINED.name}/ in the repository when present"
                             + ("; repeat to compare models" if repeat else ""))
    parser.add_argument("--device", default="auto", choices=DEVICE_NAMES,
                        help="where to run the model (auto: CUDA when available) (default: %(default)s)")


def load_model(path: str | Path | None, device: torch.device) -> Any:
    """apps.checkpoint.load_checkpoint with the pretrained default and one-line errors."""
    from apps.checkpoint import load_checkpoint

    if path is None:
        if not PRETRAINED.exists():
            raise ValueError(f"no --checkpoint given and no shipped model at {PRETRAINED}")
        path = PRETRAINED
    path = Path(path)
    if not path.exists():
        raise ValueError(f"checkpoint not found: {path}")
    try:
        ckpt = load_checkpoint(path, device=device)
    except USER_ERRORS as error:
        raise ValueError(f"cannot load checkpoint {path}: {error}") from None
    ckpt.model.eval()
    logger.info("loaded %s (step %s, pe=%s, %s tokens)", path, ckpt.step, ckpt.model.cfg.pe,
                ckpt.tokenizer.vocab_size)
    return ckpt


def seeded_generator(seed: int, device: torch.device) -> torch.Generator:
    """A torch.Generator on `device` seeded with `seed` (positional noise and sampling)."""
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator
