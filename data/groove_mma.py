"""A band corpus (drums, bass, accompaniment) rendered with MMA from POP909's real chord progressions.

Groove2Groove (Cífka et al. 2020) renders chord charts with the commercial Band-in-a-Box in thousands of
styles; this module does the same with MMA ("Musical MIDI Accompaniment", GPL-2, Debian package ``mma``:
``apt-get install mma``), run as an external program with its installed groove library.

**Renditions.** Each chart is rendered in ``styles_per_chart`` grooves drawn from ``styles`` (default 2: pairs
in two styles, as in Groove2Groove), each transposed by its own shift drawn from ``transpositions``
(-5..+6). With ``articulation`` (low, high), each rendition also draws a percentage from that range and plays
every track's notes at that fraction of their nominal length (``AllTracks Articulate N`` after the groove):
the grooves' own articulation is one per style (about 90%), real bands vary it, and a model trained on one
keeps it whatever its prompt plays. With ``lead_prob`` p > 0, a rendition's accompaniment is, with
probability p, the song's own lead melody (POP909's ``MELODY`` track, cut to the chart by
``data.pop909_charts.chart_melody``, transposed with the chords, on a GM lead program drawn from
``LEAD_PROGRAMS``) instead of MMA's chords: real bands' busiest pitched track is often a lead line, which
MMA does not write (a chart whose melody has under a note a bar keeps MMA's chords). With ``piano_prob`` q > 0,
a rendition without a lead takes, with probability q, the song's own piano accompaniment (POP909's ``PIANO``
track, cut and transposed the same way, notes below ``PIANO_LOW`` left to the bass, on a program drawn from
``PIANO_PROGRAMS``): a human part, its voicings and rhythm its own, that a continuation can only keep by
reading the prompt. The draws depend only on (seed, song, chart), the piano's on a stream of their own so
that the other draws stay as without it, and MMA's randomness is seeded (``RndSeed``).

**Tracks.** MMA names its MIDI tracks by type (``Drum``, ``Bass``, ``Walk``, ``Chord-Piano``, ``Arpeggio``,
``Plectrum``, ``Scale``, ``Solo``, ``Melody``, ``Aria``...). Drum tracks (channel 10) are merged into
"BB Drums"; Walk tracks, the plain "Bass" track and Bass tracks with a GM bass program (32-39) into "BB Bass";
Chord, Arpeggio, Plectrum, Scale and the other Bass tracks (e.g. "Bass-Sax", a horn doubling the bass
pattern) into one accompaniment track with the program of its largest member, named by its GM family
("BB Piano", "BB Guitar", "BB Strings"...); Solo, Melody and Aria are dropped. Notes are clipped to the
chart's end; a rendition missing a role is skipped (counted).

**Styles and programs** are ``data.mma_styles``'s (``--style-set``: the default 30 grooves or the wide 76).

**Layout:** Groove2Groove's ``out_dir/{train,val,test}/<song>_<chart>.<style>.mid``, split by source song from
its number (n % 10 == 8 val, 9 test, else train), so no song is in two splits; ``out_dir/corpus.json``
describes every piece (chords as rendered, style, transposition, tempo) and the build (styles, pieces, songs
and bars per split, skipped songs and renditions by reason).

    python -m data.groove_mma --out corpus/groove_mma [--songs N] [--styles BossaNova Swing] [--jobs 2]
    python -m data.groove_mma --out corpus/groove_wide/midi --style-set wide --articulation 40 100 \
        --lead-prob 0.5 --charts-per-song 3 --styles-per-chart 3 --jobs 2
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import subprocess
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import miditoolkit
import numpy as np
from tqdm.auto import tqdm

from data.mma_styles import DEFAULT_STYLES, GM_FAMILIES, LEAD_PROGRAMS, PIANO_PROGRAMS, STYLE_SETS
from data.pop909_charts import (BEATS_PER_BAR, CHART_BARS, TEMPO_RANGE, BeatNote, Chart, Chord, Skipped, chart_melody,
                                PIANO_TRACK, chart_song, load_song)
from groove.dataset import SPLITS
from groove.roles import piece_from_midi

logger = logging.getLogger("data.groove_mma")  # also when run with -m

DEFAULT_ANNOTATIONS = Path(__file__).resolve().parents[2] / "shared" / "data" / "pop909_annotations"
DEFAULT_MELODIES = DEFAULT_ANNOTATIONS.parent / "pop909"  # POP909's MIDI files, for the lead melodies
PIANO_LOW = 48  # the piano part's notes below C3 (its left hand's bass) are left out: the bass role plays there
TRANSPOSITIONS = (-5, 6)  # lowest and highest transposition drawn, semitones
MMA_TIMEOUT_S = 120  # per rendition
ARTICULATION_MAX = 200  # highest Articulate percentage accepted (legato beyond 100)
ACCOMPANIMENT_TYPES = ("chord", "arpeggio", "plectrum", "scale")  # MMA track types merged into the accompaniment


@dataclass
class MmaPiece:
    """One rendered file (saved in corpus.json)."""

    name: str  # file stem without the style: <song>_<chart>
    song: str  # POP909 song number
    chart: int  # chart number within the song
    split: str  # train / val / test
    style: str  # the MMA groove it is rendered in
    transposition: int  # semitones added to the chart's chords
    articulation: int | None  # MMA's Articulate for every track, % of each note's nominal length (None: the groove's)
    lead: int | None  # GM program of the song's melody played as the accompaniment (None: MMA's chords)
    piano: int | None  # GM program of the song's piano part played as the accompaniment (None: not it)
    tempo: int  # qpm
    bars: int  # length in 4/4 bars
    first_bar: int  # where the chart starts in the song (annotated bars)
    chords: list[str]  # MMA chord line of each bar, as rendered (transposed)
    path: str  # the file, relative to the corpus folder


@dataclass
class MmaCorpus:
    """What a build wrote."""

    root: Path  # out_dir
    styles: list[str]  # the styles drawn from
    splits: dict[str, list[Path]] = field(default_factory=dict)  # split -> MIDI files
    pieces: list[MmaPiece] = field(default_factory=list)  # one entry per file
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> songs or renditions skipped


def require_mma() -> str:
    """The path of the ``mma`` program; RuntimeError naming the install command when it is missing."""
    path = shutil.which("mma")
    if path is None:
        raise RuntimeError("the mma program is not installed (Debian/Ubuntu: apt-get install mma)")
    return path


def split_of(song: str) -> str:
    """The split of a POP909 song, from its number: 8 of every 10 train, then val, test."""
    return {8: "val", 9: "test"}.get(int(song) % 10, "train")


def mma_song(chart: Chart, style: str, shift: int, seed: int, articulation: int | None = None) -> str:
    """The MMA song file of one rendition; ``articulation`` overrides the groove's note lengths (%)."""
    head = [f"// POP909 song {chart.song}, chart {chart.index}, transposed {shift:+d}", f"RndSeed {seed}",
            f"Tempo {chart.tempo}", f"Groove {style}"]
    if articulation is not None:
        head.append(f"AllTracks Articulate {articulation}")
    return "\n".join(head + [f"{bar} {line}" for bar, line in enumerate(chart.lines(shift), 1)]) + "\n"


def run_mma(text: str, mma: str = "mma") -> miditoolkit.MidiFile:
    """Render an MMA song file; Skipped with MMA's first error line when it fails."""
    with tempfile.TemporaryDirectory(prefix="groove_mma_") as tmp:
        out = Path(tmp) / "song.mid"
        proc = subprocess.run([mma, "-w", "-xNOCREDIT", "-", "-f", str(out)], input=text, capture_output=True,
                              text=True, timeout=MMA_TIMEOUT_S)
        if proc.returncode or not out.is_file():
            errors = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("Error")]
            raise Skipped("mma failed", errors[0] if errors else f"exit status {proc.returncode}")
        return miditoolkit.MidiFile(str(out))


def track_role(inst: miditoolkit.Instrument) -> str | None:
    """The role of one MMA track: drums, bass, accompaniment, or None (dropped; module docstring)."""
    if inst.is_drum:
        return "drums"
    name = (inst.name or "").strip().lower()
    kind = name.split("-")[0]
    if kind == "walk" or name == "bass" or (kind == "bass" and 32 <= inst.program <= 39):
        return "bass"
    return "accompaniment" if kind in ACCOMPANIMENT_TYPES or kind == "bass" else None


def _merged(insts: list[miditoolkit.Instrument], end: int) -> list[miditoolkit.Note]:
    """The notes of several tracks in one, clipped to ``end``; a same-pitch overlap ends the earlier note."""
    notes = sorted(((n.start, n.pitch, -min(n.end, end), n.velocity) for i in insts for n in i.notes if n.start < end))
    out: list[miditoolkit.Note] = []
    last: dict[int, miditoolkit.Note] = {}  # pitch -> its latest note
    for start, pitch, neg_end, velocity in notes:
        prev = last.get(pitch)
        if prev is not None and prev.end > start:
            if prev.start == start:  # same onset: keep the longer (first sorted) note
                continue
            prev.end = start
        last[pitch] = miditoolkit.Note(velocity=velocity, pitch=pitch, start=start, end=max(-neg_end, start + 1))
        out.append(last[pitch])
    return out


@dataclass(frozen=True)
class Lead:
    """A part of the song (its melody or its piano part) that replaces MMA's accompaniment in a rendition."""

    program: int  # GM program (0-based)
    notes: tuple[BeatNote, ...]  # (start, end) in beats from the chart's start, MIDI pitch (transposed)

    @classmethod
    def transposed(cls, program: int, notes: Sequence[BeatNote], shift: int) -> Lead:
        """The part's notes moved by ``shift`` semitones with the chords, pitches kept within MIDI's 0..127."""
        return cls(program, tuple((start, end, min(127, max(0, pitch + shift))) for start, end, pitch in notes))


def band_midi(midi: miditoolkit.MidiFile, bars: int, lead: Lead | None = None) -> miditoolkit.MidiFile:
    """MMA's tracks merged onto "BB Drums", "BB Bass" and one accompaniment (``lead``'s notes when given);
    Skipped if a role is empty."""
    tpb = midi.ticks_per_beat
    end = bars * BEATS_PER_BAR * tpb
    groups: dict[str, list[miditoolkit.Instrument]] = {"drums": [], "bass": [], "accompaniment": []}
    for inst in midi.instruments:
        role = track_role(inst)
        if role is not None and inst.notes:
            groups[role].append(inst)
    band = miditoolkit.MidiFile(ticks_per_beat=midi.ticks_per_beat)
    band.tempo_changes = list(midi.tempo_changes[:1]) or [miditoolkit.TempoChange(120.0, 0)]
    band.time_signature_changes = [miditoolkit.TimeSignature(BEATS_PER_BAR, 4, 0)]
    if lead is not None:
        melody = miditoolkit.Instrument(program=lead.program, name="lead")
        melody.notes = [miditoolkit.Note(velocity=90, pitch=pitch, start=round(start * tpb), end=round(stop * tpb))
                        for start, stop, pitch in lead.notes]
        groups["accompaniment"] = [melody]
    for role, insts in groups.items():
        notes = _merged(insts, end)
        if not notes:
            raise Skipped(f"no {role} track")
        program = max(insts, key=lambda i: len(i.notes)).program
        name = {"drums": "BB Drums", "bass": "BB Bass"}.get(role, f"BB {GM_FAMILIES[program // 8]}")
        inst = miditoolkit.Instrument(program=0 if role == "drums" else program, is_drum=role == "drums", name=name)
        inst.notes = notes
        band.instruments.append(inst)
    piece = piece_from_midi(band, "<band>")  # the roles groove.roles finds must be these three
    if not (piece.drums and piece.bass and len(piece.candidates) == 1):
        raise Skipped("roles not found by groove.roles")
    return band


def check_styles(styles: Sequence[str], mma: str = "mma") -> None:
    """ValueError naming the styles that do not render drums, bass and an accompaniment over I-vi-IV-V."""
    chords = [Chord(0, "maj"), Chord(9, "min"), Chord(5, "maj"), Chord(7, "7")]
    chart = Chart("0", 0, 0, 100, [(chord, chord) for chord in chords])
    bad = [f"{style} (a file name part: no '.', '/' or blank)" for style in styles if set(style) & set("./ ")]
    for style in (s for s in styles if not set(s) & set("./ ")):
        try:
            band_midi(run_mma(mma_song(chart, style, 0, 0), mma), len(chart.halves))
        except Skipped as err:
            bad.append(f"{style} ({err})")
    if bad:
        raise ValueError(f"unusable MMA styles: {'; '.join(bad)}")


@dataclass(frozen=True)
class Rendition:
    """One file to render."""

    chart: Chart  # the chord chart
    style: str  # MMA groove
    shift: int  # transposition, semitones
    seed: int  # MMA's RndSeed
    articulation: int | None  # AllTracks Articulate percentage (None: the groove's own)
    lead: Lead | None  # the song's melody as the accompaniment (None: MMA's)
    piano: Lead | None  # the song's piano part as the accompaniment (None: MMA's or the lead)
    path: Path  # where the band file goes
    mma: str  # the mma program


def _render(task: Rendition) -> str | None:
    """Render one task; None when written, else the skip reason."""
    chart = task.chart
    try:
        text = mma_song(chart, task.style, task.shift, task.seed, task.articulation)
        band_midi(run_mma(text, task.mma), len(chart.halves), task.lead or task.piano).dump(str(task.path))
    except (Skipped, subprocess.TimeoutExpired) as err:
        logger.warning("skipped %s: %s", task.path.name, err)
        return f"rendition: {getattr(err, 'reason', 'mma timed out')}"
    return None


def _draw_renditions(chart: Chart, styles: Sequence[str], styles_per_chart: int, transpositions: tuple[int, int],
                     seed: int, articulation: tuple[int, int] | None, lead_prob: float,
                     melody: tuple[BeatNote, ...], folder: Path, mma: str, piano_prob: float = 0.0,
                     piano: tuple[BeatNote, ...] = ()) -> list[Rendition]:
    """The renditions of one chart; every draw depends only on (seed, song, chart). Articulation and lead are
    drawn from a second stream and the piano part from a third, so that the earlier draws do not depend on them."""
    rng = np.random.default_rng([seed, int(chart.song), chart.index])
    extra = np.random.default_rng([seed, int(chart.song), chart.index, 1])
    third = np.random.default_rng([seed, int(chart.song), chart.index, 2])
    chosen = rng.choice(len(styles), size=min(styles_per_chart, len(styles)), replace=False)
    out = []
    for style in (styles[int(i)] for i in chosen):
        shift = int(rng.integers(transpositions[0], transpositions[1] + 1))
        mma_seed = int(rng.integers(2**31))
        drawn = None if articulation is None else int(extra.integers(articulation[0], articulation[1] + 1))
        lead = None
        if lead_prob > 0 and extra.random() < lead_prob:
            program = LEAD_PROGRAMS[int(extra.integers(len(LEAD_PROGRAMS)))]
            if len(melody) >= len(chart.halves):  # at least a note a bar on average, else MMA's chords
                lead = Lead.transposed(program, melody, shift)
        keys = None
        if piano_prob > 0 and third.random() < piano_prob:
            program = PIANO_PROGRAMS[int(third.integers(len(PIANO_PROGRAMS)))]
            if lead is None and len(piano) >= len(chart.halves):  # as for a lead: a note a bar at least
                keys = Lead.transposed(program, piano, shift)
        path = folder / f"{chart.song}_{chart.index}.{style}.mid"
        out.append(Rendition(chart, style, shift, mma_seed, drawn, lead, keys, path, mma))
    return out


def build_mma_corpus(out_dir: str | Path, annotations: str | Path = DEFAULT_ANNOTATIONS,
                     styles: Sequence[str] = DEFAULT_STYLES, pieces: int | Sequence[str] | None = None,
                     bars: int = CHART_BARS, transpositions: tuple[int, int] = TRANSPOSITIONS, seed: int = 0,
                     jobs: int = 1, charts_per_song: int = 1, styles_per_chart: int = 2,
                     articulation: tuple[int, int] | None = None, lead_prob: float = 0.0,
                     melodies: str | Path = DEFAULT_MELODIES, progress: bool = True,
                     piano_prob: float = 0.0) -> MmaCorpus:
    """Render POP909's chord charts with MMA into a Groove2Groove-layout corpus (module docstring).

    ``pieces``: the songs used, a number (the first N song folders) or song names; None: all of them.
    ``articulation``: (low, high) percentages; each rendition draws one and plays every track's notes at that
    fraction of their nominal length (MMA's ``AllTracks Articulate``); None keeps each groove's own.
    ``lead_prob``: the probability that a rendition's accompaniment is the song's own melody (from
    ``melodies/NNN.mid``, POP909's MIDI files) rather than MMA's chords; ``piano_prob``: that a rendition without
    a lead takes the song's own piano part (module docstring).
    ``jobs``: renditions run at once. Files an earlier build listed in ``out_dir/corpus.json`` are removed.
    """
    mma = require_mma()  # user errors first, before any work
    annotations, root = Path(annotations), Path(out_dir)
    if not annotations.is_dir():
        raise FileNotFoundError(f"{annotations}: no such annotations folder (POP909's NNN/chord_midi.txt)")
    if min(bars, charts_per_song, styles_per_chart) < 1 or transpositions[0] > transpositions[1]:
        raise ValueError("bars, charts per song and styles per chart must be at least 1, transpositions (low, high)")
    if articulation is not None and not 1 <= articulation[0] <= articulation[1] <= ARTICULATION_MAX:
        raise ValueError(f"articulation must be (low, high) with 1 <= low <= high <= {ARTICULATION_MAX}, "
                         f"got {tuple(articulation)}")
    if not (0.0 <= lead_prob <= 1.0 and 0.0 <= piano_prob <= 1.0):
        raise ValueError(f"lead_prob and piano_prob must be in [0, 1], got {lead_prob} and {piano_prob}")
    melodies = Path(melodies)
    if max(lead_prob, piano_prob) > 0 and not melodies.is_dir():
        raise FileNotFoundError(f"{melodies}: no such folder of POP909 MIDI files (NNN.mid), needed for leads and "
                                f"piano parts")
    check_styles(styles, mma)
    songs = sorted(p.name for p in annotations.iterdir() if (p / "chord_midi.txt").is_file())
    if isinstance(pieces, int):
        songs = songs[:pieces]
    elif pieces is not None:
        songs = [str(s) for s in pieces]
    skipped: Counter = Counter()
    tasks = []
    for song in songs:
        try:
            charts = chart_song(song, *load_song(annotations / song), bars, charts_per_song)
        except Skipped as err:
            logger.info("song %s skipped: %s", song, err)
            skipped[f"song: {err.reason}"] += 1
            continue
        midi = None
        if max(lead_prob, piano_prob) > 0:
            try:
                midi = miditoolkit.MidiFile(str(melodies / f"{song}.mid"))
            except (OSError, ValueError, EOFError) as err:
                raise FileNotFoundError(f"{melodies / f'{song}.mid'}: not a readable POP909 MIDI file ({err})") from err
        for chart in charts:
            melody = tuple(chart_melody(chart, midi)) if lead_prob > 0 else ()
            piano = (tuple(n for n in chart_melody(chart, midi, PIANO_TRACK) if n[2] >= PIANO_LOW)
                     if piano_prob > 0 else ())
            tasks += _draw_renditions(chart, styles, styles_per_chart, transpositions, seed, articulation,
                                      lead_prob, melody, root / split_of(song), mma, piano_prob, piano)
    previous = root / "corpus.json"
    if previous.is_file():
        for old in (Path(piece["path"]) for piece in json.loads(previous.read_text()).get("pieces", [])):
            if len(old.parts) == 2 and old.parts[0] in SPLITS and old.suffix == ".mid":  # only files of ours
                (root / old).unlink(missing_ok=True)
    for split in SPLITS:
        (root / split).mkdir(parents=True, exist_ok=True)
    result = MmaCorpus(root=root, styles=list(styles), splits={s: [] for s in SPLITS})
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        outcomes = tqdm(pool.map(_render, tasks), total=len(tasks), desc="MMA renditions", unit="file",
                        disable=not progress)
        for task, reason in zip(tasks, outcomes):
            if reason is not None:
                skipped[reason] += 1
                continue
            chart, path = task.chart, task.path
            result.splits[path.parent.name].append(path)
            result.pieces.append(MmaPiece(
                path.name.split(".")[0], chart.song, chart.index, path.parent.name, task.style, task.shift,
                task.articulation, None if task.lead is None else task.lead.program,
                None if task.piano is None else task.piano.program, chart.tempo, bars,
                chart.first_bar, chart.lines(task.shift), path.relative_to(root).as_posix()))
    result.skipped = dict(sorted(skipped.items()))
    splits = {split: {"pieces": len(members), "songs": len({p.song for p in members}), "bars": len(members) * bars}
              for split in SPLITS for members in [[p for p in result.pieces if p.split == split]]}
    description = {
        "description": "POP909 chord charts rendered with MMA (Musical MIDI Accompaniment) in several styles",
        "source": str(annotations.resolve()),
        "songs": pieces if pieces is None or isinstance(pieces, int) else list(pieces),
        "seed": seed, "bars": bars, "charts_per_song": charts_per_song, "styles_per_chart": styles_per_chart,
        "articulation": None if articulation is None else list(articulation), "lead_prob": lead_prob,
        "piano_prob": piano_prob,
        "transpositions": list(transpositions), "tempo_range": list(TEMPO_RANGE), "styles": result.styles,
        "splits": splits, "skipped": result.skipped, "pieces": [asdict(p) for p in result.pieces],
    }
    (result.root / "corpus.json").write_text(json.dumps(description, indent=1))
    logger.info("MMA corpus in %s: %s; skipped %s", result.root,
                ", ".join(f"{s} {v['pieces']} pieces" for s, v in splits.items()), result.skipped or "none")
    return result


def build_mma_token_corpus(source: str | Path, root: str | Path, songs: int | None = None, progress: bool = True):
    """``data.kind: groove_mma``: render into ``root/midi`` (unless a build with this source and song limit is
    there), then tokenise it like a Groove2Groove folder (``data.folders.build_groove_corpus``)."""
    from data.folders import build_groove_corpus

    midi = Path(root) / "midi"
    written = json.loads((midi / "corpus.json").read_text()) if (midi / "corpus.json").is_file() else {}
    if written.get("source") != str(Path(source).resolve()) or written.get("songs") != songs:
        build_mma_corpus(midi, source, pieces=songs, progress=progress)
    return build_groove_corpus(midi, root, progress=progress)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m data.groove_mma", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="corpus folder (train/, val/, test/, corpus.json)")
    parser.add_argument("--annotations", default=str(DEFAULT_ANNOTATIONS), help="POP909 annotations folder")
    parser.add_argument("--songs", type=int, default=None, help="use the first N songs (default: all)")
    parser.add_argument("--styles", nargs="+", default=None, help="MMA grooves to draw from (default: the style set)")
    parser.add_argument("--style-set", choices=sorted(STYLE_SETS), default="default",
                        help="default: 30 grooves; wide: 76 (module docstring)")
    parser.add_argument("--lead-prob", type=float, default=0.0,
                        help="probability that a rendition's accompaniment is the song's own melody (default: 0)")
    parser.add_argument("--piano-prob", type=float, default=0.0,
                        help="probability that a rendition without a lead takes the song's piano part (default: 0)")
    parser.add_argument("--melodies", default=str(DEFAULT_MELODIES),
                        help="POP909 MIDI folder (NNN.mid), for leads and piano parts")
    parser.add_argument("--articulation", type=int, nargs=2, default=None, metavar=("LOW", "HIGH"),
                        help="draw each rendition's note lengths, %% of nominal (default: each groove's own)")
    parser.add_argument("--bars", type=int, default=CHART_BARS, help="bars per chart")
    parser.add_argument("--charts-per-song", type=int, default=1)
    parser.add_argument("--styles-per-chart", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1, help="renditions run at once")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        build_mma_corpus(args.out, args.annotations, args.styles or STYLE_SETS[args.style_set], args.songs,
                         args.bars, seed=args.seed, jobs=args.jobs, charts_per_song=args.charts_per_song,
                         styles_per_chart=args.styles_per_chart,
                         articulation=None if args.articulation is None else tuple(args.articulation),
                         lead_prob=args.lead_prob, melodies=args.melodies,
                         piano_prob=args.piano_prob)
    except (RuntimeError, FileNotFoundError, ValueError) as err:
        parser.error(str(err))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
