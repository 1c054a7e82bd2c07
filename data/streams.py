"""Whole songs cut into consecutive segments, for training with state passing.

Crops (data.crops) start from an empty recurrent state at a random bar: every crop teaches the model
how a song opens, and nothing it learns needs a past longer than the crop. With state passing, each of
S streams reads whole songs from their first token, one segment of ``segment_len`` tokens per training
step, and the trainer carries the model's recurrent state from one segment to the next (truncated
backpropagation through the state). A song's openings are then learned from real openings, and its
returning sections from a state that has read the first ones.

Stream ``s`` reads, in each of its epochs, the songs ``perm[s::S]`` of a permutation drawn from
``(seed, epoch)``, each transposed by a shift drawn from ``(seed, epoch, song)``. A stream's place is
three integers (epoch, song ordinal, segment), so a run resumes exactly where it stopped; the
recurrent state itself is rebuilt by reading the song's earlier segments again (``prefix``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from data.crops import draw_transposition, pad_crop
from tokenization import BaseTokenizer


@dataclass
class Segment:
    """One training segment of one stream."""

    inputs: torch.Tensor  # (N,) token ids, padded at the end of a song
    targets: torch.Tensor  # (N,) next tokens, IGNORE_INDEX past the song's end
    start: int  # position of inputs[0] in its song (0: a song starts, with an empty state)
    song_length: int  # tokens in the whole song


class SongStreams:
    """S streams of consecutive song segments; see the module docstring."""

    def __init__(self, pieces: Sequence[np.ndarray], tokenizer: BaseTokenizer, segment_len: int,
                 streams: int, transpose: int = 6, seed: int = 0) -> None:
        if len(pieces) < streams:
            raise ValueError(f"state passing needs at least one song per stream: {len(pieces)} songs "
                             f"for {streams} streams (train.batch_size)")
        if segment_len < 1:
            raise ValueError(f"segment_len must be positive, got {segment_len}")
        self.pieces = [np.asarray(p, dtype=np.int64) for p in pieces]  # the songs' token arrays
        self.tokenizer = tokenizer  # transposes and pads
        self.segment_len = segment_len  # N: tokens per segment (inputs and targets each)
        self.streams = streams  # S: songs read side by side
        self.transpose = transpose  # largest transposition in semitones (0: none)
        self.seed = seed  # base seed of every draw
        self.places = [[0, 0, 0] for _ in range(streams)]  # per stream: epoch, song ordinal, segment
        self._songs: dict[int, tuple[tuple[int, int], np.ndarray]] = {}  # stream -> (key, transposed song)

    # ----------------------------------------------------------------- places
    def state_dict(self) -> list[list[int]]:
        """Where every stream stands (for checkpoints)."""
        return [list(place) for place in self.places]

    def load_state_dict(self, places: list[list[int]]) -> None:
        """Continue from `state_dict`'s places."""
        if not isinstance(places, list) or len(places) != self.streams or not all(
                isinstance(p, list) and len(p) == 3 and all(isinstance(v, int) and v >= 0 for v in p)
                for p in places):
            raise ValueError(f"expected {self.streams} stream places [epoch, song, segment] of "
                             f"non-negative ints, got {places!r}")
        self.places = [list(place) for place in places]
        self._songs.clear()

    # ----------------------------------------------------------------- reading
    def next(self) -> list[Segment]:
        """The next segment of every stream (then each stream moves on by one segment)."""
        segments = []
        for stream in range(self.streams):
            song = self.song(stream)
            segment = self.places[stream][2]
            start = segment * self.segment_len
            inputs, targets = pad_crop(song[start:start + self.segment_len + 1], self.segment_len,
                                       self.tokenizer.pad_id)
            segments.append(Segment(inputs, targets, start, len(song)))
            self._advance(stream, len(song))
        return segments

    def prefix(self, stream: int) -> torch.Tensor | None:
        """The tokens of the stream's current song before its next segment (None at a song's start):
        what the model reads to rebuild the stream's state after a resume or a feature redraw."""
        epoch, ordinal, segment = self.places[stream]
        if segment == 0:
            return None
        song = self.song(stream)
        return torch.from_numpy(song[:segment * self.segment_len].copy())  # (segment * N,)

    def song(self, stream: int) -> np.ndarray:
        """The stream's current song, transposed (cached while the stream reads it)."""
        epoch, ordinal, _ = self.places[stream]
        order = self.order(epoch)[stream::self.streams]
        index = int(order[ordinal])
        cached = self._songs.get(stream)
        if cached is None or cached[0] != (epoch, index):
            rng = np.random.default_rng([self.seed, epoch, index, 1])
            song = draw_transposition(self.tokenizer, self.pieces[index], rng, self.transpose)
            self._songs[stream] = ((epoch, index), song)
        return self._songs[stream][1]

    def order(self, epoch: int) -> np.ndarray:
        """The songs of an epoch, in the order the streams share them."""
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.pieces))

    def _advance(self, stream: int, song_length: int) -> None:
        place = self.places[stream]
        place[2] += 1
        if place[2] * self.segment_len >= song_length - 1:  # the song's last target was read
            place[1], place[2] = place[1] + 1, 0
            if place[1] >= len(self.order(place[0])[stream::self.streams]):
                place[0], place[1] = place[0] + 1, 0
