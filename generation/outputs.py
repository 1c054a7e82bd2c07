"""Outputs that appear all at once: written under temporary names, renamed when every one succeeded."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


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
