"""spe-train killed with SIGKILL at random instants (while starting, stepping, saving and pruning):
each `--resume` continues from the newest complete checkpoint, losing at most one checkpoint
interval, and the run reaches its final step with no error."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from training.checkpoint import list_checkpoints

REPO = Path(__file__).resolve().parents[2]
KILLS = 20
CKPT_EVERY = 2  # steps between checkpoints (the interval a kill may cost)


def start(config: Path, out: Path, log: Path, *extra: str) -> subprocess.Popen:
    handle = log.open("w")
    return subprocess.Popen([sys.executable, "-m", "apps.train", "--config", str(config), "--out", str(out),
                             "--resume", *extra], cwd=REPO, stdout=handle, stderr=subprocess.STDOUT,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})


def saved_steps(text: str) -> list[int]:
    return [int(step) for step in re.findall(r"saved checkpoint \S*step_(\d+)", text)]


def newest(out: Path) -> int:
    complete = list_checkpoints(out)
    return int(complete[-1].name.removeprefix("step_")) if complete else 0


def test_sigkill_at_random_instants_then_resume(tmp_path, corpus_root):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump({
        "model": {"n_layer": 1, "n_head": 2, "d_model": 32, "d_ff": 64, "pe": "sine_spe", "num_realizations": 8,
                  "feature_dims": 16, "attention": "torch", "max_len": 64},
        "data": {"kind": "midi_folder", "root": str(corpus_root), "crop_len": 32},
        "train": {"batch_size": 2, "max_steps": 100000, "warmup_steps": 2, "eval_every": 0, "log_every": 1,
                  "ckpt_every": CKPT_EVERY, "keep_checkpoints": 2}}))
    out = tmp_path / "run"
    draw = random.Random(2026)
    for kill in range(KILLS):
        log = tmp_path / f"kill_{kill}.log"
        before = newest(out)
        process = start(config, out, log)
        if kill % 5 == 4:  # while starting: importing, cleaning, listing, loading
            time.sleep(draw.uniform(0.0, 3.0))
        else:  # while training: stepping, saving, pruning (the tiny model checkpoints every 2 steps)
            deadline = time.monotonic() + 120
            while "saved checkpoint" not in log.read_text() and process.poll() is None:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
            time.sleep(draw.uniform(0.0, 1.5))
        assert process.poll() is None, log.read_text()  # still running: the kill lands mid-way
        process.send_signal(signal.SIGKILL)
        process.wait()
        text = log.read_text()
        assert "Traceback" not in text and "error" not in text.lower(), text
        resumed = re.search(r"resumed from \S+ at step (\d+)", text)
        assert resumed is None or int(resumed.group(1)) >= before, text
        last_saved = max(saved_steps(text), default=before)
        assert newest(out) >= last_saved >= before, (kill, newest(out), last_saved, text)

    final = newest(out) + 3
    log = tmp_path / "final.log"
    process = start(config, out, log, "--max-steps", str(final))
    assert process.wait(timeout=300) == 0, log.read_text()
    text = log.read_text()
    assert "Traceback" not in text and "error" not in text.lower(), text
    assert newest(out) == final
    leftovers = [p.name for p in (out / "checkpoints").iterdir() if p.name.startswith(".")]
    assert leftovers == [], leftovers
    assert len(list_checkpoints(out)) == 2
