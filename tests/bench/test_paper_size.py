"""bench.paper_size end to end on the CPU, sized down: training, NLL, pieces written chunk by chunk."""

from __future__ import annotations

import json
import shutil

import torch

from bench import paper_size
from data import build_midi_folder_corpus
from remi import REMITokenizer

TINY = ["model.n_layer=1", "model.n_head=2", "model.d_model=32", "model.d_ff=64", "model.num_realizations=8",
        "model.feature_dims=16", "model.decay_horizon=64", "data.kind=midi_folder", "data.crop_len=48",
        "train.batch_size=2", "train.max_steps=3", "train.eval_batches=1", "train.num_workers=0",
        "train.device=cpu"]


def test_train_evaluate_and_generate_in_one_run(midi_files, tmp_path):
    torch.set_num_threads(1)
    folder = tmp_path / "midi"
    folder.mkdir()
    for path in midi_files.values():
        for copy in range(3):
            shutil.copy(path, folder / f"{path.stem}_{copy}.mid")
    corpus = build_midi_folder_corpus(folder, tmp_path / "corpus", REMITokenizer(), progress=False)
    shortest = min(len(p) for p in corpus.pieces("test"))
    out, run = tmp_path / "out", tmp_path / "run"
    overrides = [item for value in [*TINY, f"data.root={tmp_path / 'corpus'}"] for item in ("--set", value)]
    assert paper_size.main(["--out", str(out), "--run", str(run), *overrides, "--train-minutes", "30",
                            "--compare", "--nll-lengths", str(shortest - 1), "--samples", "2",
                            "--tokens", "40", "--chunk", "16", "--generate-minutes", "5"]) == 0
    assert json.loads((out / "failures.json").read_text()) == []
    assert (out / "metrics.csv").is_file() and (out / "config.yaml").is_file()
    assert (out / f"nll_{shortest - 1}" / "nll_summary.json").is_file()
    summary = json.loads((out / "generation.json").read_text())
    assert summary["new_tokens"] == 40 or summary["ended_at_eos"] == 2
    tokenizer = REMITokenizer()
    pieces = sorted((out / paper_size.LABEL).glob("*.txt"))
    assert [p.name for p in pieces] == [f"{paper_size.LABEL}_01.txt", f"{paper_size.LABEL}_02.txt"]
    for path in pieces:
        ids = tokenizer.strings_to_ids(path.read_text().split())
        assert ids[0] == tokenizer.start_id and 1 < len(ids) <= 41
