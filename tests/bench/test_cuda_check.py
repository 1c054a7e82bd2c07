"""The GPU scripts (bench.cuda_check, bench.cuda_step), which CI cannot run on a GPU, also run on the
CPU: they keep working, and every path is within cuda_check's tolerances there."""

from __future__ import annotations

import json

from bench import cuda_check, cuda_step


def test_cuda_check_comparisons_hold_on_cpu(capsys):
    assert cuda_check.main(["--device", "cpu", "--length", "140"]) == 0
    out = capsys.readouterr().out
    assert "25 of 25 comparisons within tolerance" in out
    assert "sine_spe/factorised cpu bf16 autocast" in out


def test_cuda_check_flags_a_difference_over_tolerance(monkeypatch, capsys):
    monkeypatch.setitem(cuda_check.TOLERANCE, "float32", 1e-9)   # float32 cannot meet this
    assert cuda_check.main(["--device", "cpu", "--length", "140"]) == 1
    assert "FAIL sine_spe/stored cpu float32" in capsys.readouterr().out


def test_cuda_step_times_every_variant_on_cpu(tmp_path):
    out = tmp_path / "steps.json"
    assert cuda_step.main(["--device", "cpu", "--layers", "1", "--d-model", "32", "--batch", "1", "--length",
                           "64", "--steps", "1", "--rounds", "1", "--json", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    assert set(results) == {f"{pe}/{p}" for pe in ("ape@stored", "sine_spe@stored", "sine_spe@factorised",
                                                   "conv_spe@stored") for p in ("fp32", "bf16")}
    assert results["ape@stored/fp32"]["ratio_to_ape"] == 1.0
