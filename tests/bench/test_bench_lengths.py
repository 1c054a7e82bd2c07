"""bench.lengths: the sampler's End probability read back along a piece, the law of lengths, the fit."""

from __future__ import annotations

import numpy as np
import torch

from bench import lengths
from cli_helpers import save_tiny, song_corpus
from evaluation.form import teacher_forced_logits
from generation.request import GenerationRequest
from remi import REMITokenizer
from training.checkpoint import load_model


def test_the_hazard_is_the_samplers_probability_of_the_end(tmp_path):
    torch.set_num_threads(1)
    tokenizer = REMITokenizer()
    ckpt = load_model(save_tiny(tmp_path / "tiny", tokenizer, max_len=1024))
    ckpt.model.eval()
    request = GenerationRequest(tokens=120, seed=4, end=False, temperature=1.3, nucleus="type")
    result = request.run(ckpt)[0]
    assert tokenizer.eos_id not in result.tokens
    plan = GenerationRequest(tokens=120, seed=4, temperature=1.3, nucleus="type").plan(ckpt, request.check())
    assert plan.sampling.recall is None and plan.sampling.nucleus == "type"
    piece = lengths.sampler_hazard(ckpt, plan.sampling, plan.steer, result.tokens, result.prompt_len, seed=2)
    assert len(piece.bars) > 0 and piece.hazard.shape == (len(piece.bars), len(lengths.BIASES))
    assert piece.full_bars == len(tokenizer.bar_starts(result.tokens))
    # recompute at the positions where the grammar allows the end: End is a type of its own, so the
    # type nucleus leaves it the tempered softmax's share over the allowed tokens
    logits = teacher_forced_logits(ckpt.model, result.tokens, 2).double()
    grammar = tokenizer.constraint_state(None)
    expected = []
    for i, token in enumerate(result.tokens[:-1]):
        grammar.advance(token)
        allowed = plan.steer(result.tokens[:i + 1], np.asarray(grammar.allowed(), dtype=bool))  # the opening
        if i + 1 < result.prompt_len or not allowed[tokenizer.eos_id]:
            continue
        row = logits[i].clone()
        row[tokenizer.eos_id] += 1.0  # the grid's bias +1
        row = (row / 1.3).masked_fill(~torch.from_numpy(allowed), float("-inf"))
        expected.append(float(torch.softmax(row, dim=-1)[tokenizer.eos_id]))
    k = int(np.flatnonzero(lengths.BIASES == 1.0)[0])
    assert np.allclose(piece.hazard[:, k], expected, rtol=1e-6)
    assert (np.diff(piece.hazard, axis=1) >= -1e-12).all()  # a larger bias never lowers p(end)


def constant_piece(p_end: float, bars: int = 100) -> lengths.PieceHazard:
    """A piece with one chance to end per bar, at p_end without bias, on the grid's biases."""
    odds = np.exp(lengths.BIASES)[None]  # (1, K)
    base = np.full((bars, 1), p_end)
    return lengths.PieceHazard(bars=np.arange(1, bars + 1), hazard=base * odds / (1 - base + base * odds),
                               full_bars=bars)


def test_the_law_of_lengths():
    piece = constant_piece(0.01)
    for bias, ramp in ((-4.0, 0.0), (0.0, 0.0), (1.0, 0.05), (6.0, 0.0)):
        schedule = lengths.Schedule(bias, ramp)
        h = lengths.scheduled_hazard(piece, schedule)
        k = np.clip(np.rint((bias + ramp * piece.bars + 4.0) / 0.05).astype(int), 0, len(lengths.BIASES) - 1)
        assert np.allclose(h, piece.hazard[np.arange(100), k])
        law = lengths.length_law([piece], schedule, 150)
        assert np.isclose(law.sum(), 1.0)
        assert np.isclose(law[100], np.prod(1 - h) + h[-1] * np.prod(1 - h[:-1]))  # ends at the last bar, or capped
        assert np.allclose(law[1:100], h[:-1] * np.concatenate([[1.0], np.cumprod(1 - h[:-2])]))


def test_the_fit_finds_the_lengths_law():
    piece = constant_piece(0.01)
    # songs of 20 to 40 bars, evenly: a bias alone puts a geometric law on them; the ramp, whose hazard
    # grows with the bars, fits them better and ends fewer pieces in the first bars
    songs = np.arange(20, 41)
    alone = lengths.fit_schedule([piece], songs, 150, ramp=False)
    ramped = lengths.fit_schedule([piece], songs, 150, ramp=True)
    assert alone.ramp == 0.0 and ramped.ramp > 0.0
    laws = [lengths.length_law([piece], s, 150) for s in (alone, ramped)]
    scores = [lengths.length_log_likelihood(law, songs) for law in laws]
    assert scores[1] > scores[0]
    assert laws[1][:10].sum() < laws[0][:10].sum()
    assert 20 <= lengths.quantile(laws[1], 0.5) <= 40


def test_main_fits_and_writes_the_bias(chorale_midi, tmp_path):
    torch.set_num_threads(1)
    tokenizer = REMITokenizer()
    corpus = song_corpus(tmp_path / "corpus", tokenizer, chorale_midi, ("valid", "test"))
    run = save_tiny(tmp_path / "tiny", tokenizer, max_len=1024)
    out = tmp_path / "out"
    assert lengths.main(["--checkpoint", str(run), "--corpus", str(corpus), "--tokens", "150", "--seeds", "1",
                         "--pieces", "2", "--out", str(out), "--ramp", "--write",
                         "--save", str(tmp_path / "h.npz")]) == 0
    text = (out / "lengths.md").read_text()
    generate = load_model(run).config.generate
    assert generate.end_bias in lengths.BIASES and generate.end_ramp in lengths.RAMPS
    assert f"**{lengths.Schedule(generate.end_bias, generate.end_ramp)}**" in text
    assert "| valid songs (1) |" in text and (out / "lengths.png").stat().st_size > 0
    saved = lengths.load_hazards(tmp_path / "h.npz")
    assert len(saved) == 2
    assert lengths.main(["--checkpoint", str(run), "--corpus", str(corpus), "--out", str(out), "--reuse",
                         str(tmp_path / "h.npz"), "--ramp"]) == 0
    fitted = [line for line in text.splitlines() if line.startswith("| pieces, fitted")]
    again = [line for line in (out / "lengths.md").read_text().splitlines() if line.startswith("| pieces, fitted")]
    assert fitted == again  # the same pieces, the same fit
