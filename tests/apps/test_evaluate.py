"""spe-evaluate on tiny random checkpoints and small corpora: nll, groove, pe, templates, bad input."""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import miditoolkit
import numpy as np
import pytest
import torch

from training.checkpoint import save_checkpoint
from training.config import RunConfig
from evaluation.groove import score_continuation
from generation.pieces import next_bar_time
from groove.metrics import continuation_similarity
from evaluation.pe import monotonicity, translation_invariance
from apps.evaluate import main
from data import build_groove_corpus, build_midi_folder_corpus
from groove import GrooveTokenizer
from groove.trio import build_trio_corpus
from model import MusicPerformer
from remi import REMITokenizer
from cli_helpers import exit_status

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CROP = 16  # training crop length of the tiny checkpoints (the NLL curve goes to 2 x CROP)



def save_tiny(run_dir: Path, tokenizer, pe: str = "sine_spe", corpus: Path | None = None,
              max_len: int = 256) -> Path:
    """A random-weight 2-layer model saved as a checkpoint of run_dir; returns run_dir."""
    model = {"n_layer": 2, "n_head": 2, "d_model": 16, "d_ff": 32, "dropout": 0.0, "pe": pe,
             "num_realizations": 8, "num_sines": 2, "kernel_size": 8, "feature_dims": 16,
             "attention": "torch", "max_len": max_len}
    data = {"crop_len": CROP, "root": str(corpus or "corpus/none")}
    if isinstance(tokenizer, GrooveTokenizer):
        data.update(format="groove", kind="trio")
    config = RunConfig.from_dict({"model": model, "data": data})
    torch.manual_seed(0)
    save_checkpoint(run_dir, model=MusicPerformer(config.model_config(tokenizer.vocab_size)),
                    tokenizer=tokenizer, config=config, step=1)
    return run_dir


@pytest.fixture(scope="module")
def remi_corpus(midi_files, tmp_path_factory) -> Path:
    """The four music21 pieces as a REMI corpus (all of them land in the train split)."""
    folder = tmp_path_factory.mktemp("remi_midi")
    for path in midi_files.values():
        shutil.copy(path, folder / path.name)
    root = tmp_path_factory.mktemp("remi_corpus")
    build_midi_folder_corpus(folder, root, REMITokenizer(), progress=False)
    return root


@pytest.fixture(scope="module")
def groove_corpus(midi_files, tmp_path_factory) -> Path:
    """The four pieces in a Groove2Groove-style test/ folder, as a groove corpus."""
    folder = tmp_path_factory.mktemp("g2g")
    (folder / "test").mkdir()
    for path in midi_files.values():
        shutil.copy(path, folder / "test" / path.name)
    root = tmp_path_factory.mktemp("groove_corpus")
    build_groove_corpus(folder, root, progress=False)
    return root


@pytest.fixture(scope="module")
def runs(tmp_path_factory, remi_corpus) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("runs")
    remi = REMITokenizer()
    return {pe: save_tiny(base / pe, remi, pe, remi_corpus, max_len=20 if pe == "learned_ape" else 256)
            for pe in ("sine_spe", "conv_spe", "none", "learned_ape")}


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("spe-evaluate: error: ")
    return err[0]


# ----------------------------------------------------------------------------------- nll
def test_nll_of_a_random_model_is_about_log_vocab(runs, remi_corpus, tmp_path, capsys):
    out = tmp_path / "nll"
    assert main(["nll", "--checkpoint", str(runs["sine_spe"]), "--checkpoint", str(runs["conv_spe"]),
                 "--split", "train", "--out", str(out), "--no-progress"]) == 0
    assert (out / "nll.png").read_bytes()[:8] == PNG_MAGIC
    rows = read_csv(out / "nll.csv")
    assert {r["model"] for r in rows} == {"sine_spe", "conv_spe"}
    sine = [r for r in rows if r["model"] == "sine_spe"]
    assert [int(r["position"]) for r in sine] == list(range(2 * CROP))  # default: twice the crop length
    counts = [int(r["count"]) for r in sine]
    assert counts[0] == 4 and all(a >= b for a, b in zip(counts, counts[1:]))  # 4 pieces, all long enough
    vocab = REMITokenizer().vocab_size
    means = np.array([float(r["mean_nll"]) for r in sine])
    assert np.all(np.abs(means - math.log(vocab)) < 0.5)  # near-uniform predictions of a random model
    summary = json.loads((out / "nll_summary.json").read_text())
    assert [s["model"] for s in summary] == ["sine_spe", "conv_spe"]
    for s in summary:
        assert s["trained_len"] == CROP and s["tokens_within"] == 4 * CROP
        assert abs(s["nll_within"] - math.log(vocab)) < 0.3 and abs(s["ratio"] - 1.0) < 0.1
        assert s["nll_0_1x"] == pytest.approx(s["nll_within"]) and s["nll_1_2x"] == pytest.approx(s["nll_beyond"])
        assert s["nll_2_4x"] is None  # the curve stops at 2x the crop
    table = (out / "nll_summary.md").read_text()
    assert table in capsys.readouterr().out and "beyond / within" in table


def test_nll_full_length_averages_the_same_pieces_at_every_position(runs, remi_corpus, tmp_path, capsys):
    from data import load_corpus

    lengths = sorted(len(p) for p in load_corpus(remi_corpus).pieces("train"))  # 4 pieces
    max_len = lengths[1] - 1  # the shortest piece cannot reach it, the others can
    reaching = sum(n >= max_len + 1 for n in lengths)
    assert 0 < reaching < 4
    out = tmp_path / "nll"
    assert main(["nll", "--checkpoint", str(runs["sine_spe"]), "--split", "train", "--max-len", str(max_len),
                 "--full-length", "--out", str(out), "--no-progress"]) == 0
    assert [int(r["count"]) for r in read_csv(out / "nll.csv")] == [reaching] * max_len
    assert main(["nll", "--checkpoint", str(runs["sine_spe"]), "--split", "train", "--max-len",
                 str(lengths[-1]), "--full-length", "--out", str(out), "--no-progress"]) == 2
    assert f"of at least {lengths[-1] + 1} tokens" in capsys.readouterr().err


def test_nll_compares_a_model_whose_vocabulary_only_adds_the_infill_markers(runs, remi_corpus, tmp_path, capsys):
    fim = save_tiny(tmp_path / "fim", REMITokenizer(infill=True), corpus=remi_corpus)
    out = tmp_path / "nll"
    assert main(["nll", "--checkpoint", str(runs["sine_spe"]), "--checkpoint", str(fim), "--split", "train",
                 "--out", str(out), "--no-progress"]) == 0
    assert {r["model"] for r in read_csv(out / "nll.csv")} == {"sine_spe", "fim"}
    assert main(["nll", "--checkpoint", str(runs["conv_spe"]), "--checkpoint", str(fim), "--checkpoint",
                 str(runs["sine_spe"]), "--split", "train", "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["nll", "--checkpoint", str(fim), "--checkpoint", str(runs["sine_spe"]), "--split", "train",
                 "--out", str(tmp_path / "refused"), "--no-progress"]) == 2  # the plain model lacks the markers
    assert "sine_spe uses another vocabulary than fim" in one_error_line(capsys)
    assert not (tmp_path / "refused").exists()


def test_nll_learned_ape_stops_at_its_table(runs, tmp_path):
    out = tmp_path / "nll"
    assert main(["nll", "--checkpoint", str(runs["learned_ape"]), "--split", "train", "--max-len", "24",
                 "--out", str(out), "--no-progress"]) == 0
    counts = [int(r["count"]) for r in read_csv(out / "nll.csv")]
    assert len(counts) == 24 and all(c > 0 for c in counts[:20]) and counts[20:] == [0] * 4


# -------------------------------------------------------------------------------- groove
def test_groove_similarity_of_continuations(groove_corpus, tmp_path):
    run = save_tiny(tmp_path / "groove_run", GrooveTokenizer(), corpus=groove_corpus)
    out = tmp_path / "groove"
    assert main(["groove", "--checkpoint", str(run), "--out", str(out), "--tokens", "120",
                 "--max-pieces", "2", "--hold-bars", "2", "--full-length", "--no-progress"]) == 0
    rows = read_csv(out / "groove_similarity.csv")
    assert len(rows) == 2 * 2 * 2 * 4  # (the pieces' own continuation, the model) x pieces x metrics x quarters
    assert [r["model"] for r in rows[::16]] == ["real continuation", "groove_run"]
    real = [r for r in rows if r["model"] == "real continuation"]
    assert sum(float(r["similarity"]) for r in real) / len(real) > 0.5
    assert {r["metric"] for r in rows} == {"onset_duration", "time_pitch"}
    assert all(0.0 <= float(r["similarity"]) <= 1.0 + 1e-9 for r in rows)
    assert (out / "groove_similarity.png").read_bytes()[:8] == PNG_MAGIC
    table = (out / "groove_similarity.md").read_text()  # --full-length: every continuation runs to --tokens
    assert "| groove_run | 2 | 2 (100%) |" in table and "notes held over 2 bars" in table


def test_groove_continues_a_folder_of_real_band_midi(groove_corpus, tmp_path):
    """--real DIR: files with the three roles are continued, the others skipped with their reason."""
    band = tmp_path / "band"
    band.mkdir()
    build_trio_corpus(tmp_path / "trio", n_pieces=2, progress=False)
    for i, path in enumerate(sorted((tmp_path / "trio").rglob("*.mid"))[:2]):
        shutil.copy(path, band / f"song{i}.mid")
    midi = miditoolkit.MidiFile(str(band / "song0.mid"))
    midi.instruments = [inst for inst in midi.instruments if not inst.is_drum]
    midi.dump(str(band / "no_drums.mid"))
    (band / "broken.mid").write_text("not MIDI")
    run = save_tiny(tmp_path / "groove_run", GrooveTokenizer(), corpus=groove_corpus)
    out = tmp_path / "real"
    assert main(["groove", "--checkpoint", str(run), "--out", str(out), "--tokens", "400", "--real", str(band),
                 "--no-progress"]) == 0
    rows = read_csv(out / "groove.csv")
    assert list(rows[0]) == ["model", "metric", "quarter", "mean", "std", "pieces"]
    assert len(rows) == 2 * 2 * 4 and {r["pieces"] for r in rows} == {"2"}
    assert {r["model"] for r in rows} == {"real continuation", "groove_run"}
    pieces = {r["piece"] for r in read_csv(out / "groove_similarity.csv")}
    assert pieces == {"song0.mid", "song1.mid"}
    text = (out / "groove_similarity.md").read_text()
    assert "no_drums.mid: no drums track" in text and "broken.mid" in text
    roles = tmp_path / "roles"
    assert main(["groove", "--checkpoint", str(run), "--out", str(roles), "--tokens", "400", "--real", str(band),
                 "--no-progress", "--roles", "--max-pieces", "1"]) == 0
    metrics = {r["metric"] for r in read_csv(roles / "groove.csv")}
    assert metrics == {f"{m}{r}" for m in ("onset_duration", "time_pitch")
                       for r in ("", ":bass", ":drums", ":accompaniment")}


def test_full_length_continuations_never_end_early(groove_corpus, tmp_path):
    from generation.sampling import SamplingConfig, generate, without_end
    from training.checkpoint import load_model

    ckpt = load_model(save_tiny(tmp_path / "groove_run", GrooveTokenizer(), corpus=groove_corpus))
    tokenizer = ckpt.tokenizer
    steer = without_end(tokenizer.eos_id)
    allowed = np.ones(tokenizer.vocab_size, dtype=bool)
    assert not steer([], allowed)[tokenizer.eos_id] and allowed.all()  # a copy: the mask given is kept
    sampling = SamplingConfig(top_p=1.0, temperature=1.0)
    for seed in range(3):
        generator = torch.Generator().manual_seed(seed)
        result = generate(ckpt.model, tokenizer, [tokenizer.start_id], 60, sampling, generator, steer=steer)
        assert not result.stopped_at_eos and tokenizer.eos_id not in result.tokens


def test_a_true_continuation_is_similar_to_its_piece(groove_corpus):
    """The scoring itself: a piece's own continuation is similar to the piece."""
    from data import load_corpus

    corpus = load_corpus(groove_corpus)
    tokenizer = corpus.tokenizer
    ids = [int(i) for i in corpus.pieces("test")[2]]
    prompt_len = tokenizer.bar_starts(ids)[2]
    scores = score_continuation(tokenizer, ids, prompt_len, ids)
    assert set(scores) == {"onset_duration", "time_pitch"}
    assert all(s.shape == (4,) for s in scores.values())
    assert scores["onset_duration"].min() > 0.5 and scores["time_pitch"].min() > 0.5
    by_role = score_continuation(tokenizer, ids, prompt_len, ids, roles=True)
    assert set(by_role) == {"onset_duration", "time_pitch"} | {f"{m}:{r}" for m in ("onset_duration", "time_pitch")
                                                                 for r in ("bass", "drums", "accompaniment")}
    assert np.array_equal(by_role["time_pitch"], scores["time_pitch"])
    music = tokenizer.decode(ids)
    start = int(next_bar_time(tokenizer, ids[:prompt_len]) * music.resolution)
    assert np.allclose(by_role["time_pitch:bass"], continuation_similarity(music, music, "time_pitch", ["bass"], start))
    assert not np.allclose(by_role["time_pitch:bass"], by_role["time_pitch:accompaniment"])


# ------------------------------------------------------------------------------------ pe
def test_pe_property_metrics_on_known_matrices():
    n = 12
    lags = torch.arange(n)[:, None] - torch.arange(n)[None, :]  # (N, N): m - n
    decaying = torch.exp(-lags.double().abs()).tril()  # Toeplitz, nearer is larger
    assert translation_invariance(decaying) == pytest.approx(0.0, abs=1e-12)
    assert monotonicity(decaying) == 0.0
    growing = torch.exp(lags.double().abs() / n).tril()  # farther is larger: every pair inverted
    assert monotonicity(growing) == 1.0
    noise = torch.rand(n, n, generator=torch.Generator().manual_seed(0), dtype=torch.float64).tril()
    assert 0.5 < translation_invariance(noise) < 1.5 and 0.3 < monotonicity(noise) < 0.7


def test_pe_writes_properties_per_head(runs, tmp_path, capsys):
    out = tmp_path / "pe"
    assert main(["pe", "--checkpoint", str(runs["sine_spe"]), "--checkpoint", str(runs["none"]),
                 "--length", "24", "--draws", "2", "--out", str(out), "--no-progress"]) == 0
    rows = read_csv(out / "pe_properties.csv")
    assert [(r["model"], r["head"]) for r in rows] == [("sine_spe", "0"), ("sine_spe", "1"),
                                                       ("none", "0"), ("none", "1")]
    for row in rows:
        assert 0.0 <= float(row["monotonicity"]) <= 1.0 and float(row["translation_invariance"]) >= 0.0
    # without positional encoding every key of a repeated token looks the same: nothing varies
    for row in rows[2:]:
        assert float(row["translation_invariance"]) == 0.0 and float(row["monotonicity"]) == 0.0
    assert "translation invariance" in capsys.readouterr().out


# ----------------------------------------------------------------------------- templates
def test_templates_write_one_png_per_layer(runs, tmp_path):
    out = tmp_path / "templates"
    assert main(["templates", "--checkpoint", str(runs["conv_spe"]), "--layers", "0", "1", "--length", "16",
                 "--label", "conv", "--out", str(out)]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == ["templates_conv_layer0.png", "templates_conv_layer1.png"]
    assert all((out / n).read_bytes()[:8] == PNG_MAGIC for n in names)


def test_gated_templates_apply_the_gate(runs):
    from training.checkpoint import load_checkpoint
    from evaluation.pe import gated_templates

    model = load_checkpoint(runs["sine_spe"]).model
    raw = model.spe.expected_template(8).double()  # (H, D, L, L)
    delta = model.gates()[1].double()[:, :, None, None]
    assert torch.allclose(gated_templates(model, 8, 1), (1 - delta) * raw + delta)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("case", ["templates_without_spe", "groove_with_remi", "missing_checkpoint",
                                  "empty_heldout_split", "missing_corpus", "bad_layer", "no_command"])
def test_bad_input_fails_with_one_line_and_no_output(case, runs, remi_corpus, tmp_path, capsys):
    out = tmp_path / "out"
    args = {
        "templates_without_spe": ["templates", "--checkpoint", str(runs["none"])],
        "groove_with_remi": ["groove", "--checkpoint", str(runs["sine_spe"])],
        "missing_checkpoint": ["pe", "--checkpoint", str(tmp_path / "nowhere")],
        "empty_heldout_split": ["nll", "--checkpoint", str(runs["sine_spe"])],  # all 4 pieces are train
        "missing_corpus": ["nll", "--checkpoint", str(runs["sine_spe"]), "--corpus", str(tmp_path / "nope")],
        "bad_layer": ["pe", "--checkpoint", str(runs["sine_spe"]), "--layer", "5"],
        "no_command": [],
    }[case]
    if args:
        args += ["--out", str(out), "--no-progress"]
    assert exit_status(main, args) != 0
    message = one_error_line(capsys)
    expected = {"templates_without_spe": "pe=none", "groove_with_remi": "REMITokenizer",
                "missing_checkpoint": "not found", "empty_heldout_split": "no pieces",
                "missing_corpus": "corpus not found", "bad_layer": "--layer", "no_command": "required"}[case]
    assert expected in message
    assert not out.exists() or not any(out.iterdir())


SHARED_POP909 = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "pop909"


@pytest.mark.skipif(not (SHARED_POP909.parent / "pop909_structure").is_dir(),
                    reason=f"needs the shared POP909 songs and their phrase labels in {SHARED_POP909.parent} "
                           "(absent here)")
def test_form_measures_labelled_held_out_songs_and_pieces_with_their_forms(tmp_path):
    from data.build import build_corpus
    from cli_helpers import save_tiny

    corpus = tmp_path / "corpus"
    build_corpus("pop909", corpus, str(SHARED_POP909), max_pieces=40)
    data = {"kind": "pop909", "root": str(corpus), "source": str(SHARED_POP909), "crop_len": 32}
    run = save_tiny(tmp_path / "run", REMITokenizer(time_signatures=True), max_len=512, data=data)
    out, figures = tmp_path / "out", tmp_path / "form.json"
    assert main(["form", "--checkpoint", str(run), "--songs", "2", "--max-len", "256", "--pieces", "1",
                 "--tokens", "256", "--form-pieces", "1", "--threads", "1", "--no-progress",
                 "--out", str(out), "--json", str(figures)]) == 0
    measured = json.loads(figures.read_text())
    placed = measured["placement"]
    assert placed["songs"] >= placed["with_labels"] >= placed["on_our_bars"] >= 2
    assert measured["real_same_n"] == 2 and measured["form_same_n"] == 1  # 2 songs measured, 1 piece
    assert 0.0 <= measured["real_different"] < measured["real_same"] <= 1.0  # real songs restate
    assert measured["form_bars"] > 8  # the piece has its song's form: tens of bars, not the 256-token cap
    assert (out / "form.md").is_file()
    assert (out / "form_ssm.png").read_bytes()[:8] == PNG_MAGIC
    assert any((out / "generated").iterdir())
