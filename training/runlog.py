"""Rank 0's record of a run: metrics.csv, train.log, config.yaml and TensorBoard events."""

from __future__ import annotations

import csv
import logging
import time
from pathlib import Path
from typing import Any

from training.config import RunConfig, save_config

logger = logging.getLogger(__name__)

CSV_FIELDS = ("step", "epoch", "loss", "lr", "grad_norm", "tokens_per_s", "val_loss", "elapsed_s")


class Window:
    """Running sums between two log lines."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.losses: list[float] = []  # training losses of the steps since the last log line
        self.norms: list[float] = []  # their gradient norms
        self.tokens = 0  # target tokens processed since the last log line (all processes)
        self.start = time.perf_counter()  # when the window started

    def add(self, loss: float, grad_norm: float, tokens: int) -> None:
        self.losses.append(loss)
        self.norms.append(grad_norm)
        self.tokens += tokens

    def flush(self, step: int, epoch: int, lr: float) -> dict[str, Any]:
        seconds = time.perf_counter() - self.start
        row = {"step": step, "epoch": epoch, "loss": sum(self.losses) / len(self.losses), "lr": lr,
               "grad_norm": sum(self.norms) / len(self.norms), "tokens_per_s": self.tokens / seconds,
               "val_loss": ""}
        self.reset()
        return row

    @staticmethod
    def empty(step: int, epoch: int) -> dict[str, Any]:
        return {"step": step, "epoch": epoch, "loss": "", "lr": "", "grad_norm": "",
                "tokens_per_s": "", "val_loss": ""}


class RunLog:
    """Rank 0's outputs: config.yaml, metrics.csv, train.log and TensorBoard events (tb/)."""

    def __init__(self, out: Path, cfg: RunConfig, resume_step: int | None) -> None:
        out.mkdir(parents=True, exist_ok=True)
        save_config(cfg, out / "config.yaml")
        self.csv_path = out / "metrics.csv"
        rows = []
        if resume_step is not None and self.csv_path.is_file():  # drop rows past the checkpoint
            with self.csv_path.open(newline="") as f:
                rows = [r for r in csv.DictReader(f) if int(r["step"]) <= resume_step]
        self.csv_file = self.csv_path.open("w", newline="")
        self.csv = csv.DictWriter(self.csv_file, fieldnames=[*CSV_FIELDS])
        self.csv.writeheader()
        self.csv.writerows(rows)
        self.file_handler = logging.FileHandler(out / "train.log")
        self.file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger().addHandler(self.file_handler)
        self.tb = None
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(out / "tb"), purge_step=resume_step)
        except ImportError:
            logger.warning("tensorboard is not installed: no TensorBoard logs")

    def write(self, row: dict[str, Any], elapsed: float) -> None:
        self.csv.writerow({**row, "elapsed_s": round(elapsed, 3)})
        self.csv_file.flush()
        if self.tb is not None:
            for key in ("loss", "lr", "grad_norm", "tokens_per_s", "val_loss"):
                if row[key] != "":
                    self.tb.add_scalar(f"train/{key}" if key != "val_loss" else "valid/loss",
                                       row[key], row["step"])

    def close(self) -> None:
        self.csv_file.close()
        logging.getLogger().removeHandler(self.file_handler)
        self.file_handler.close()
        if self.tb is not None:
            self.tb.close()

