"""The on-disk layout of a run's checkpoints, safe against a crash at any instant.

    run_dir/checkpoints/step_000500/    a complete checkpoint: its files, then manifest.json
        manifest.json                   {"files": {name: size in bytes}}, written last
    run_dir/checkpoints/latest          text file naming the newest checkpoint (informational)
    run_dir/checkpoints/.tmp_step_000500_PID    being written by process PID
    run_dir/checkpoints/.old_step_000500_PID    a step being re-saved, swapped out
    run_dir/checkpoints/.prune_step_000300_PID  being deleted

A checkpoint folder is complete when its manifest lists every file with its size and the files are
there with those sizes (meta.json, which a person may edit, need only be there); a folder written
before manifests existed, when every file its meta.json implies is there. Only complete folders named
step_* count: a folder is written under a dot name and renamed when its manifest is in, and pruned by
renaming it away before deleting it, so no instant leaves a partial folder under a step_* name. The dot
folders of dead processes are removed (or, when complete and their step has no folder, renamed into
place) by `clean_stale`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Callable

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
EDITABLE = ("meta.json",)  # files a person may edit by hand: checked for presence, not size
POINTER = "latest"
STEP_PREFIX = "step_"
# dot folders and pointer files a process leaves while it writes: (kind, step name, PID)
_WORK_NAME = re.compile(r"^\.(tmp|old|prune)_(step_\d+)_(\d+)$|^\.latest_(\d+)$")


def step_name(step: int) -> str:
    """Folder name of the checkpoint of `step`."""
    return f"{STEP_PREFIX}{step:06d}"


def step_of(folder: Path) -> int | None:
    """The step a step_* folder holds, None for another name."""
    digits = folder.name.removeprefix(STEP_PREFIX)
    return int(digits) if folder.name.startswith(STEP_PREFIX) and digits.isdigit() else None


# ----------------------------------------------------------------------------------- reading
def is_complete(folder: Path) -> bool:
    """Whether `folder` holds a whole checkpoint (see the module docstring)."""
    manifest = folder / MANIFEST
    if not manifest.is_file():
        return _legacy_complete(folder)
    try:
        files = json.loads(manifest.read_text())["files"]
        return "meta.json" in files and all(
            (folder / name).is_file() and (name in EDITABLE or (folder / name).stat().st_size == size)
            for name, size in files.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def _legacy_complete(folder: Path) -> bool:
    """A folder without a manifest (a shipped or exported model, or a run saved before manifests):
    complete when meta.json parses and the weights are there, and for a run's step_* folder every
    training-state file its meta.json names (exported models keep those names, not the files)."""
    try:
        meta = json.loads((folder / "meta.json").read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(meta, dict):
        return False
    needed = ["model.safetensors"]
    if step_of(folder) is not None:
        needed += ["optimizer.safetensors"] * ("optimizer" in meta) + ["rng.safetensors"] * ("rng" in meta)
    return all((folder / name).is_file() for name in needed)


def list_complete(run_dir: str | Path) -> list[Path]:
    """Complete checkpoint folders of a run, oldest first."""
    folder = Path(run_dir) / "checkpoints"
    found = [(step_of(p), p) for p in folder.glob(f"{STEP_PREFIX}*") if p.is_dir()]
    return [p for step, p in sorted((s, p) for s, p in found if s is not None) if is_complete(p)]


def newest_complete(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run (whatever `latest` says), None without one."""
    complete = list_complete(run_dir)
    return complete[-1] if complete else None


# ----------------------------------------------------------------------------------- writing
def write_checkpoint(run_dir: str | Path, step: int, write_files: Callable[[Path], None],
                     keep: int = 0) -> Path:
    """Write the checkpoint of `step`: `write_files(folder)` fills a temporary folder, the manifest
    goes in last, the folder takes its step_* name, `latest` names it, and all but the newest `keep`
    complete checkpoints are pruned (0: keep all). Returns the checkpoint folder."""
    folder = Path(run_dir) / "checkpoints"
    folder.mkdir(parents=True, exist_ok=True)
    name, pid = step_name(step), os.getpid()
    tmp = folder / f".tmp_{name}_{pid}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    write_files(tmp)
    files = {p.name: p.stat().st_size for p in sorted(tmp.iterdir()) if p.is_file()}
    _write_atomically(tmp / MANIFEST, json.dumps({"files": files}, indent=1))

    final = folder / name
    if final.exists():  # re-saving a step (e.g. right after a resume): swap, then drop the old one
        old = folder / f".old_{name}_{pid}"
        final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old)
    else:
        tmp.rename(final)
    _write_atomically(folder / POINTER, name + "\n")
    if keep > 0:
        stale = [p for p in list_complete(run_dir) if p != final]
        for old in stale[:max(len(stale) - (keep - 1), 0)]:
            prune(old)
    return final


def prune(checkpoint: Path) -> None:
    """Delete a checkpoint folder: renamed away first, so that a crash while deleting leaves no
    partial folder under its step_* name."""
    doomed = checkpoint.with_name(f".prune_{checkpoint.name}_{os.getpid()}")
    checkpoint.rename(doomed)
    shutil.rmtree(doomed)


def _write_atomically(path: Path, text: str) -> None:
    """Write a small text file under a temporary name, then rename it over `path`."""
    partial = path.with_name(f".{path.name}_{os.getpid()}")
    partial.write_text(text)
    os.replace(partial, path)


# ----------------------------------------------------------------------------------- cleaning
def clean_stale(run_dir: str | Path) -> list[str]:
    """Remove what dead processes left in run_dir/checkpoints (temporary, swapped-out and
    half-pruned folders, partial pointer files); a complete temporary or swapped-out folder whose
    step has no folder (a kill between the renames of a save) takes that step's name. Returns the
    names handled."""
    folder = Path(run_dir) / "checkpoints"
    if not folder.is_dir():
        return []
    handled = []
    for path in sorted(folder.iterdir()):
        match = _WORK_NAME.match(path.name)
        if match is None:
            continue
        kind, name, pid = match.group(1), match.group(2), int(match.group(3) or match.group(4))
        if _alive(pid):
            continue
        if kind in ("old", "tmp") and not (folder / name).exists() and is_complete(path):
            path.rename(folder / name)  # a kill between the two renames of a (re-)save
            logger.warning("checkpoints: restored %s, left complete by process %d", name, pid)
        elif path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
        handled.append(path.name)
    if handled:
        logger.info("checkpoints: removed what dead processes left: %s", ", ".join(handled))
    return handled


def _alive(pid: int) -> bool:
    """Whether process `pid` exists (this process counts as dead: a leftover under its own PID is
    from an earlier process that had the same number)."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


LOCK = ".lock"  # run_dir/.lock: held (an OS lock) by the one process training in run_dir


class RunFolderBusy(ValueError):
    """Another live process is training in this run folder."""


class RunLock:
    """An exclusive OS lock on a run folder (fcntl.flock on run_dir/.lock, holding the PID): a second
    training on the same folder is refused while the first runs; the lock dies with its process, so
    a killed run never blocks the next one.

        with RunLock(run_dir):
            ...train...
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / LOCK
        self.handle = None
        self.created = False

    def __enter__(self) -> RunLock:
        import fcntl

        self.created = not self.path.parent.exists()  # made here: removed again if the run fails at once
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            raise RunFolderBusy(f"{self.path.parent} is in use by another training (PID {holder}): wait for "
                                f"it to end, or choose another --out") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self.handle = handle
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        if self.handle is not None:
            self.handle.close()  # releases the lock
            self.handle = None
            folder = self.path.parent
            if kind is not None and self.created and [p.name for p in folder.iterdir()] == [LOCK]:
                self.path.unlink()  # a run that failed before writing anything leaves nothing
                folder.rmdir()
