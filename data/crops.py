"""Training and validation samples cut from tokenised pieces.

A training sample is a crop of ``crop_len + 1`` tokens that starts at a bar, randomly transposed, padded
at the end: ``inputs = crop[:-1]``, ``targets = crop[1:]`` with -100 (ignored by the loss) where the
target is padding. With ``fim_rate`` a drawn fraction of the crops is rearranged for fill in the middle
(``remi.infill.fim_crop``), and the two markers placed at random positions (``Infill_Hole``,
``Infill_Fill``) are never targets. Every draw comes from a ``numpy.random.Generator`` seeded with
``(seed, epoch, index)``, so a sample depends only on those three numbers: training resumes exactly,
and any process (DataLoader worker, DistributedSampler rank) builds the same sample for an index.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch.utils.data import Dataset, TensorDataset

from model import IGNORE_INDEX
from remi.infill import fim_crop, marker_ids
from tokenization import BaseTokenizer


class CropDataset(Dataset):
    """Random bar-aligned crops of tokenised pieces, with random transposition.

    Item ``i`` is a crop of piece ``i % len(pieces)``: ``samples_per_piece`` crops per piece and epoch.
    The crop starts at a bar start (``tokenizer.bar_starts``) drawn uniformly among those that leave a
    full crop, plus the first bar start after them (so the end of the piece is seen too); a piece
    shorter than the crop starts at its first bar. With ``end_crops`` the crop that reaches the end (that
    first bar start after them) is drawn with probability ``crop_len / len(piece)``, the share of the
    piece one crop covers, and otherwise a full crop: a piece's last positions and its end token are then
    trained about as often as its middle ones, instead of once in as many draws as the piece has bar
    starts with a full crop after them (a 6,000-token song at crops of 2,048: once in about 55). With
    ``start_crops`` the crop that starts at the piece's first bar is drawn first, with the same
    probability: a song's opening (its first bars, after the meter that only a song's start has) is then
    trained as often as its end, not once per bar start. With ``fim_end_crops`` False, a crop that
    reaches the piece's end is never rearranged for fill in the middle, so that the end token is learnt
    left to right as often as ``end_crops`` draws it (``fim_crop`` keeps the crop's length by trimming
    the end of its suffix, so a rearranged end crop loses the end token). With
    ``max_bars`` the crop also stops before the
    ``max_bars``-th bar after its start (the paper's "at most 48 bars"). The transposition is drawn
    uniformly from ``-transpose .. +transpose`` (the paper: 6 for REMI, 5 for Groove2Groove), re-drawn
    (without replacement) while the crop would leave the tokenizer's pitch range. Padding uses
    ``tokenizer.pad_id`` (PAD_None for REMI, the end token for Groove).
    """

    def __init__(
        self,
        pieces: Sequence[np.ndarray],
        tokenizer: BaseTokenizer,
        crop_len: int = 256,
        transpose: int = 6,
        seed: int = 0,
        samples_per_piece: int = 1,
        max_bars: int | None = None,
        fim_rate: float = 0.0,
        end_crops: bool = False,
        fim_suffix_tokens: int | None = None,
        start_crops: bool = False,
        fim_end_crops: bool = True,
    ):
        if not len(pieces):
            raise ValueError("CropDataset needs at least one piece")
        if crop_len < 1:
            raise ValueError(f"crop_len must be positive, got {crop_len}")
        self.pieces = list(pieces)  # token arrays (int), any length
        self.tokenizer = tokenizer  # gives bar_starts, transpose and the pad id
        self.crop_len = crop_len  # N: inputs and targets are N tokens (a crop holds N + 1)
        self.transpose = transpose  # largest transposition in semitones (0: none)
        self.seed = seed  # base seed of every draw
        self.samples_per_piece = samples_per_piece  # crops of each piece per epoch
        self.max_bars = max_bars  # crops end before this many bars (None: no limit)
        self.fim_rate = fim_rate  # fraction of crops rearranged for fill in the middle (REMI with markers)
        self.fim_suffix_tokens = fim_suffix_tokens  # a rearranged crop's suffix is at most this long (None: any)
        self.end_crops = end_crops  # draw the crop reaching the piece's end with probability crop_len / length
        self.start_crops = start_crops  # draw the crop at the piece's first bar with probability crop_len / length
        self.fim_end_crops = fim_end_crops  # a crop reaching the piece's end may be rearranged (else: left to right)
        self.unscored = marker_ids(tokenizer)[:2] if fim_rate > 0 else ()  # markers that are never targets
        self.epoch = 0  # set by set_epoch; part of every draw's seed
        self.bar_starts = [self._starts(p) for p in self.pieces]  # per piece: sorted bar start indices

    def _starts(self, piece: np.ndarray) -> np.ndarray:
        starts = np.asarray(self.tokenizer.bar_starts(np.asarray(piece).tolist()), dtype=np.int64)
        return starts if starts.size else np.zeros(1, dtype=np.int64)

    def set_epoch(self, epoch: int) -> None:
        """Re-draw every crop and transposition for this epoch (call it like DistributedSampler.set_epoch)."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.pieces) * self.samples_per_piece

    def rng(self, index: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, self.epoch, index])

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} samples")
        rng = self.rng(index)
        piece_index = index % len(self.pieces)
        piece = self.pieces[piece_index]
        start = self.draw_start(piece_index, rng)
        crop = self.cut(piece, piece_index, start)
        crop = self.draw_transposition(crop, rng)
        at_end = start + len(crop) >= len(piece)  # holds the piece's last token (its end token)
        if self.fim_rate > 0 and (self.fim_end_crops or not at_end) and rng.random() < self.fim_rate:
            crop = fim_crop(self.tokenizer, crop, rng, self.fim_suffix_tokens)
        inputs, targets = pad_crop(crop, self.crop_len, self.tokenizer.pad_id)
        for marker in self.unscored:
            targets[targets == marker] = IGNORE_INDEX
        return inputs, targets

    def draw_start(self, piece_index: int, rng: np.random.Generator) -> int:
        """A bar start of the piece: one leaving a full crop, or the first one after them."""
        starts = self.bar_starts[piece_index]
        length = len(self.pieces[piece_index])
        if self.start_crops and rng.random() < min(1.0, self.crop_len / length):
            return int(starts[0])
        full = int(np.searchsorted(starts, length - (self.crop_len + 1), side="right"))  # starts with a full crop
        count = min(full + 1, len(starts))  # ... and the next one, whose crop reaches the end
        if self.end_crops and full < count:
            if rng.random() < min(1.0, self.crop_len / length):
                return int(starts[full])
            return int(starts[rng.integers(max(full, 1))])
        return int(starts[rng.integers(count)])

    def cut(self, piece: np.ndarray, piece_index: int, start: int) -> np.ndarray:
        """Tokens ``start .. start + crop_len`` (inclusive), stopped at ``max_bars`` bars if set."""
        end = start + self.crop_len + 1
        if self.max_bars is not None:
            starts = self.bar_starts[piece_index]
            later = starts[starts > start]
            if len(later) >= self.max_bars:
                end = min(end, int(later[self.max_bars - 1]))
        return np.asarray(piece[start:end], dtype=np.int64)

    def draw_transposition(self, crop: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The crop transposed by a random shift that keeps it inside the pitch range (0 always does)."""
        return draw_transposition(self.tokenizer, crop, rng, self.transpose)


def draw_transposition(tokenizer: BaseTokenizer, tokens: np.ndarray, rng: np.random.Generator,
                       transpose: int) -> np.ndarray:
    """Tokens transposed by a shift drawn from -transpose .. +transpose, re-drawn (without
    replacement) while it would leave the tokenizer's pitch range (0 always fits)."""
    tokens = np.asarray(tokens, dtype=np.int64)
    for semitones in rng.permutation(np.arange(-transpose, transpose + 1)):
        if semitones == 0:
            return tokens
        try:
            return np.asarray(tokenizer.transpose(tokens.tolist(), int(semitones)), dtype=np.int64)
        except ValueError:
            continue
    return tokens


def pad_crop(crop: np.ndarray, crop_len: int, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(inputs, targets)`` of shape ``(crop_len,)`` from a crop of at most ``crop_len + 1`` tokens."""
    length = len(crop)
    if length > crop_len + 1:
        raise ValueError(f"crop of {length} tokens is longer than crop_len + 1 = {crop_len + 1}")
    padded = np.full(crop_len + 1, pad_id, dtype=np.int64)
    padded[:length] = crop
    inputs = torch.from_numpy(padded[:-1].copy())  # (N,)
    targets = torch.from_numpy(padded[1:].copy())  # (N,)
    targets[max(length - 1, 0) :] = IGNORE_INDEX
    return inputs, targets


class ValidationSet:
    """Fixed held-out data: full-length sequences for per-position NLL and fixed crops for the loss.

    * ``sequences``: each piece of at least ``min_len`` tokens, from its start, cut to ``max_len``
      (for the NLL per position, up to ``max_len``);
    * ``crops``: a ``TensorDataset`` of ``(inputs, targets)`` ``(M, crop_len)``, ``crops_per_piece``
      bar-aligned crops of every piece, drawn once with ``seed``, untransposed, padded like
      :class:`CropDataset`.
    """

    def __init__(
        self,
        pieces: Sequence[np.ndarray],
        tokenizer: BaseTokenizer,
        crop_len: int = 256,
        max_len: int = 1024,
        min_len: int | None = None,
        crops_per_piece: int = 1,
        seed: int = 0,
    ):
        self.max_len = max_len  # longest full sequence
        self.min_len = max_len if min_len is None else min_len  # shortest piece kept in ``sequences``
        self.sequences: list[torch.Tensor] = [
            torch.as_tensor(np.asarray(p[:max_len], dtype=np.int64)) for p in pieces if len(p) >= self.min_len
        ]  # each (L,) with min_len <= L <= max_len
        inputs = targets = torch.zeros(0, crop_len, dtype=torch.long)
        if len(pieces):
            cropper = CropDataset(pieces, tokenizer, crop_len, 0, seed, samples_per_piece=crops_per_piece)
            samples = [cropper[i] for i in range(len(cropper))]
            inputs = torch.stack([s[0] for s in samples])  # (M, crop_len)
            targets = torch.stack([s[1] for s in samples])  # (M, crop_len)
        self.crops = TensorDataset(inputs, targets)

    def __repr__(self) -> str:
        return f"ValidationSet({len(self.sequences)} sequences up to {self.max_len} tokens, {len(self.crops)} crops)"
