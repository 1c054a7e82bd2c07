"""Corpora (default corpus from music21, MIDI folders, Pop1K7, POP909, Groove2Groove) and training crops.

```python
corpus = build_default_corpus("corpus/default")     # once; cached in the folder
corpus = load_corpus("corpus/default")              # TokenCorpus: .pieces(split), .names(split), .summary
ds = CropDataset(corpus.pieces("train"), corpus.tokenizer, crop_len=256, transpose=6, seed=0)
```
"""

from data.corpus import (LONG_PIECE_TOKENS, SPLITS, PieceInfo, TokenCorpus, assign_splits, corpus_for, extends,
                         load_corpus)
from data.crops import IGNORE_INDEX, CropDataset, ValidationSet, pad_crop
from data.folders import build_groove_corpus, build_midi_folder_corpus
from data.kinds import CORPUS_KINDS, FORMAT_OF_KIND, check_kind_format
from data.music21_corpus import build_default_corpus
from data.pop1k7 import RestrictedUnpickler, UnsafePickleError, build_pop1k7_corpus
from data.pop909 import build_pop909_corpus
from data.streams import Segment, SongStreams

__all__ = [
    "CORPUS_KINDS",
    "FORMAT_OF_KIND",
    "IGNORE_INDEX",
    "LONG_PIECE_TOKENS",
    "SPLITS",
    "CropDataset",
    "PieceInfo",
    "RestrictedUnpickler",
    "Segment",
    "SongStreams",
    "TokenCorpus",
    "UnsafePickleError",
    "ValidationSet",
    "assign_splits",
    "build_default_corpus",
    "build_groove_corpus",
    "build_midi_folder_corpus",
    "build_pop1k7_corpus",
    "build_pop909_corpus",
    "check_kind_format",
    "corpus_for",
    "extends",
    "load_corpus",
    "pad_crop",
]
