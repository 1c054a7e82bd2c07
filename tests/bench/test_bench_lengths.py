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


def test_the_law_of_lengths_and_the_fit():
    k = len(lengths.BIASES)
    odds = np.exp(lengths.BIASES)[None]  # (1, K)
    base = np.full((100, 1), 0.01)
    hazard = base * odds / (1 - base + base * odds)  # (100, K): one chance to end per bar
    piece = lengths.PieceHazard(bars=np.arange(1, 101), hazard=hazard, full_bars=100)
    for index in (0, k // 2, k - 1):
        law = lengths.length_law([piece], index, 150)
        assert np.isclose(law.sum(), 1.0)
        assert np.isclose(law[100], np.prod(1 - hazard[:, index]) + hazard[-1, index] * np.prod(1 - hazard[:-1, index]))
    # a constant hazard h per bar has its median at log(2) / h bars: 30 bars need h = 0.0231
    index = lengths.fit_bias([piece], 30, 150)
    assert abs(hazard[0, index] - (1 - 0.5 ** (1 / 30))) < 0.002
    assert lengths.quantile(lengths.length_law([piece], index, 150), 0.5) in (29, 30, 31)


def test_main_fits_and_writes_the_bias(chorale_midi, tmp_path):
    torch.set_num_threads(1)
    tokenizer = REMITokenizer()
    corpus = song_corpus(tmp_path / "corpus", tokenizer, chorale_midi, ("valid", "test"))
    run = save_tiny(tmp_path / "tiny", tokenizer, max_len=1024)
    out = tmp_path / "out"
    assert lengths.main(["--checkpoint", str(run), "--corpus", str(corpus), "--tokens", "150", "--seeds", "1",
                         "--pieces", "2", "--out", str(out), "--write"]) == 0
    text = (out / "lengths.md").read_text()
    bias = load_model(run).config.generate.end_bias
    assert bias in lengths.BIASES and f"**{bias:+g}**" in text
    assert "| valid songs (1) |" in text and (out / "lengths.png").stat().st_size > 0
