"""The default corpus: public-domain scores bundled with music21, converted to MIDI and tokenised offline.

Three groups of pieces (each split on its own, see ``data.corpus.split_pieces``):

* ``chorale``: the 410 Bach chorales of music21 (its 433 files less 20 analyses and 3 duplicates;
  ~0.5-2 k REMI tokens each);
* ``long``: string-quartet movements, sonatas, rags and character pieces (:data:`LONG_PIECES`,
  ~5-30 k tokens), so that the held-out splits contain pieces long enough for the extrapolation
  evaluation; valid and test get at least two each when there are five or more;
* ``folk``: tunes of O'Neill's "Music of Ireland" (multi-tune abc files, parsed as opuses: one piece
  per tune; short, monophonic, in 6/8, 9/8, 2/4, 3/4 ...).

Scores are converted to MIDI by ``data.score_midi`` (as written: repeats are not expanded, ties are
merged, a pickup bar is shifted so that bar lines fall where the time signature puts them) and cached in
``root/midi/`` with a manifest, so the music21 parsing happens once; tokens are cached in the corpus
folder and reused while the settings are unchanged. Files are processed by a pool of ``workers``
processes, longest first.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from data.corpus import Piece, Skipped, TokenCorpus, cached_corpus, split_pieces, write_corpus
from data.encode import encode_files
from data.score_midi import convert_corpus_file
from tokenization import BaseTokenizer, tokenizer_from_dict

logger = logging.getLogger(__name__)

BUILDER = "music21"

# (music21 corpus path, composer), in order of preference: ``max_long_pieces`` takes the first ones.
LONG_PIECES: tuple[tuple[str, str], ...] = (
    ("mozart/k80/movement1.mxl", "Mozart"),
    ("haydn/opus74no1/movement1.mxl", "Haydn"),
    ("joplin/maple_leaf_rag.mxl", "Joplin"),
    ("beethoven/opus18no1/movement1.mxl", "Beethoven"),
    ("chopin/mazurka06-2.krn", "Chopin"),
    ("mozart/k155/movement1.mxl", "Mozart"),
    ("haydn/opus74no1/movement4.mxl", "Haydn"),
    ("beethoven/opus18no1/movement2.mxl", "Beethoven"),
    ("schumann_clara/polonaise_op1n1.mxl", "Clara Schumann"),
    ("mozart/k156/movement1.mxl", "Mozart"),
    ("haydn/opus1no1/movement1.mxl", "Haydn"),
    ("beethoven/opus59no1/movement1.mxl", "Beethoven"),
    ("mozart/k80/movement4.mxl", "Mozart"),
    ("haydn/opus74no1/movement2.mxl", "Haydn"),
    ("schumann_clara/polonaise_op1n3.mxl", "Clara Schumann"),
    ("beethoven/opus18no1/movement3.mxl", "Beethoven"),
    ("mozart/k458/movement4.mxl", "Mozart"),
    ("cpebach/h186.mxl", "C. P. E. Bach"),
    ("haydn/opus74no1/movement3.mxl", "Haydn"),
    ("mozart/k155/movement3.mxl", "Mozart"),
    ("schumann_clara/polonaise_op1n2.mxl", "Clara Schumann"),
    ("mozart/k458/movement1.mxl", "Mozart"),
    ("beach/prayer_of_a_tired_child.musicxml", "Amy Beach"),
    ("mozart/k156/movement2.mxl", "Mozart"),
)
FOLK_FILES = tuple(
    f"oneills1850/{name}.abc"
    for name in ("0001-0050", "0051-0100", "0101-0200", "0201-0300", "0301-0350", "0351-0400", "0401-0486")
)
SCORE_SUFFIXES = ("mxl", "xml", "musicxml", "krn")  # chorale files (not the roman-numeral analyses)
FOLK_COMPOSER = "traditional (O'Neill 1850)"


@dataclass(frozen=True)
class ScoreSource:
    """One music21 corpus file to convert (a score, or an opus of several tunes)."""

    path: str  # music21 corpus path, e.g. "bach/bwv66.6.mxl"
    composer: str  # composer written in the piece index
    group: str  # split stratum: "chorale", "long" or "folk"

    @property
    def stem(self) -> str:
        """The path without its extension: the piece name (or the prefix of an opus's tune names)."""
        return self.path.rsplit(".", 1)[0]


@dataclass
class Task:
    """What a worker does for one source: convert it (unless cached) and tokenise its pieces."""

    source: ScoreSource  # the corpus file
    midi_root: str  # root/midi
    cached: list[str] | None  # piece names already converted (None: convert it now)
    cached_error: str | None  # why an earlier build could not convert it (then cached == [])
    max_piece_tokens: int | None  # longer pieces are cut at a bar line


@dataclass
class TaskResult:
    """What a worker returns for one source."""

    source: ScoreSource  # the corpus file
    names: list[str] = field(default_factory=list)  # its pieces (written to the manifest)
    error: str | None = None  # why the file could not be converted at all
    pieces: list[Piece] = field(default_factory=list)  # tokenised pieces
    skipped: list[Skipped] = field(default_factory=list)  # pieces that failed to tokenise
    converted: bool = False  # True if music21 parsed the file during this build


def select_sources(max_chorales: int | None, max_long_pieces: int, max_folk_files: int) -> list[ScoreSource]:
    """The corpus files of a build: the first chorales (by path), long pieces and folk files."""
    from music21 import corpus

    root = Path(corpus.getComposer("bach")[0]).parents[1]
    by_stem: dict[str, str] = {}
    for path in sorted(str(Path(p).relative_to(root)) for p in corpus.getComposer("bach")):
        stem, suffix = path.rsplit(".", 1)
        if suffix in SCORE_SUFFIXES and (stem not in by_stem or suffix == "mxl"):
            by_stem[stem] = path
    chorales = sorted(by_stem.values())
    sources = [ScoreSource(p, "J. S. Bach", "chorale") for p in chorales[:max_chorales]]
    sources += [ScoreSource(p, composer, "long") for p, composer in LONG_PIECES[:max_long_pieces]]
    sources += [ScoreSource(p, FOLK_COMPOSER, "folk") for p in FOLK_FILES[:max_folk_files]]
    return sources


def build_default_corpus(
    root: str | Path = "corpus/default",
    tokenizer: BaseTokenizer | None = None,
    max_chorales: int | None = None,
    max_long_pieces: int = len(LONG_PIECES),
    max_folk_files: int = 2,
    max_piece_tokens: int | None = 16384,
    heldout: float = 0.05,
    workers: int = 2,
    progress: bool = True,
) -> TokenCorpus:
    """Build (or reuse) the default corpus in ``root``; see the module docstring.

    ``max_chorales`` (None: all 410), ``max_long_pieces`` and ``max_folk_files`` limit the selection;
    pieces longer than ``max_piece_tokens`` are cut at a bar line. ``workers=1`` runs in this process.
    """
    if tokenizer is None:
        from remi import REMITokenizer

        tokenizer = REMITokenizer()
    from music21 import VERSION_STR

    settings = {
        "max_chorales": max_chorales,
        "max_long_pieces": max_long_pieces,
        "max_folk_files": max_folk_files,
        "max_piece_tokens": max_piece_tokens,
        "heldout": heldout,
        "tokenizer": tokenizer.settings(),
        "music21": VERSION_STR,
    }
    cached = cached_corpus(root, BUILDER, settings)
    if cached is not None:
        return cached

    start = time.perf_counter()
    midi_root = Path(root) / "midi"
    midi_root.mkdir(parents=True, exist_ok=True)
    manifest_path = midi_root / "manifest.json"
    manifest: dict[str, Any] = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    sources = select_sources(max_chorales, max_long_pieces, max_folk_files)
    tasks = [_task(s, manifest.get(s.path), midi_root, max_piece_tokens) for s in sources]
    tasks.sort(key=_expected_cost, reverse=True)  # longest first, for an even load on the workers

    results: list[TaskResult] = []
    bar = tqdm(total=len(tasks), desc="default corpus", unit="file", disable=not progress)
    for result in _run(tasks, tokenizer, workers):
        results.append(result)
        manifest[result.source.path] = {"pieces": result.names, "error": result.error}
        bar.update(1)
    bar.close()
    tmp = midi_root / ".manifest.json.tmp"
    tmp.write_text(json.dumps(dict(sorted(manifest.items())), indent=1))
    os.replace(tmp, manifest_path)

    pieces = [p for r in results for p in r.pieces]
    skipped = [Skipped(r.source.path, r.error) for r in results if r.error] + [s for r in results for s in r.skipped]
    skipped.sort(key=lambda s: s.name)
    seconds = time.perf_counter() - start
    extra = {
        "build_seconds": round(seconds, 1),
        "files_converted": sum(r.converted for r in results),  # parsed by music21 in this build
        "files_from_cache": sum(not r.converted for r in results),
        "groups": {g: sum(p.group == g for p in pieces) for g in ("chorale", "long", "folk")},
    }
    by_split = split_pieces(pieces, heldout, min_heldout={"long": 2})
    corpus = write_corpus(root, tokenizer, by_split, skipped, BUILDER, settings, extra)
    logger.info(
        "default corpus built in %.1f s (%d files converted, %d from the MIDI cache)",
        seconds, extra["files_converted"], extra["files_from_cache"],
    )
    return corpus


# ---------------------------------------------------------------------------- workers

_WORKER_TOKENIZER: BaseTokenizer | None = None  # the tokenizer of this worker process


def _init_worker(tokenizer_dict: dict[str, Any]) -> None:
    global _WORKER_TOKENIZER
    _WORKER_TOKENIZER = tokenizer_from_dict(tokenizer_dict)


def _work(task: Task) -> TaskResult:
    assert _WORKER_TOKENIZER is not None, "worker not initialised"
    return process_source(task, _WORKER_TOKENIZER)


def _run(tasks: list[Task], tokenizer: BaseTokenizer, workers: int):
    """Yield one TaskResult per task (in completion order)."""
    if workers <= 1:
        for task in tasks:
            yield process_source(task, tokenizer)
        return
    with multiprocessing.Pool(workers, initializer=_init_worker, initargs=(tokenizer.to_dict(),)) as pool:
        yield from pool.imap_unordered(_work, tasks, chunksize=1)


def _task(source: ScoreSource, entry: dict[str, Any] | None, midi_root: Path, max_piece_tokens: int | None) -> Task:
    """A task that reuses the manifest ``entry`` of the source if its MIDI files are all there."""
    if entry is not None and entry.get("error"):
        return Task(source, str(midi_root), [], entry["error"], max_piece_tokens)
    if entry is not None and all((midi_root / f"{n}.mid").is_file() for n in entry.get("pieces", [])):
        return Task(source, str(midi_root), list(entry["pieces"]), None, max_piece_tokens)
    return Task(source, str(midi_root), None, None, max_piece_tokens)


def _expected_cost(task: Task) -> float:
    """Rough parsing cost: the file size, compressed MusicXML counting five times."""
    if task.cached is not None:
        return 0.0
    from music21 import corpus

    size = float(os.path.getsize(corpus.getWork(task.source.path)))
    return size * 5 if task.source.path.endswith(".mxl") else size


def process_source(task: Task, tokenizer: BaseTokenizer) -> TaskResult:
    """Convert one corpus file to MIDI (unless cached) and tokenise its pieces."""
    result = TaskResult(source=task.source)
    if task.cached is None:
        result.converted = True
        try:
            result.names = convert_corpus_file(task.source.path, task.source.stem, Path(task.midi_root))
        except Exception as err:  # music21 raises many exception types on malformed scores
            result.error = f"music21 could not convert it ({type(err).__name__}: {err})"
            logger.warning("skipped %s: %s", task.source.path, result.error)
            return result
    else:
        result.names, result.error = task.cached, task.cached_error
    named = [(name, Path(task.midi_root) / f"{name}.mid") for name in result.names]
    encoded, result.skipped = encode_files(named, tokenizer, task.max_piece_tokens)
    source = task.source
    result.pieces = [Piece(e.name, e.ids, source.composer, e.declared_meters, source.path, source.group)
                     for e in encoded]
    return result
