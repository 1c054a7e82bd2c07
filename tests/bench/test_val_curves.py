"""bench.val_curves reads runs' metrics.csv and tables their validation losses step by step."""

from __future__ import annotations

import csv

import pytest

from bench import val_curves

HEADER = ["step", "epoch", "loss", "lr", "grad_norm", "tokens_per_s", "val_loss", "elapsed_s"]


def write_run(folder, losses):
    folder.mkdir()
    with open(folder / "metrics.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(HEADER)
        for step in range(250, 250 * len(losses) + 1, 250):
            writer.writerow([step - 10, 0, 3.0, 1e-3, 1.0, 100, "", 1.0])   # a training row: no val_loss
            writer.writerow([step, 0, 3.0, 1e-3, 1.0, 100, losses[step // 250 - 1], 1.0])


def test_table_and_csv_of_runs_of_different_lengths(tmp_path):
    write_run(tmp_path / "a", [2.5, 2.4, 2.3, 2.2])
    write_run(tmp_path / "b", [2.6, 2.45])
    assert val_curves.main([str(tmp_path / "a"), str(tmp_path / "b"), "--labels", "A", "B",
                            "--out", str(tmp_path / "out" / "curves")]) == 0
    table = (tmp_path / "out" / "curves.md").read_text().splitlines()
    assert table[0] == "| step | A | B |"
    assert table[2:] == ["| 500 | 2.400 | 2.450 |", "| 1,000 | 2.200 | - |"]
    with open(tmp_path / "out" / "curves.csv") as f:
        rows = list(csv.reader(f))
    assert rows[1] == ["250", "2.5", "2.6"] and rows[-1] == ["1000", "2.2", ""]
    assert (tmp_path / "out" / "curves.png").stat().st_size > 0


def test_a_folder_without_metrics_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="metrics.csv"):
        val_curves.read_validation(tmp_path)
