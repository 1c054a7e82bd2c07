"""The corpus kinds a run can train on (``data.kind``) and the token format each is tokenised in.

The format follows from the kind: :func:`check_kind_format` refuses a mismatching ``data.format`` (a trio
corpus in REMI, a POP909 corpus in groove events) before any corpus is built or loaded.
"""

from __future__ import annotations

FORMAT_OF_KIND = {  # data.kind -> the token format (tokenization.registry) its corpus is written in
    "default": "remi",  # music21 scores (data.music21_corpus)
    "midi_folder": "remi",  # any folder of MIDI files (data.folders)
    "pop1k7": "remi",  # the Pop1K7 release (data.pop1k7)
    "pop909": "remi",  # POP909 (data.pop909)
    "groove": "groove",  # a Groove2Groove-layout folder (data.folders)
    "trio": "groove",  # the offline trio corpus (groove.trio, data.folders)
    "groove_mma": "groove",  # POP909 chord charts rendered with MMA (data.groove_mma)
}
CORPUS_KINDS = tuple(FORMAT_OF_KIND)
BUILDER_OF_KIND = {  # data.kind -> the "builder" its summary.json records (data.build checks it)
    "default": "music21", "midi_folder": "midi_folder", "pop1k7": "pop1k7", "pop909": "pop909",
    "groove": "groove", "trio": "groove", "groove_mma": "groove",
}
NEEDS_SOURCE = ("midi_folder", "pop1k7", "pop909", "groove", "groove_mma")  # kinds built from a raw folder
# (data.source; groove_mma: the POP909 annotations folder)


def check_kind_format(kind: str, token_format: str) -> None:
    """ValueError unless corpus ``kind`` is known and tokenised in ``token_format``."""
    if kind not in FORMAT_OF_KIND:
        raise ValueError(f"unknown corpus kind {kind!r} (known: {', '.join(CORPUS_KINDS)})")
    expected = FORMAT_OF_KIND[kind]
    if token_format != expected:
        raise ValueError(f"a {kind} corpus is tokenised in the {expected} format, but data.format is "
                         f"{token_format!r} (set data.format={expected})")
