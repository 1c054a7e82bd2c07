"""Fill in the middle for REMI: the markers, the rearranged order, its grammar and the training crops."""

from __future__ import annotations

import numpy as np
import pytest

from data import IGNORE_INDEX
from data.crops import CropDataset
from remi import REMITokenizer
from remi.infill import MARKERS_PER_CROP, arrange, fim_crop, marker_ids, restore_order
from tokenization import BaseTokenizer


@pytest.fixture(scope="module")
def fim():
    return REMITokenizer().with_infill()


@pytest.fixture(scope="module")
def song(fim, chorale_midi) -> list[int]:
    return [i for i in fim.encode(chorale_midi) if i != fim.eos_id]


def test_markers_come_last_and_keep_every_other_id(fim):
    plain = REMITokenizer()
    assert fim.vocab.tokens == plain.vocab.tokens + ["Infill_Hole", "Infill_Fill", "Infill_End"]
    assert "infill" not in plain.config() and fim.config()["infill"] is True
    rebuilt = BaseTokenizer.from_dict(fim.to_dict())
    assert rebuilt.vocab.tokens == fim.vocab.tokens
    with pytest.raises(ValueError, match="no fill-in-the-middle tokens"):
        marker_ids(plain)


def test_arranged_song_is_grammatical_and_restores_to_the_song(fim, song):
    parts = arrange(fim, song, 2, 3)
    starts = fim.bar_starts(song)
    assert parts.prefix == song[:starts[2]] and parts.middle == song[starts[2]:starts[5]]
    assert parts.suffix == song[starts[5]:]
    sequence = parts.sequence(fim)
    state = fim.constraint_state()
    for token in sequence:
        assert state.accepts(token), fim.vocab.token(token)
        assert not state.allowed()[list(marker_ids(fim))].any()  # the sampler never writes a marker
        state.advance(token)
    assert restore_order(sequence, *marker_ids(fim)) == song
    plain, rearranged = fim.decode(song), fim.decode(sequence)
    assert [(n.start, n.pitch, n.end) for n in plain.instruments[0].notes] == \
        [(n.start, n.pitch, n.end) for n in rearranged.instruments[0].notes]


@pytest.mark.parametrize("lead_bars, lead", [(2, 2), (5, 3)])  # a lead reaches back to the song's start at most
def test_a_lead_is_read_after_the_suffix_and_the_order_restores_to_the_song(fim, song, lead_bars, lead):
    parts = arrange(fim, song, 3, 2, lead_bars)
    starts = fim.bar_starts(song)
    assert parts.prefix == song[:starts[3 - lead]] and parts.lead == song[starts[3 - lead]:starts[3]]
    assert parts.before == song[:starts[3]] and parts.middle == song[starts[3]:starts[5]]
    prompt = parts.prompt(fim)
    hole, fill, end = marker_ids(fim)
    assert prompt[prompt.index(fill) + 1:] == parts.lead  # the lead comes right before the middle
    state = fim.constraint_state()
    for token in parts.sequence(fim):
        assert state.accepts(token), fim.vocab.token(token)
        state.advance(token)
    assert restore_order(parts.sequence(fim), hole, fill, end) == song
    at_fill = fim.constraint_state()  # the middle starts where it does in the song
    for token in prompt:
        at_fill.advance(token)
    in_song = fim.constraint_state()
    for token in parts.before:
        in_song.advance(token)
    assert at_fill.next_bar_time() == in_song.next_bar_time()


def test_the_middle_restarts_the_bar_clock_at_the_hole(fim, song):
    parts = arrange(fim, song, 4, 2)
    state = fim.constraint_state()
    for token in parts.prompt(fim):
        state.advance(token)
    before = fim.constraint_state()
    for token in parts.prefix:
        before.advance(token)
    assert state.next_bar_time() == before.next_bar_time()


def test_markers_out_of_place_are_refused(fim, song):
    hole, fill, end = marker_ids(fim)
    state = fim.constraint_state()
    assert not state.accepts(fill) and not state.accepts(end)
    for token in song[:40] + [hole]:
        state.advance(token)
    assert not state.accepts(hole) and not state.accepts(end)
    with pytest.raises(ValueError):
        state.advance(fim.vocab["Beat_0"])  # the suffix starts with a bar line


def test_a_span_beyond_the_song_is_refused(fim, song):
    bars = len(fim.bar_starts(song))
    with pytest.raises(ValueError, match=f"has {bars} bars"):
        arrange(fim, song, bars - 1, 2)


def test_fim_crop_keeps_the_length_and_loses_only_the_suffix_tail(fim, song):
    crop = np.asarray(song[fim.bar_starts(song)[1]:][:200], dtype=np.int64)
    rng = np.random.default_rng(3)
    rearranged = [fim_crop(fim, crop, rng) for _ in range(20)]
    hole = marker_ids(fim)[0]
    assert sum(hole in r for r in rearranged) == 20
    for r in rearranged:
        assert len(r) == len(crop)
        assert restore_order(r.tolist(), *marker_ids(fim)) == crop[:-MARKERS_PER_CROP].tolist()


def test_fim_crop_can_read_a_suffix_as_short_as_generation_reads(fim, song):
    crop = np.asarray(song[fim.bar_starts(song)[1]:][:400], dtype=np.int64)
    rng = np.random.default_rng(4)
    hole, fill, _ = marker_ids(fim)
    suffixes = []
    for _ in range(30):
        r = fim_crop(fim, crop, rng, suffix_tokens=150).tolist()
        assert len(r) == len(crop) and restore_order(r, *marker_ids(fim)) == crop[:-MARKERS_PER_CROP].tolist()
        suffixes.append(r.index(fill) - r.index(hole) - 1)
    assert max(suffixes) <= 150 and len(set(suffixes)) > 1
    free = [fim_crop(fim, crop, np.random.default_rng(seed)).tolist() for seed in range(30)]
    assert max(r.index(fill) - r.index(hole) - 1 for r in free) > 150  # without the cap, longer suffixes


def test_crops_with_fim_never_score_the_two_placed_markers(fim, song):
    data = CropDataset([np.asarray(song)], fim, crop_len=128, transpose=0, fim_rate=1.0, samples_per_piece=8)
    hole, fill, end = marker_ids(fim)
    samples = [data[i] for i in range(len(data))]
    assert sum(hole in inputs.tolist() for inputs, _ in samples) >= 6  # not a crop without a whole bar
    for _, targets in samples:
        assert not np.isin(targets.numpy(), [hole, fill]).any()
    assert any(end in targets.tolist() for _, targets in samples)  # the end of the middle is learnt
    with pytest.raises(ValueError, match="no fill-in-the-middle tokens"):
        CropDataset([np.asarray(song)], REMITokenizer(), crop_len=128, fim_rate=0.5)


def test_crops_reaching_the_end_stay_left_to_right_unless_fim_end_crops(fim, song):
    piece = np.asarray(song + [fim.eos_id])
    hole = marker_ids(fim)[0]

    def crops(fim_end_crops: bool) -> tuple[int, list[bool]]:
        """Crops whose song end token is learnt, and per other crop whether it is rearranged."""
        data = CropDataset([piece], fim, crop_len=128, transpose=0, fim_rate=1.0, end_crops=True, seed=3,
                           samples_per_piece=60, fim_end_crops=fim_end_crops)
        ends, others = 0, []
        for inputs, targets in (data[i] for i in range(len(data))):
            scored = targets[targets != IGNORE_INDEX].tolist()
            if fim.eos_id in scored:
                assert hole not in inputs.tolist() and scored[-1] == fim.eos_id  # after the song's last bar
                ends += 1
            else:
                others.append(hole in inputs.tolist())
        return ends, others

    ends_kept, others_kept = crops(False)
    ends_fim, _ = crops(True)
    assert ends_kept >= 5 and ends_kept > 3 * ends_fim  # a rearranged crop drops the end token
    assert sum(others_kept) >= 0.75 * len(others_kept)  # the other crops are still rearranged


def test_the_tokenizer_contract_gives_the_markers_and_the_arrangement(fim, song):
    assert fim.infill_markers() == marker_ids(fim) == tuple(fim.vocab[t] for t in ("Infill_Hole", "Infill_Fill",
                                                                                    "Infill_End"))
    assert REMITokenizer().infill_markers() is None
    assert fim.arrange(song, 2, 3) == arrange(fim, song, 2, 3)
    with pytest.raises(ValueError, match="not all in the piece"):
        fim.arrange(song, 0, len(fim.bar_starts(song)) + 1)
