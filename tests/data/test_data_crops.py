"""Training crops and validation sets on real REMI pieces (music21 scores from tests/conftest.py)."""

from __future__ import annotations

import miditoolkit
import numpy as np
import pytest
import torch
from torch.utils.data import DistributedSampler

from data import IGNORE_INDEX, CropDataset, ValidationSet
from remi import REMITokenizer

CROP = 64


@pytest.fixture(scope="module")
def tok():
    return REMITokenizer()


@pytest.fixture(scope="module")
def pieces(tok, midi_files):
    return [np.asarray(tok.encode(path), dtype=np.int32) for path in midi_files.values()]


def _pitches(tok, ids) -> list[int]:
    strings = tok.tokens_to_strings(ids)
    return [int(s.rsplit("_", 1)[1]) for s in strings if s.startswith("Note_Pitch_")]


def _high_piece(tok) -> np.ndarray:
    """Eight bars of notes at pitches 100..105: only shifts of -6..+2 keep them inside 22..107."""
    midi = miditoolkit.MidiFile(ticks_per_beat=480)
    piano = miditoolkit.Instrument(program=0)
    piano.notes = [miditoolkit.Note(70, 100 + i % 6, i * 480, i * 480 + 240) for i in range(32)]
    midi.instruments.append(piano)
    return np.asarray(tok.encode(midi), dtype=np.int32)


def _semitones(tok, crop, piece, start) -> int:
    """The shift that maps the piece's tokens at ``start`` to ``crop`` (AssertionError if none does)."""
    original = piece[start : start + len(crop)].tolist()
    before, after = _pitches(tok, original), _pitches(tok, crop)
    assert len(original) == len(crop) and before and len(before) == len(after), "not the same slice"
    shift = after[0] - before[0]
    try:
        assert tok.transpose(original, shift) == crop, "not a transposed slice"
    except ValueError as err:
        raise AssertionError(str(err)) from err
    return shift


def _crop_tokens(inputs, targets) -> list[int]:
    """The unpadded crop (inputs plus the last real target)."""
    valid = int((targets != IGNORE_INDEX).sum())
    return inputs[:valid].tolist() + [int(targets[valid - 1])]


def test_crops_start_at_bars_and_are_transposed_slices(tok, pieces):
    ds = CropDataset(pieces, tok, crop_len=CROP, transpose=6, seed=3, samples_per_piece=8)
    shifts = set()
    for index in range(len(ds)):
        inputs, targets = ds[index]
        assert inputs.shape == targets.shape == (CROP,) and inputs.dtype == torch.long
        crop = _crop_tokens(inputs, targets)
        piece_index = index % len(pieces)
        assert crop[0] == tok.vocab["Bar_None"]
        starts = ds.bar_starts[piece_index]
        matches = []
        for start in starts:
            try:
                matches.append(_semitones(tok, crop, pieces[piece_index], int(start)))
            except AssertionError:
                continue
        assert matches, f"item {index} is not a bar-aligned slice"
        shifts.add(matches[0])
    assert len(shifts) > 3 and all(-6 <= s <= 6 for s in shifts)


def test_transposition_stays_in_pitch_range(tok):
    piece = _high_piece(tok)
    ds = CropDataset([piece], tok, crop_len=len(piece) + 10, transpose=6, seed=0, samples_per_piece=60)
    shifts = set()
    for index in range(len(ds)):
        crop = _crop_tokens(*ds[index])
        shifts.add(_semitones(tok, crop, piece, 0))
        assert max(_pitches(tok, crop)) <= 107
    assert shifts <= set(range(-6, 3)) and len(shifts) > 4


def test_padding_and_targets(tok, pieces):
    piece = pieces[0]
    length = len(piece)
    ds = CropDataset([piece], tok, crop_len=length + 20, transpose=0, seed=0)
    inputs, targets = ds[0]
    assert torch.equal(inputs[:length], torch.as_tensor(piece, dtype=torch.long))
    assert (inputs[length:] == tok.pad_id).all()
    assert torch.equal(targets[: length - 1], torch.as_tensor(piece[1:], dtype=torch.long))
    assert (targets[length - 1 :] == IGNORE_INDEX).all()
    assert targets[length - 2] == tok.eos_id


def test_short_crops_only_at_piece_end(tok, pieces):
    ds = CropDataset(pieces, tok, crop_len=CROP, transpose=6, seed=1, samples_per_piece=6)
    full = 0
    for index in range(len(ds)):
        crop = _crop_tokens(*ds[index])
        if len(crop) < CROP + 1:  # a short crop runs to the end of its piece
            assert crop[-1] == tok.eos_id
        else:
            full += 1
    assert full > len(ds) // 2


def test_deterministic_per_seed_and_epoch(tok, pieces):
    def items(ds):
        return [tuple(t.tolist() for t in ds[i]) for i in range(len(ds))]

    ds = CropDataset(pieces, tok, crop_len=CROP, seed=7, samples_per_piece=6)
    epoch0 = items(ds)
    assert items(CropDataset(pieces, tok, crop_len=CROP, seed=7, samples_per_piece=6)) == epoch0
    assert items(CropDataset(pieces, tok, crop_len=CROP, seed=8, samples_per_piece=6)) != epoch0
    ds.set_epoch(1)
    epoch1 = items(ds)
    assert epoch1 != epoch0
    resumed = CropDataset(pieces, tok, crop_len=CROP, seed=7, samples_per_piece=6)
    resumed.set_epoch(1)
    assert items(resumed) == epoch1
    ds.set_epoch(0)
    assert items(ds) == epoch0


def test_distributed_sampler_ranks_see_the_same_samples(tok, pieces):
    ds = CropDataset(pieces, tok, crop_len=CROP, seed=2, samples_per_piece=5)
    ds.set_epoch(4)
    seen = {}
    for rank in range(2):
        sampler = DistributedSampler(ds, num_replicas=2, rank=rank, shuffle=True, seed=2)
        sampler.set_epoch(4)
        for index in sampler:
            seen[index] = ds[index]
    assert set(seen) == set(range(len(ds)))
    fresh = CropDataset(pieces, tok, crop_len=CROP, seed=2, samples_per_piece=5)
    fresh.set_epoch(4)
    assert all(torch.equal(seen[i][0], fresh[i][0]) and torch.equal(seen[i][1], fresh[i][1]) for i in seen)


def test_max_bars(tok, pieces):
    ds = CropDataset(pieces, tok, crop_len=400, transpose=0, seed=0, samples_per_piece=4, max_bars=2)
    bar = tok.vocab["Bar_None"]
    for index in range(len(ds)):
        crop = _crop_tokens(*ds[index])
        assert crop[0] == bar and crop.count(bar) <= 2


def test_validation_set(tok, pieces):
    lengths = sorted(len(p) for p in pieces)
    max_len = lengths[-1] - 5
    val = ValidationSet(pieces, tok, crop_len=CROP, max_len=max_len, min_len=lengths[1], crops_per_piece=2, seed=0)
    assert len(val.sequences) == len(pieces) - 1  # the shortest piece is left out
    kept = [p for p in pieces if len(p) >= lengths[1]]
    for seq, piece in zip(val.sequences, kept):
        assert len(seq) == min(len(piece), max_len)
        assert torch.equal(seq, torch.as_tensor(piece[: len(seq)], dtype=torch.long))
    inputs, targets = val.crops.tensors
    assert inputs.shape == targets.shape == (2 * len(pieces), CROP)
    again = ValidationSet(pieces, tok, crop_len=CROP, max_len=max_len, crops_per_piece=2, seed=0)
    assert torch.equal(again.crops.tensors[0], inputs) and torch.equal(again.crops.tensors[1], targets)
    for row, target in zip(inputs, targets):  # untransposed slices of the pieces
        crop = _crop_tokens(row, target)
        assert any(_is_slice(crop, p) for p in pieces)


def _is_slice(crop, piece) -> bool:
    piece = piece.tolist()
    return any(piece[s : s + len(crop)] == crop for s in range(len(piece) - len(crop) + 1))


def test_end_crops_train_the_ending_as_often_as_the_middle(tok, pieces):
    piece = max(pieces, key=len)
    crop = 2 * CROP
    draws = 600

    def share_reaching_the_end(end_crops: bool) -> float:
        ds = CropDataset([piece], tok, crop_len=crop, transpose=0, seed=5, samples_per_piece=draws,
                         end_crops=end_crops)
        ends = 0
        for index in range(len(ds)):
            inputs, targets = ds[index]
            valid = int((targets != IGNORE_INDEX).sum())
            assert inputs[0] == tok.vocab["Bar_None"]  # still bar-aligned
            ends += valid < crop  # only the crop that reaches the end is padded
        return ends / draws

    starts = CropDataset([piece], tok, crop_len=crop).bar_starts[0]
    full = int(np.searchsorted(starts, len(piece) - (crop + 1), side="right"))
    assert full >= 8  # a piece with many crops' worth of bars
    plain, balanced = share_reaching_the_end(False), share_reaching_the_end(True)
    assert plain == pytest.approx(1 / (full + 1), abs=0.03)
    assert balanced == pytest.approx(crop / len(piece), rel=0.2)


def test_start_crops_train_the_opening_as_often_as_the_ending(tok, pieces):
    piece = max(pieces, key=len)
    crop = 2 * CROP
    draws = 600

    def shares(start_crops: bool) -> tuple[float, float]:
        ds = CropDataset([piece], tok, crop_len=crop, transpose=0, seed=5, samples_per_piece=draws,
                         end_crops=True, start_crops=start_crops)
        opening = piece[:crop + 1].tolist()
        openings = ends = 0
        for index in range(len(ds)):
            inputs, targets = ds[index]
            tokens = _crop_tokens(inputs, targets)
            openings += tokens == opening[:len(tokens)]
            ends += int((targets != IGNORE_INDEX).sum()) < crop
        return openings / draws, ends / draws

    starts = CropDataset([piece], tok, crop_len=crop).bar_starts[0]
    full = int(np.searchsorted(starts, len(piece) - (crop + 1), side="right"))
    share = crop / len(piece)
    plain_openings, _ = shares(False)
    openings, ends = shares(True)
    assert plain_openings < 2 / full  # otherwise one bar start among many
    drawn_as_any = (1 - share) * (1 - share) / full  # not drawn as the opening nor the end, then uniform
    assert openings == pytest.approx(share + drawn_as_any, rel=0.2)
    assert ends == pytest.approx((1 - share) * share, rel=0.3)  # the end crop is drawn from the rest


def test_start_crops_cannot_be_combined_with_state_passing():
    from training.config import DataConfig

    with pytest.raises(ValueError, match="data.start_crops"):
        DataConfig(kind="pop909", state_passing=True, start_crops=True).validate()
