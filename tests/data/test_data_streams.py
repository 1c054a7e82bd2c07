"""SongStreams: whole songs in consecutive segments, resumable (training with state passing)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from data import SongStreams
from model import IGNORE_INDEX
from remi import REMITokenizer


def songs(tokenizer: REMITokenizer, lengths: list[int]) -> list[np.ndarray]:
    """Songs of whole bars: Bar Beat_0 Note... repeated, ended by the end token."""
    vocab = tokenizer.vocab
    bar = [tokenizer.bar_id, vocab["Beat_0"]]
    out = []
    for length in lengths:
        ids = (bar * length)[:length - 1] + [tokenizer.eos_id]
        out.append(np.asarray(ids, dtype=np.int64))
    return out


@pytest.fixture
def tokenizer() -> REMITokenizer:
    return REMITokenizer()


def test_every_song_is_read_whole_in_order(tokenizer):
    pieces = songs(tokenizer, [25, 10, 31, 7, 18])
    streams = SongStreams(pieces, tokenizer, segment_len=8, streams=2, transpose=0, seed=3)
    read: dict[int, list[list[int]]] = {0: [], 1: []}
    for _ in range(30):
        for stream, segment in enumerate(streams.next()):
            if segment.start == 0:
                read[stream].append([])
            kept = segment.targets != IGNORE_INDEX
            if segment.start == 0:
                read[stream][-1].append(int(segment.inputs[0]))
            read[stream][-1] += segment.targets[kept].tolist()
            assert len(read[stream][-1]) <= segment.song_length
    whole = {tuple(p.tolist()) for p in pieces}
    finished = [tuple(s) for stream in read.values() for s in stream[:-1]]
    assert finished and all(s in whole for s in finished)
    order = streams.order(0)
    assert {len(s) for s in finished} >= {len(pieces[i]) for i in order[0::2][:2]}


def test_resume_continues_the_same_segments(tokenizer):
    pieces = songs(tokenizer, [25, 10, 31, 7, 18])
    a = SongStreams(pieces, tokenizer, segment_len=6, streams=2, transpose=3, seed=1)
    for _ in range(7):
        a.next()
    places = a.state_dict()
    b = SongStreams(pieces, tokenizer, segment_len=6, streams=2, transpose=3, seed=1)
    b.load_state_dict(places)
    for _ in range(12):
        for x, y in zip(a.next(), b.next()):
            assert torch.equal(x.inputs, y.inputs) and torch.equal(x.targets, y.targets) and x.start == y.start


def test_prefix_is_the_song_before_the_next_segment(tokenizer):
    pieces = songs(tokenizer, [30])
    streams = SongStreams(pieces, tokenizer, segment_len=8, streams=1, transpose=0)
    assert streams.prefix(0) is None
    first = streams.next()[0]
    assert streams.prefix(0).tolist() == first.inputs.tolist()


def test_bad_places_and_too_few_songs(tokenizer):
    pieces = songs(tokenizer, [10, 12])
    with pytest.raises(ValueError, match="one song per stream"):
        SongStreams(pieces, tokenizer, 4, streams=3)
    with pytest.raises(ValueError, match="stream places"):
        SongStreams(pieces, tokenizer, 4, streams=2).load_state_dict([[0, 0, 0]])
