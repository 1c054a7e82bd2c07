"""The README's commands run: each ```bash line of it, in order, in a fresh working folder, in a tiny
version (the data it names replaced by small stand-ins, fewer steps and tokens, a small model), through
the same main() the console scripts call. `make test` is this suite, `make demo` runs in .ci/run on a
fresh clone, and the studio is served by tests/apps/test_studio_e2e.py."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from apps import evaluate, generate, train
from cli_helpers import write_release
from test_readme import COMMANDS, REPO
from training.checkpoint import shipped_default

OTHERS = {"make", ".venv/bin/spe-studio"}  # run elsewhere (module docstring)
TINY_MODEL = ("--set model.n_layer=1 --set model.n_head=2 --set model.d_model=16 --set model.d_ff=32 "
              "--set model.feature_dims=8 --set model.num_realizations=4 --set model.attention=torch "
              "--set model.max_len=256 --set data.crop_len=32 --set train.batch_size=2 --set train.eval_every=2 "
              "--set train.eval_batches=1 --set train.ckpt_every=2 --set train.num_workers=0 --max-steps 2")


def tiny(words: list[str], folders: dict[str, Path]) -> list[str]:
    """A README command's arguments in their tiny version."""
    text = shlex.join(words[2:])
    replace = {"/data/Pop1K7/remi": str(folders["pop1k7"]), "/my/midi": str(folders["midi"]),
               "--max-steps 500": "--max-steps 2", "--tokens 3072": "--tokens 16", "--max-len 4096": "--max-len 64",
               "'i4 A8 B8 A8 B8 x4 B8 o4'": "'i1 A1 B1 A1'"}
    for long, short in replace.items():
        text = text.replace(long, short)
    args = shlex.split(text)
    if words[1] == "train.py" and "--config" in args:  # the paper's size: a small model, 2 steps
        args += shlex.split(TINY_MODEL)
    return args


def test_every_readme_command_runs_in_a_tiny_version(tmp_path, midi_folder, monkeypatch):
    if shipped_default() is None:
        pytest.skip("no shipped pretrained/ model")
    folders = {"pop1k7": write_release(tmp_path / "Pop1K7"), "midi": midi_folder}
    work = tmp_path / "work"
    work.mkdir()
    (work / "pretrained").symlink_to(REPO / "pretrained")  # the README runs in the repository
    monkeypatch.chdir(work)
    mains = {"train.py": train.main, "generate.py": generate.main, "evaluate.py": evaluate.main}
    ran = []
    for words in COMMANDS:
        if words[0] in OTHERS:
            continue
        args = tiny(words, folders)
        if words[1] == "train.py" and "runs/pop_sine" in args:  # the Evaluate section compares it with APE
            ape = [a.replace("pop_sine_gated", "pop_ape").replace("runs/pop_sine", "runs/pop_ape") for a in args]
            assert train.main(ape) == 0, ape
        assert mains[words[1]](args) == 0, " ".join(words)
        ran.append(words[1])
    assert sorted(set(ran)) == ["evaluate.py", "generate.py", "train.py"]
    assert (work / "song.mid").is_file() and (work / "song.ogg").is_file()
    assert list((work / "eval").glob("*"))
