"""Corpus dispatch: build the corpus a run's data section names, and check a built one against it.

    if not corpus_built(root):
        build_corpus("pop909", root, source="../shared/data/pop909", time_signatures=True)
    corpus = load_checked_corpus("pop909", root, token_format="remi", time_signatures=True)
"""

from __future__ import annotations

import logging
from pathlib import Path

from data.corpus import TokenCorpus, load_corpus
from data.folders import build_groove_corpus, build_midi_folder_corpus
from data.kinds import BUILDER_OF_KIND, FORMAT_OF_KIND, NEEDS_SOURCE, check_kind_format
from data.music21_corpus import build_default_corpus
from data.pop1k7 import build_pop1k7_corpus
from data.pop909 import build_pop909_corpus
from tokenization import format_class, format_of

logger = logging.getLogger(__name__)


def corpus_built(root: str | Path) -> bool:
    """Whether `root` holds a finished corpus (its summary.json is written last)."""
    return (Path(root) / "summary.json").is_file()


def build_corpus(kind: str, root: str | Path, source: str | None = None, *, time_signatures: bool = True,
                 max_pieces: int | None = None) -> None:
    """Tokenise the raw input of corpus `kind` into `root` (`source`: the raw folder, where needed)."""
    root = Path(root)
    check_kind_format(kind, FORMAT_OF_KIND.get(kind, ""))
    if kind in NEEDS_SOURCE and not source:
        raise ValueError(f"corpus {root} is not built yet: set data.source to the raw {kind} folder "
                         f"(--set data.source=PATH)")
    logger.info("building the %s corpus in %s", kind, root)
    if kind == "trio":
        build_groove_corpus(None, root, **({"trio_pieces": max_pieces} if max_pieces else {}))
        return
    if kind == "groove":
        build_groove_corpus(source, root)
        return
    tokenizer = format_class("remi")(time_signatures=time_signatures)
    if kind == "default":
        build_default_corpus(root, tokenizer, max_chorales=max_pieces)
    elif kind == "midi_folder":
        build_midi_folder_corpus(source, root, tokenizer)
    elif kind == "pop909":
        build_pop909_corpus(source, root, tokenizer)
    else:
        build_pop1k7_corpus(source, root, tokenizer)


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
    saved = corpus.tokenizer.config().get("time_signatures")
    if token_format == "remi" and saved != time_signatures:
        raise ValueError(f"corpus {root} was built with time_signatures={saved}, but "
                         f"data.time_signatures is {time_signatures} (use another data.root)")
    return corpus
