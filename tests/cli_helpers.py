"""Helpers shared by the command-line tests."""

from __future__ import annotations

import pickle
import socket
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

import miditoolkit
import numpy as np
import torch

from data.pop1k7 import RELEASE_REMI
from training.checkpoint import save_checkpoint
from training.config import RunConfig
from model import MusicPerformer


def exit_status(main, args) -> int:
    """Exit status of a command's main(), counting argparse's own usage errors (SystemExit)."""
    try:
        return main(args)
    except SystemExit as exit:
        return exit.code


def save_tiny(run_dir: Path, tokenizer, pe: str = "sine_spe", max_len: int = 256, tokens: int = 40,
              data: dict | None = None, always: str | None = None, generate: dict | None = None) -> Path:
    """A random-weight 2-layer model saved as a checkpoint of run_dir; returns run_dir.

    always: a token the model then predicts with certainty, whatever the input; generate: more
    sampling defaults of the model (its `generate` config section).
    """
    model = {"n_layer": 2, "n_head": 2, "d_model": 16, "d_ff": 32, "dropout": 0.0, "pe": pe,
             "num_realizations": 8, "num_sines": 2, "kernel_size": 8, "feature_dims": 16,
             "attention": "torch", "max_len": max_len}
    config = RunConfig.from_dict({"model": model, "data": data or {"crop_len": 32},
                                  "generate": {"tokens": tokens, **(generate or {})}})
    torch.manual_seed(0)
    network = MusicPerformer(config.model_config(tokenizer.vocab_size))
    if always is not None:
        with torch.no_grad():
            network.ln_f.weight.zero_()
            network.ln_f.bias.fill_(1.0)
            network.head.weight.zero_()
            network.head.weight[tokenizer.vocab[always]] = 10.0
    save_checkpoint(run_dir, model=network, tokenizer=tokenizer, config=config, step=3)
    return run_dir


def song_corpus(folder: Path, tokenizer, midi: Path, splits: Sequence[str] = ("test",)) -> Path:
    """A token corpus in `folder` whose `splits` each hold `midi` as one song ending with the end token."""
    from data.corpus import Piece, write_corpus
    from generation.pieces import piece_ids

    song = np.asarray(piece_ids(tokenizer, midi) + [tokenizer.eos_id], dtype=np.int32)
    write_corpus(folder, tokenizer, {split: [Piece(f"song_{split}", song)] for split in splits}, [], "test", {})
    return folder


def free_port() -> int:
    """A TCP port free on the loopback address now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def served_studio(workdir: Path, runs: Sequence[Path] = ()) -> Iterator[str]:
    """The studio served on a loopback port while the block runs; yields its base URL."""
    from apps.studio import build_app, launch

    port = free_port()
    app = build_app(workdir, list(runs), "cpu")
    launch(app, workdir, "127.0.0.1", port, block=False)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        app.close()


def band_midi(path: Path, bars: int = 4) -> Path:
    """A 3-track band MIDI (bass, drums, piano), one note per beat each, 4/4."""
    midi = miditoolkit.MidiFile(ticks_per_beat=480)
    tracks = [("Bass", 33, False, [40, 43, 45, 43]), ("Drums", 0, True, [36, 42, 38, 42]),
              ("Piano", 0, False, [64, 67, 69, 67])]
    for name, program, is_drum, pitches in tracks:
        inst = miditoolkit.Instrument(program=program, is_drum=is_drum, name=name)
        inst.notes = [miditoolkit.Note(90, pitches[beat % 4], beat * 480, beat * 480 + 400)
                      for beat in range(4 * bars)]
        midi.instruments.append(inst)
    midi.dump(str(path))
    return path


# ------------------------------------------------------------------------------ a Pop1K7 release
I = np.int64  # the release pickles Tempo and Note_Velocity values as numpy.int64

# A song as the release stores it (events/src_00X/N.pkl): a plain list of {name, value} dicts.
SONG = [
    ("Bar", None), ("Beat", 0), ("Chord", "N_N"), ("Tempo", I(110)),
    ("Beat", 4), ("Chord", "A_m7"), ("Note_Pitch", 57), ("Note_Velocity", I(60)), ("Note_Duration", 960),
    ("Note_Pitch", 64), ("Note_Velocity", I(61)), ("Note_Duration", 0),  # duration 0 occurs in the release
    ("Bar", None), ("Beat", 0), ("Tempo", I(121)), ("Chord", "C_M"),
    ("Note_Pitch", 60), ("Note_Velocity", I(40)), ("Note_Duration", 1920),
    ("Bar", None), ("EOS", None),
]
SONGS = {f"src_00{1 + i % 4}/{i + 1}": SONG for i in range(8)}  # song numbers unique across src folders


def release_token(name, value):
    """An event as the vocabulary's token string."""
    return f"{name}_{value}"


def write_release(root, songs=SONGS):
    """The release layout: midi_analyzed/ and representations/.../ailab17k_from-scratch_remi/."""
    remi = root / RELEASE_REMI
    events = sorted({release_token(n, v) for song in songs.values() for n, v in song})
    event2idx = {e: i for i, e in enumerate(events)}
    idx2event = {i: e for e, i in event2idx.items()}
    remi.mkdir(parents=True)
    with open(remi / "dictionary.pkl", "wb") as f:
        pickle.dump((event2idx, idx2event), f)
    for name, song in songs.items():
        for sub in ("events", "words"):
            (remi / sub / name).parent.mkdir(parents=True, exist_ok=True)
        with open(remi / "events" / f"{name}.pkl", "wb") as f:
            pickle.dump([{"name": n, "value": v} for n, v in song], f)
        np.save(remi / "words" / f"{name}.npy", np.array([event2idx[release_token(n, v)] for n, v in song]))
        (root / "midi_analyzed" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "midi_analyzed" / f"{name}.mid").write_bytes(b"MThd")  # present in the release, not read
    return remi
