"""Rewrite these bars: how well a fill-in-the-middle model infills held-out songs.

    python -m bench.infill --checkpoint pop909_infill --corpus corpus/pop909 --songs 30   # --plain: the default model

For each held-out song of the corpus (its test split) with at least 2 * MARGIN + --bars bars, a span of
--bars bars is drawn at random, at least MARGIN bars from either end. Measured per song:

* NLL of the real span's tokens (nats per token), teacher-forced: the FIM model given both sides (the
  rearranged order of ``remi.infill``, reading the suffix's first bars within --suffix-tokens), the
  FIM model given the left side only (plain order), and the plain model given the left side only. Both
  sides minus left only is the gain of seeing the suffix;
* two ceilings of what a model can take from material it has read: the FIM model with the real span
  itself read as the suffix (``nll_span_as_suffix``; a model that copies gets it nearly free), and
  the plain model reading the span a second time right after itself (``nll_plain_repeat``); with
  ``--recall``, every NLL is that of the model mixed with its copy cache (``generation.recall``, the
  checkpoint's fitted weights; the FIM model's with an infill's lag, ``generation.infill.RECALL_LAG``),
  as sampling with recall draws;
* one infill by the FIM model (``generation.infill``, the model's sampling defaults), and, for
  comparison, the plain model continuing the left side for as many bars (both steered to give every
  bar notes and not to end early: ``generation.infill.BarsWithNotes``);
* the share of the notes outside the span that the output keeps (onset, pitch, duration, velocity:
  100% is expected), the span's bars that have notes, and the quality metrics of the span
  (``evaluation.quality_metrics``) against the real bars it replaces;
* the join into the bar after the span: the chord of the span's last bar and of the next bar (the
  tokenizer's own recogniser, ``evaluation.chords``), as a move (root interval, families); ``join``
  is how common that move is among the bar-to-bar moves of the real held-out songs (its share of
  them), ``join_as_real`` whether it is the real song's own move there.

Writes infill.csv (per song and source) and infill.md (the tables), and prints the tables. One
torch.Generator seeded once drives the draws; the positional noise of each forward pass is seeded too.
"""

from __future__ import annotations

import argparse
import csv
from collections import Counter
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from data import load_corpus
from evaluation.chords import real_progressions, recognised_chords
from evaluation.quality import measure
from generation.chords import family
from evaluation.form import token_nll
from generation.infill import LEAD_BARS, SUFFIX_TOKENS, BarsWithNotes, InfillJob, infill_sampling
from generation.pieces import bar_stop, keep_bars, strip_eos
from generation.recall import KeyTokens, RecallConfig, recall_nll
from generation.sampling import SamplingConfig, generate
from model import IGNORE_INDEX
from remi.infill import marker_ids
from tokenization.infill import Arrangement
from training.checkpoint import load_model

MARGIN = 4  # bars kept on either side of the span, at least
METRICS = ("pitch_class_entropy", "polyphony", "empty_beat_rate", "tokens_per_bar")
SOURCES = ("real", "fim", "plain")  # the real bars, the FIM model's infill, the plain model's continuation


def span_nll(model: torch.nn.Module, ids: list[int], start: int, end: int, seed: int,
             recall: tuple[RecallConfig, KeyTokens] | None = None) -> float:
    """Mean NLL of the tokens ids[start:end] given everything before them (one seeded forward pass);
    with `recall` (its config and the tokenizer's key tokens), under the mixture with the copy cache of
    ids[:end] read left to right."""
    if recall is not None:  # position p of the NLLs predicts token p + 1
        return float(recall_nll(ids[:end], token_nll(model, ids[:end], seed), *recall)[start - 1:end - 1].mean())
    device = model.head.weight.device
    tokens = torch.as_tensor(ids[:end], device=device)[None]  # (1, L)
    targets = torch.full_like(tokens, IGNORE_INDEX)
    targets[0, start - 1:end - 1] = tokens[0, start:end]  # position p predicts token p + 1
    torch.manual_seed(seed)
    with torch.no_grad():
        _, loss = model(tokens[:, :-1], targets[:, :-1])
    return float(loss)


def notes_kept(tokenizer, song: list[int], result: list[int], span: tuple[int, int]) -> float:
    """Share of the song's notes outside the span's bars (by onset) that the result has, unchanged."""
    def outside(ids: list[int], first_tick: int, last_tick: int) -> set:
        notes = tokenizer.decode(ids).instruments[0].notes
        return {(n.start, n.pitch, n.end, n.velocity) for n in notes if not first_tick <= n.start < last_tick}

    state = tokenizer.constraint_state()
    starts = tokenizer.bar_starts(song)
    ticks = []
    for index, token in enumerate(song):
        if index in (starts[span[0]], starts[span[1]] if span[1] < len(starts) else -1):
            ticks.append(int(state.next_bar_time() * 480))
        state.advance(token)
    first_tick, last_tick = ticks[0], ticks[1] if len(ticks) > 1 else 1 << 40
    real = outside(song, first_tick, last_tick)
    return len(real & outside(result, first_tick, last_tick)) / max(len(real), 1)


def bar_metrics(tokenizer, bars_ids: list[int], bars: int) -> dict[str, float]:
    values = measure(tokenizer, bars_ids)
    pitches = set(tokenizer.vocab.by_type("Note_Pitch"))
    with_notes = sum(any(t in pitches for t in bar) for bar in split_bars(tokenizer, bars_ids))
    return {**{m: values[m] for m in METRICS if m in values}, "tokens_per_bar": len(bars_ids) / bars,
            "bars_with_notes": with_notes / bars}


def move(a, b) -> tuple:
    """A bar-to-bar chord move: (root interval, family of a, family of b); None for no chord."""
    fa, fb = family(a), family(b)
    interval = None if fa is None or fb is None else (fb[0] - fa[0]) % 12
    return interval, fa and fa[1], fb and fb[1]


def real_moves(tokenizer, songs: list[list[int]]) -> Counter:
    """How often each bar-to-bar chord move occurs in the songs (their chord tokens)."""
    moves = Counter()
    for song in songs:
        chords = real_progressions(tokenizer, song)
        moves.update(move(a, b) for a, b in zip(chords, chords[1:]))
    return moves


def split_bars(tokenizer, ids: list[int]) -> list[list[int]]:
    starts = tokenizer.bar_starts(ids) + [len(ids)]
    return [ids[a:b] for a, b in zip(starts, starts[1:])]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="the fill-in-the-middle model")
    parser.add_argument("--plain", default=None,
                        help="a left-to-right model to compare (default: the shipped default, pretrained/latest)")
    parser.add_argument("--corpus", default="corpus/pop909", help="token corpus with a test split")
    parser.add_argument("--songs", type=int, default=30, help="held-out songs (default: %(default)s)")
    parser.add_argument("--bars", type=int, default=4, help="bars per span (default: %(default)s)")
    parser.add_argument("--suffix-tokens", type=int, default=SUFFIX_TOKENS,
                        help="the suffix the FIM model reads, in tokens of whole bars; 0: all of it "
                             "(default: %(default)s)")
    parser.add_argument("--lead-bars", type=int, default=LEAD_BARS,
                        help="bars before the span the FIM model reads after the suffix, right before the span "
                             "(default: %(default)s)")
    parser.add_argument("--recall", action="store_true",
                        help="NLLs under each model's recall mixture (generation.recall, its fitted weights; "
                             "a plain model without them reads alone)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default: %(default)s)")
    parser.add_argument("--out", default="bench/results", help="folder of infill.{csv,md}")
    args = parser.parse_args(argv)
    if not Path(args.corpus).is_dir():
        parser.error(f"corpus not found: {args.corpus}")
    torch.set_num_threads(args.threads)
    fim, plain = load_model(args.checkpoint), load_model(args.plain)
    args.plain = args.plain or plain.path.name  # the shipped default, named in the table's command
    tokenizer = fim.tokenizer
    # the FIM model samples as an infill does, the plain model as a continuation does
    fim_sampling = infill_sampling(SamplingConfig.from_defaults(fim.config.generate))
    plain_sampling = SamplingConfig.from_defaults(plain.config.generate)
    fim_recall = plain_recall = None
    if args.recall:
        fim_recall, plain_recall = (
            (sampling.recall, KeyTokens.of(c.tokenizer)) if sampling.recall is not None else None
            for c, sampling in ((fim, fim_sampling), (plain, plain_sampling)))
        if fim_recall is None:
            parser.error(f"--recall: {args.checkpoint} has no fitted recall weights (python -m bench.recall --write)")
    corpus = load_corpus(Path(args.corpus))
    rng = np.random.default_rng(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    rows = []
    songs = [(name, strip_eos(ids, tokenizer.eos_id)) for ids, name in
             zip(corpus.pieces("test"), corpus.names("test"))]
    songs = [(name, ids) for name, ids in songs if len(tokenizer.bar_starts(ids)) >= 2 * MARGIN + args.bars]
    if not songs:
        parser.error(f"no test song of {args.corpus} has {2 * MARGIN + args.bars} bars")
    moves = real_moves(tokenizer, [ids for _, ids in songs])
    for index, (name, song) in enumerate(tqdm(songs[:args.songs], desc="songs", unit="song")):
        bars = len(tokenizer.bar_starts(song))
        first = int(rng.integers(MARGIN, bars - MARGIN - args.bars + 1))
        job = InfillJob.of(tokenizer, song, (first + 1, first + args.bars), args.suffix_tokens or None,
                           args.lead_bars)
        middle = job.parts.middle
        both = job.prompt + middle + [marker_ids(tokenizer)[2]]
        left = job.parts.before + middle
        nll = {"nll_both_sides": span_nll(fim.model, both, len(job.prompt), len(job.prompt) + len(middle), index,
                                          fim_recall),
               "nll_left_only": span_nll(fim.model, left, len(job.parts.before), len(left), index, fim_recall),
               "nll_plain_left_only": span_nll(plain.model, left, len(job.parts.before), len(left), index,
                                               plain_recall)}
        oracle = Arrangement(prefix=job.read.prefix, middle=middle, suffix=middle, lead=job.read.lead).prompt(tokenizer)
        nll["nll_span_as_suffix"] = span_nll(fim.model, oracle + middle, len(oracle), len(oracle) + len(middle), index,
                                             fim_recall)
        nll["nll_plain_repeat"] = span_nll(plain.model, left + middle, len(left), len(left) + len(middle), index,
                                           plain_recall)
        filled = job.restore(generate(fim.model, tokenizer, job.prompt, 200 * args.bars, fim_sampling, generator,
                                      stop=bar_stop(tokenizer, len(job.prompt), args.bars), steer=job.steer()))
        start = len(job.parts.before)
        continued = generate(plain.model, plain.tokenizer, job.parts.before, 200 * args.bars, plain_sampling, generator,
                             stop=bar_stop(tokenizer, start, args.bars),
                             steer=BarsWithNotes(plain.tokenizer, start, args.bars))
        continued = keep_bars(tokenizer, continued, start, args.bars).tokens[start:]
        span = (first, first + args.bars)
        real_join = None
        for source, ids in (("real", middle), ("fim", job.middle(filled)), ("plain", continued)):
            last, after = recognised_chords(tokenizer, job.parts.before + ids + job.parts.suffix, span[1] - 1, 2)
            join = move(last, after)
            real_join = join if source == "real" else real_join
            row = {"song": name, "source": source, "first_bar": first + 1, **nll,
                   **bar_metrics(tokenizer, ids, args.bars),
                   "join": moves[join] / max(1, sum(moves.values())), "join_as_real": float(join == real_join)}
            if source == "fim":
                row["notes_kept"] = notes_kept(tokenizer, song, filled.tokens, span)
            rows.append(row)
    write_outputs(rows, args)
    return 0


def write_outputs(rows: list[dict], args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    fields = sorted({key for row in rows for key in row}, key=lambda k: list(rows[-2]).index(k)
                    if k in rows[-2] else 99)
    with (out / "infill.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    real = [r for r in rows if r["source"] == "real"]
    fim = [r for r in rows if r["source"] == "fim"]

    def stat(values) -> str:
        values = np.asarray(values, dtype=float)
        if np.isnan(values).all():
            return "-"
        return f"{np.nanmean(values):.3f} ± {np.nanstd(values):.3f}"

    lines = [f"`python -m bench.infill --checkpoint {args.checkpoint} --plain {args.plain} --corpus {args.corpus} "
             f"--songs {args.songs} --bars {args.bars} --suffix-tokens {args.suffix_tokens} "
             f"--lead-bars {args.lead_bars} "
             f"--seed {args.seed}{' --recall' if args.recall else ''}`: {len(real)} held-out songs, one span "
             f"of {args.bars} bars each", "",
             f"NLL of the real span (nats per token, mean ± std over songs){', with recall' if args.recall else ''}:",
             "",
             "| FIM model, both sides | FIM model, left only | gain of the suffix | plain model, left only |",
             "|---:|---:|---:|---:|",
             f"| {stat([r['nll_both_sides'] for r in real])} | {stat([r['nll_left_only'] for r in real])} | "
             f"{stat([r['nll_left_only'] - r['nll_both_sides'] for r in real])} | "
             f"{stat([r['nll_plain_left_only'] for r in real])} |", "",
             "What the models take from the span when they have read it already (ceilings of the gain):", "",
             "| FIM model, the span itself as the suffix | gain over left only | plain model, the span read "
             "again right after itself | gain over its first reading |", "|---:|---:|---:|---:|",
             f"| {stat([r['nll_span_as_suffix'] for r in real])} | "
             f"{stat([r['nll_left_only'] - r['nll_span_as_suffix'] for r in real])} | "
             f"{stat([r['nll_plain_repeat'] for r in real])} | "
             f"{stat([r['nll_plain_left_only'] - r['nll_plain_repeat'] for r in real])} |", "",
             f"Notes kept outside the span: {np.mean([r['notes_kept'] for r in fim]):.1%} (min "
             f"{np.min([r['notes_kept'] for r in fim]):.1%}); span bars with notes: "
             f"{np.mean([r['bars_with_notes'] for r in fim]):.1%} (FIM infill).", "",
             "The span's bars (mean ± std over songs):", "",
             "| metric | real bars | FIM infill | plain model, left only |", "|---|---:|---:|---:|"]
    for metric in METRICS + ("bars_with_notes", "join", "join_as_real"):
        cells = [stat([r[metric] for r in rows if r["source"] == s and metric in r]) for s in SOURCES]
        lines.append(f"| {metric} | " + " | ".join(cells) + " |")
    table = "\n".join(lines) + "\n"
    (out / "infill.md").write_text(table)
    print(table, end="")


if __name__ == "__main__":
    raise SystemExit(main())
