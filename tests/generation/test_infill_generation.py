"""Infill in generation: bar ranges, the steer that gives every rewritten bar notes, and a whole job."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from generation.infill import RECALL_LAG, BarsWithNotes, InfillIncomplete, InfillJob, infill_sampling, parse_bar_range
from generation.recall import RecallConfig
from generation.sampling import GenerationResult, SamplingConfig, generate_batch, seeded_generator
from generation.pieces import bar_stop, piece_ids
from remi import REMITokenizer
from training.checkpoint import load_model
from cli_helpers import save_tiny


@pytest.fixture(scope="module")
def fim():
    return REMITokenizer().with_infill()


@pytest.mark.parametrize("text, span", [("9-12", (9, 12)), (" 3 ", (3, 3)), ("1-1", (1, 1))])
def test_bar_ranges(text, span):
    assert parse_bar_range(text) == span


@pytest.mark.parametrize("text", ["", "x", "0-3", "5-2", "3-", "-4", "2-3-4"])
def test_bad_bar_ranges_are_refused(text):
    with pytest.raises(ValueError, match="bar range"):
        parse_bar_range(text)


def test_a_bar_line_waits_for_a_note_and_the_end_for_the_last_bar(fim):
    steer = BarsWithNotes(fim, start=1, bars=2)
    everything = np.ones(fim.vocab_size, dtype=bool)
    bar, beat, pitch = fim.bar_id, fim.vocab["Beat_0"], fim.vocab["Note_Pitch_60"]
    note = [beat, pitch, fim.vocab["Note_Velocity_60"], fim.vocab["Note_Duration_240"]]
    empty_bar = steer([0, bar, beat], everything)
    assert not empty_bar[bar] and not empty_bar[fim.eos_id] and empty_bar[pitch]
    assert not empty_bar[fim.vocab["TimeSig_3/4"]]  # the bars after the range keep their meter
    first_done = steer([0, bar, *note], everything)
    assert first_done[bar] and not first_done[fim.eos_id]
    past = steer([0, bar, *note, bar, *note, bar], everything)
    assert past.all()  # beyond the range: the stop condition cuts there


def test_an_infill_keeps_every_other_bar_and_fills_the_range(fim, chorale_midi, tmp_path):
    model = load_model(save_tiny(tmp_path / "fim_run", fim, max_len=4096), torch.device("cpu")).model
    song = piece_ids(fim, chorale_midi)
    job = InfillJob.of(fim, song, (3, 5))
    results = generate_batch(model, fim, job.prompt, 5000, 2, SamplingConfig(top_p=0.95, temperature=1.0),
                             generator=seeded_generator(0, torch.device("cpu")), progress=False,
                             stop=bar_stop(fim, len(job.prompt), job.bars), steer=job.steer())
    starts = fim.bar_starts(song)
    for result in results:
        restored = job.restore(result)
        tokens = restored.tokens
        assert tokens[:starts[2]] == song[:starts[2]]
        assert tokens[-1] == fim.eos_id and tokens[-1 - len(song[starts[5]:]):-1] == song[starts[5]:]
        middle = job.middle(restored)
        bars = np.split(np.asarray(middle), fim.bar_starts(middle)[1:])
        assert len(bars) == 3 and middle[0] == fim.bar_id
        pitches = fim.vocab.by_type("Note_Pitch")
        assert all(np.isin(bar, pitches).any() for bar in bars)
        state = fim.constraint_state()
        for token in tokens:
            assert state.accepts(token), fim.vocab.token(token)
            state.advance(token)


def test_an_infill_with_a_lead_keeps_the_lead_bars_and_writes_only_the_range(fim, chorale_midi, tmp_path):
    model = load_model(save_tiny(tmp_path / "fim_run", fim, max_len=4096), torch.device("cpu")).model
    song = piece_ids(fim, chorale_midi)
    job = InfillJob.of(fim, song, (4, 5), lead_bars=2)
    starts = fim.bar_starts(song)
    assert job.parts.lead == song[starts[1]:starts[3]] and job.prompt[-len(job.parts.lead):] == job.parts.lead
    result = generate_batch(model, fim, job.prompt, 5000, 1, SamplingConfig(top_p=0.95, temperature=1.0),
                            generator=seeded_generator(1, torch.device("cpu")), progress=False,
                            stop=bar_stop(fim, len(job.prompt), job.bars), steer=job.steer())[0]
    restored = job.restore(result)
    assert restored.tokens[:starts[3]] == song[:starts[3]] and restored.prompt_len == starts[3]
    assert restored.tokens[-1 - len(song[starts[5]:]):-1] == song[starts[5]:]
    middle = job.middle(restored)
    assert middle[0] == fim.bar_id and len(fim.bar_starts(middle)) == 2  # the lead's last bar is left as it was
    assert middle == result.tokens[len(job.prompt):len(job.prompt) + len(middle)]


def test_an_infill_range_beyond_the_song_is_refused(fim, chorale_midi):
    song = piece_ids(fim, chorale_midi)
    bars = len(fim.bar_starts(song))
    with pytest.raises(ValueError, match=f"the song has {bars} bars"):
        InfillJob.of(fim, song, (bars, bars + 2))


def test_an_infill_whose_budget_ran_out_is_an_error_not_a_shorter_song(fim, chorale_midi):
    song = piece_ids(fim, chorale_midi)
    job = InfillJob.of(fim, song, (2, 4))
    bar = fim.bar_id
    one_bar = [bar, fim.vocab["Beat_0"]]  # only one of the three bars written when the budget ended
    cut_short = GenerationResult(tokens=job.prompt + one_bar, prompt_len=len(job.prompt), stopped_at_eos=False,
                                 seconds=0.0, noise_length=0)
    with pytest.raises(InfillIncomplete, match="after 1 of the 3 bars"):
        job.restore(cut_short)


@pytest.mark.parametrize("budget", [1, 60, 200, None])
def test_the_model_reads_the_first_whole_bars_of_the_suffix_within_its_budget(fim, chorale_midi, budget):
    from remi.infill import marker_ids

    song = piece_ids(fim, chorale_midi)
    job = InfillJob.of(fim, song, (2, 3), suffix_tokens=budget)
    hole, fill, _ = marker_ids(fim)
    prompt = job.prompt
    read = prompt[prompt.index(hole) + 1:prompt.index(fill)]
    full = job.parts.suffix
    assert full[:len(read)] == read and prompt[:prompt.index(hole)] == job.parts.prefix
    ends = fim.bar_starts(full)[1:] + [len(full)]
    assert len(read) in ends  # whole bars only
    if budget is None:
        assert read == full
    else:
        assert len(read) == max([end for end in ends if end <= budget], default=ends[0])


def test_an_infill_recalls_from_nearer_than_a_piece():
    piece = SamplingConfig(recall=RecallConfig((0.5,) * 6, min_lag=512))
    assert infill_sampling(piece).recall.min_lag == RECALL_LAG < 512
    assert infill_sampling(piece).recall.weights == piece.recall.weights and piece.recall.min_lag == 512
    near = SamplingConfig(recall=RecallConfig((0.5,) * 6, min_lag=16))
    assert infill_sampling(near).recall.min_lag == 16  # never farther than the model's own lag
    assert infill_sampling(SamplingConfig()).recall is None
