"""Corpus dispatch: build the corpus a run's data section names, and check a built one against it.

    corpus = prepare_corpus(cfg.data)            # built on first use, then loaded and checked
    build_corpus("pop909", root, source="../shared/data/pop909", time_signatures=True)
    corpus = load_checked_corpus("pop909", root, token_format="remi", time_signatures=True)
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Optional, Protocol

from data.corpus import TokenCorpus, load_corpus
from data.folders import build_groove_corpus, build_midi_folder_corpus
from data.groove_mma import build_mma_token_corpus
from data.kinds import BUILDER_OF_KIND, CORPUS_KINDS, FORMAT_OF_KIND, NEEDS_SOURCE
from data.music21_corpus import build_default_corpus
from data.pop1k7 import build_pop1k7_corpus
from data.pop909 import build_pop909_corpus
from tokenization import BaseTokenizer, format_class, format_of

logger = logging.getLogger(__name__)


class DataSection(Protocol):
    """What corpus dispatch reads of a run's data section (training.config.DataConfig)."""

    kind: str  # corpus kind (data.kinds)
    root: str  # folder of the tokenised corpus
    source: Optional[str]  # folder of raw input, for the kinds in NEEDS_SOURCE
    format: str  # token format (tokenization.registry)
    time_signatures: bool  # tokenizer setting of the REMI format
    max_pieces: Optional[int]  # default: chorales used; trio: pieces generated; groove_mma: songs charted
    downbeats: Optional[str]  # pop909: folder of POP909's beat annotations that align the bars


# data.kind -> its builder, called as (source, root, tokenizer or None for groove, max_pieces, downbeats)
Builder = Callable[[Optional[str], Path, Optional[BaseTokenizer], Optional[int], Optional[str]], object]
BUILDERS: dict[str, Builder] = {
    "default": lambda source, root, tok, limit, beats: build_default_corpus(root, tok, max_chorales=limit),
    "midi_folder": lambda source, root, tok, limit, beats: build_midi_folder_corpus(source, root, tok),
    "pop1k7": lambda source, root, tok, limit, beats: build_pop1k7_corpus(source, root, tok),
    "pop909": lambda source, root, tok, limit, beats: build_pop909_corpus(source, root, tok, downbeats=beats),
    "groove": lambda source, root, tok, limit, beats: build_groove_corpus(source, root),
    "trio": lambda source, root, tok, limit, beats: build_groove_corpus(None, root, **({"trio_pieces": limit}
                                                                                      if limit else {})),
    "groove_mma": lambda source, root, tok, limit, beats: build_mma_token_corpus(source, root, songs=limit),
}


def prepare_corpus(data: DataSection, is_main: bool = True,
                   barrier: Callable[[], None] | None = None) -> TokenCorpus:
    """The corpus of a data section, built first (by the main process) when it is not there yet, or
    built again when its source folder changed since (its files, their sizes and times, or another
    folder; the builder says why); `barrier` makes the other processes of a distributed run wait."""
    rebuild = data.kind in NEEDS_SOURCE and data.source is not None and Path(data.source).is_dir()
    if is_main and (rebuild or not corpus_built(data.root)):
        build_corpus(data.kind, data.root, data.source, time_signatures=data.time_signatures,
                     max_pieces=data.max_pieces, downbeats=data.downbeats)
    if barrier is not None:
        barrier()
    return load_checked_corpus(data.kind, data.root, data.format, data.time_signatures)


def corpus_built(root: str | Path) -> bool:
    """Whether `root` holds a finished corpus (its summary.json is written last)."""
    return (Path(root) / "summary.json").is_file()


def build_corpus(kind: str, root: str | Path, source: str | None = None, *, time_signatures: bool = True,
                 max_pieces: int | None = None, downbeats: str | None = None) -> None:
    """Tokenise the raw input of corpus `kind` into `root` (`source`: the raw folder, where needed)."""
    root = Path(root)
    if kind not in BUILDERS:
        raise ValueError(f"unknown corpus kind {kind!r} (known: {', '.join(CORPUS_KINDS)})")
    if kind in NEEDS_SOURCE and not source:
        raise ValueError(f"corpus {root} is not built yet: set data.source to the raw {kind} folder "
                         f"(--set data.source=PATH)")
    logger.info("building the %s corpus in %s", kind, root)
    token_format = FORMAT_OF_KIND[kind]  # the groove builders make their own tokenizer (no settings)
    tokenizer = format_class(token_format)(time_signatures=time_signatures) if token_format == "remi" else None
    BUILDERS[kind](source, root, tokenizer, max_pieces, downbeats)


def load_checked_corpus(kind: str, root: str | Path, token_format: str, time_signatures: bool) -> TokenCorpus:
    """The corpus in `root`, after checking that it is the one the data section describes."""
    corpus = load_corpus(root)
    built_by = corpus.summary.get("builder")
    if built_by != BUILDER_OF_KIND[kind]:
        raise ValueError(f"corpus {root} was built by the {built_by} builder, but data.kind is {kind} "
                         f"(set data.root to another folder)")
    if format_of(corpus.tokenizer) != token_format:
        raise ValueError(f"corpus {root} uses {type(corpus.tokenizer).__name__}, but data.format is "
                         f"{token_format}")
    saved = corpus.tokenizer.config().get("time_signatures", time_signatures)  # a REMI setting
    if saved != time_signatures:
        raise ValueError(f"corpus {root} was built with time_signatures={saved}, but "
                         f"data.time_signatures is {time_signatures} (use another data.root)")
    return corpus
