"""Outputs that appear all at once: written under temporary names, renamed when every one succeeded."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any, Iterable

logger = logging.getLogger(__name__)

_PARTIAL = re.compile(r"^\..+\.partial-(\d+)(\.[^.]*)?$")  # a temporary output: .STEM.partial-PID.SUFFIX


def clean_partials(folder: Path) -> list[str]:
    """Remove the temporary outputs that killed processes left in `folder`; returns their names."""
    removed = []
    for path in folder.iterdir() if folder.is_dir() else ():
        match = _PARTIAL.match(path.name)
        if match and path.is_file() and not _alive(int(match.group(1))):
            path.unlink(missing_ok=True)
            removed.append(path.name)
    if removed:
        logger.info("removed what killed runs left in %s: %s", folder, ", ".join(removed))
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def check_targets(outputs: Iterable[Path], inputs: Iterable[Path] = ()) -> list[Path]:
    """ValueError when an output path is a folder or one of the `inputs` (a user's file is never
    overwritten); returns the outputs that exist already (to be replaced)."""
    inputs = {Path(p).resolve() for p in inputs}
    existing = []
    for path in outputs:
        path = Path(path)
        if path.resolve() in inputs:
            raise ValueError(f"{path} is an input of this command: choose another --out")
        if path.is_dir():
            raise ValueError(f"{path} is a folder: the output cannot be written there (choose another --out)")
        if path.exists():
            existing.append(path)
    return existing


class AtomicOutputs:
    """Context manager: `temp(final)` names a temporary file beside `final`; all are renamed on
    success and all are deleted if the block raises.

        with AtomicOutputs() as outputs:
            midi.dump(outputs.temp("song.mid"))
    """

    def __init__(self) -> None:
        self.pending: dict[Path, Path] = {}  # temporary path -> final path
        self.cleaned: set[Path] = set()  # folders already rid of dead processes' temporary files

    def temp(self, final: str | Path) -> Path:
        final = Path(final)
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.parent not in self.cleaned:
            clean_partials(final.parent)
            self.cleaned.add(final.parent)
        if final.is_dir():
            raise ValueError(f"{final} is a folder: the output cannot be written there")
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
