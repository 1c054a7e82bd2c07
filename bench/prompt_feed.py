"""Continuing a whole song: reading a long prompt into the recurrent state, time and peak memory.

    python -m bench.prompt_feed --songs ../shared/data/pop909
    python -m bench.prompt_feed --songs ../shared/data/pop909 --checkpoint runs/pop909 --stepwise

Prompts are whole POP909 songs in the checkpoint's tokens: one song, and three songs one after the
other (about 6k and 18k tokens with the shipped pop model). Each prompt is read by
`generation.sampling.Decoder` in a fresh process (chunks of PROMPT_CHUNK tokens, `model.feed`), then
16 tokens are sampled after it. Printed per prompt: its tokens, the seconds and microseconds per
token of reading it, peak RSS and peak RSS above the process's baseline (after loading the model),
and the 3-song / 1-song ratio of the latter. --stepwise also reads the 1-song prompt one token at a
time (`model.step`, chunks of 1) for comparison.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from bench.timing import peak_rss_mb, run_isolated

SONGS = ("001", "002", "004")  # POP909 song numbers of the prompts (NNN.mid)
NEW_TOKENS = 16


def worker(spec: dict) -> dict:
    """Read the prompt of `spec` and sample after it: {tokens, seconds, peak_mb, extra_mb}."""
    import generation.sampling as sampling
    from generation.pieces import piece_ids
    from training.checkpoint import load_model

    torch.set_num_threads(spec["threads"])
    ckpt = load_model(spec["checkpoint"])
    prompt = [t for path in spec["songs"] for t in piece_ids(ckpt.tokenizer, path)]
    baseline = peak_rss_mb()
    if spec["chunk"]:
        sampling.PROMPT_CHUNK = spec["chunk"]
    generator = sampling.seeded_generator(0, torch.device("cpu"))
    start = time.perf_counter()
    decoder = sampling.Decoder(ckpt.model, ckpt.tokenizer, prompt, 1, sampling.SamplingConfig(), generator,
                               capacity=len(prompt) + NEW_TOKENS)
    seconds = time.perf_counter() - start
    decoder.run(NEW_TOKENS)
    peak = peak_rss_mb()
    return {"tokens": len(prompt), "seconds": seconds, "peak_mb": peak, "extra_mb": peak - baseline}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--songs", help="the POP909 folder (NNN.mid)")
    parser.add_argument("--checkpoint", default="pop909", help="model (default: the shipped pop909)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--stepwise", action="store_true", help="also read the 1-song prompt token by token")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    if args.songs is None:
        parser.error("--songs is required: the POP909 folder, e.g. ../shared/data/pop909")
    paths = [str((Path(args.songs) / f"{song}.mid").resolve()) for song in SONGS]
    missing = [p for p in paths if not Path(p).is_file()]
    if missing:
        parser.error(f"not found: {', '.join(missing)}")
    runs = [("1 song", paths[:1], None), ("3 songs", paths, None)]
    if args.stepwise:
        runs.append(("1 song, token by token", paths[:1], 1))
    print(f"{args.checkpoint}, {args.threads} thread(s), prompts of POP909 songs {', '.join(SONGS)}")
    results = {}
    for label, songs, chunk in runs:
        spec = {"checkpoint": args.checkpoint, "songs": songs, "chunk": chunk, "threads": args.threads}
        result = results[label] = run_isolated(__spec__.name, spec)
        print(f"  {label:24s} {result['tokens']:6d} tokens: {result['seconds']:7.2f} s "
              f"({1e6 * result['seconds'] / result['tokens']:7.1f} us/token), peak RSS {result['peak_mb']:7.1f} MiB, "
              f"{result['extra_mb']:6.1f} MiB above baseline")
    one, three = results["1 song"], results["3 songs"]
    print(f"  3 songs / 1 song: peak RSS {three['peak_mb'] / one['peak_mb']:.3f}, above baseline "
          f"{three['extra_mb'] / max(one['extra_mb'], 1e-9):.3f}; prompt tokens {three['tokens'] / one['tokens']:.2f}x")


if __name__ == "__main__":
    main()
