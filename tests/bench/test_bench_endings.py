"""bench.endings on a tiny random model: p(end) along a held-out song, and the table."""

from __future__ import annotations

import numpy as np
import torch

from bench import endings
from cli_helpers import save_tiny, song_corpus
from data.corpus import Piece, write_corpus
from evaluation.form import token_nll
from generation.pieces import piece_ids
from remi import REMITokenizer
from training.checkpoint import load_model


def test_end_probability_is_the_model_probability_of_the_end_token(chorale_midi, tmp_path):
    torch.set_num_threads(1)
    tokenizer = REMITokenizer()
    ids = piece_ids(tokenizer, chorale_midi) + [tokenizer.eos_id]
    model = load_model(save_tiny(tmp_path / "tiny", tokenizer, max_len=4096)).model.eval()
    p = endings.end_probability(model, ids, tokenizer.eos_id, seed=3)
    assert p.shape == (len(ids) - 1,) and ((p > 0) & (p < 1)).all()
    with torch.no_grad():
        nll = token_nll(model, ids, seed=3)
    assert np.isclose(p[-1], np.exp(-nll[-1]), rtol=1e-4)  # where the end token really follows
    song = endings.song_ending(model, ids, tokenizer.eos_id, tokenizer.vocab["Bar_None"], seed=3)
    assert np.isclose(song.at_end, p[-1]) and np.isclose(song.hazard, p[:-1].sum())
    bars = [i for i, t in enumerate(ids[1:]) if t == tokenizer.vocab["Bar_None"]]
    assert len(bars) >= endings.LAST_BARS
    assert np.isclose(song.last_bars, p[bars[-endings.LAST_BARS:]].mean())
    rest = bars[:-endings.LAST_BARS]
    assert np.isclose(song.other_bars, p[rest].mean()) if rest else np.isnan(song.other_bars)


def test_main_writes_the_table(chorale_midi, tmp_path):
    torch.set_num_threads(1)
    tokenizer = REMITokenizer()
    song = np.asarray(piece_ids(tokenizer, chorale_midi) + [tokenizer.eos_id], dtype=np.int32)
    corpus = tmp_path / "corpus"
    write_corpus(corpus, tokenizer, {"test": [Piece("a", song), Piece("b", song[:-1])]}, [], "test", {})
    run = save_tiny(tmp_path / "tiny", tokenizer, max_len=4096)
    out = tmp_path / "out"
    assert endings.main(["--checkpoint", str(run), "--corpus", str(corpus), "--threads", "1", "--out", str(out)]) == 0
    text = (out / "endings.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith(f"| {run} |"))
    assert row.split("|")[2].strip() == "1"  # the song without its end token is left out


def test_the_fitted_bias_is_the_likelihoods_best():
    # each song: p(end) 0.001 at 99 positions, then 1e-4 at its true end; the end decisions' likelihood
    # log(k p_end) - k * 0.099 (small p) is best at odds k = 1 / 0.099
    songs = [np.r_[np.full(99, 0.001), 1e-4]] * 3
    bias = endings.fit_end_bias(songs)
    assert abs(bias - np.log(1 / 0.099)) <= 0.05
    assert np.allclose(endings.biased(songs[0], 0.0), songs[0])
    assert endings.end_log_likelihood(songs, bias) > endings.end_log_likelihood(songs, 0.0)


def test_fit_writes_the_bias_into_the_checkpoint(chorale_midi, tmp_path):
    torch.set_num_threads(1)
    tokenizer = REMITokenizer()
    corpus = song_corpus(tmp_path / "corpus", tokenizer, chorale_midi, ("valid", "test"))
    run = save_tiny(tmp_path / "tiny", tokenizer, max_len=4096)
    out = tmp_path / "out"
    assert endings.main(["--checkpoint", str(run), "--corpus", str(corpus), "--fit", "--write", "--threads", "1",
                         "--out", str(out)]) == 0
    bias = load_model(run).config.generate.end_bias
    assert bias in endings.BIASES and f"{bias:+.2f}" in (out / "end_bias.md").read_text()


def test_pieces_are_compared_with_the_songs_per_bar(chorale_midi, tmp_path):
    torch.set_num_threads(1)
    tokenizer = REMITokenizer()
    corpus = song_corpus(tmp_path / "corpus", tokenizer, chorale_midi)
    pieces = tmp_path / "pieces" / "one"
    pieces.mkdir(parents=True)
    (pieces / "x.mid").write_bytes(chorale_midi.read_bytes())
    run = save_tiny(tmp_path / "tiny", tokenizer, max_len=4096)
    out = tmp_path / "out"
    assert endings.main(["--checkpoint", str(run), "--corpus", str(corpus), "--pieces", str(tmp_path / "pieces"),
                         "--threads", "1", "--out", str(out)]) == 0
    rows = [line.split("|") for line in (out / "end_per_bar.md").read_text().splitlines() if line.startswith("| ")]
    values = {row[1].strip(): float(row[3]) for row in rows[1:]}
    assert values.keys() == {str(tmp_path / "pieces"), "test songs"}
    # the same song both ways: as a file (read back, its end token dropped) and from the corpus
    ids = piece_ids(tokenizer, chorale_midi)
    model = load_model(run).model.eval()
    expected = endings.end_per_bar(model, ids, tokenizer.eos_id, 0.0, len(tokenizer.bar_starts(ids)), 0)
    assert np.isclose(values["test songs"], expected, atol=1e-4)
