import numpy as np
import pytest
from groove_helpers import make_music

from groove.metrics import (
    continuation_similarity,
    onset_duration_profile,
    split_by_onset,
    style_similarity,
    time_pitch_profile,
)


def _nonzero(hist):
    return {tuple(int(i) for i in idx): float(hist[tuple(idx)]) for idx in np.argwhere(hist)}


def test_fifth_one_beat_later():
    music = make_music({"piano": [(0, 12, 60), (12, 24, 67)]})
    tp = time_pitch_profile(music)
    assert tp.shape == (24, 41)
    # one pair: 1 beat = bin 6 of 1/6 beat, +7 semitones = column 20 + 7; density 1 / (1 pair * 1/6)
    assert _nonzero(tp) == {(6, 27): pytest.approx(6.0)}
    od = onset_duration_profile(music)
    assert od.shape == (24, 12)
    # onsets 0 and 1 beat, durations 1 beat (bin 6); density 1 / (2 notes * 1/36)
    assert _nonzero(od) == {(0, 6): pytest.approx(18.0), (6, 6): pytest.approx(18.0)}
    assert (od * (1 / 6) ** 2).sum() == pytest.approx(1.0) and (tp * (1 / 6)).sum() == pytest.approx(1.0)


def test_pair_rules():
    # simultaneous notes count in both orders; 47 ticks apart is inside the 4-beat window, 48 is not;
    # intervals beyond 20 semitones are left out
    music = make_music({"piano": [(0, 6, 60), (0, 6, 64), (47, 50, 60), (48, 60, 90)]})
    tp = time_pitch_profile(music)
    raw = tp / tp.max()
    assert _nonzero(raw) == {(0, 24): 1.0, (0, 16): 1.0, (23, 20): 1.0, (23, 16): 1.0}


def test_onset_and_duration_edges():
    # onset 5.5 beats -> 1.5 in the bar (bin 9); a duration of exactly 2 beats is in the last bin;
    # longer notes are left out
    music = make_music({"piano": [(66, 90, 60), (0, 25, 62)]})
    assert set(_nonzero(onset_duration_profile(music))) == {(9, 11)}
    assert set(_nonzero(onset_duration_profile(make_music({"p": [(5, 6, 60)]}, resolution=24)))) == {(1, 0)}


def test_tracks_drums_and_pairs_within_tracks():
    pitched = {"bass": [(0, 12, 40), (12, 24, 43)], "accompaniment": [(6, 12, 60), (30, 40, 72)]}
    base = make_music(pitched)
    with_drums = make_music({**pitched, "drums": [(i, i + 1, 42) for i in range(0, 48, 3)]})
    for fn in (onset_duration_profile, time_pitch_profile):
        np.testing.assert_array_equal(fn(base), fn(with_drums))
    # pairs never mix tracks: bass (0 -> 12, +3) and accompaniment (6 -> 30, +12) only
    assert set(_nonzero(time_pitch_profile(base))) == {(6, 23), (12, 32)}
    assert set(_nonzero(time_pitch_profile(base, tracks=["bass"]))) == {(6, 23)}


def test_matches_numpy_histogram2d():
    """Integer binning equals numpy's histogram2d(density=True) with the reference's bin edges."""
    rng = np.random.default_rng(0)
    eps = 1e-9
    for _ in range(5):
        # odd ticks at resolution 12 are mid-bin: no value sits on an edge
        starts = np.sort(rng.integers(0, 48, size=30) * 2 + 1)
        durs = rng.integers(0, 14, size=30) * 2 + 1
        pitches = rng.integers(40, 80, size=30)
        music = make_music({"p": list(zip(starts.tolist(), (starts + durs).tolist(), pitches.tolist()))})
        onset_edges = np.arange(0.0, 4 + 1 / 6 - eps, 1 / 6)
        ref_od, _, _ = np.histogram2d((starts / 12) % 4, durs / 12, density=True,
                                      bins=[onset_edges, np.arange(0.0, 2 + 1 / 6 - eps, 1 / 6)])
        np.testing.assert_allclose(onset_duration_profile(music), ref_od)
        # differences taken in ticks, then in beats: differences of float times in beats (as in the
        # reference code) can fall just below a bin edge (e.g. 25/12 - 13/12 = 0.9999999999999998)
        diff = np.subtract.outer(starts, starts) / 12  # [j, i] = t_j - t_i
        j, i = np.nonzero((diff >= 0) & (diff < 4 - eps))
        keep = j != i
        ref_tp, _, _ = np.histogram2d(diff[j[keep], i[keep]], pitches[j[keep]] - pitches[i[keep]], density=True,
                                      bins=[onset_edges, np.arange(-21, 21) + 0.5])
        np.testing.assert_allclose(time_pitch_profile(music), ref_tp)


def test_similarity():
    notes = [(0, 12, 60), (12, 18, 64), (18, 24, 67), (24, 48, 72)]
    a = make_music({"piano": notes})
    transposed = make_music({"piano": [(s, e, p + 5) for s, e, p in notes]})
    next_bar = make_music({"piano": [(s + 48, e + 48, p) for s, e, p in notes]})
    other = make_music({"piano": [(3, 4, 60), (9, 10, 61), (40, 41, 80)]})
    for metric in ("onset_duration", "time_pitch"):
        assert style_similarity(a, a, metric) == pytest.approx(1.0)
        assert style_similarity(a, next_bar, metric) == pytest.approx(1.0)
        assert style_similarity(a, other, metric) < 0.5
    assert style_similarity(a, transposed, "time_pitch") == pytest.approx(1.0)
    with pytest.raises(ValueError, match="unknown metric"):
        style_similarity(a, a, "pitch")


def test_empty_pieces_give_zero_profiles_and_zero_similarity():
    empty = make_music({"piano": []})
    single = make_music({"piano": [(0, 12, 60)]})
    assert not onset_duration_profile(empty).any() and not time_pitch_profile(single).any()
    assert style_similarity(empty, single, "onset_duration") == 0.0
    assert style_similarity(single, single, "time_pitch") == 0.0
    assert np.isfinite(onset_duration_profile(empty)).all()
    with pytest.raises(ValueError, match="without notes"):
        continuation_similarity(empty, single, "time_pitch")


def test_continuation_similarity_by_quarter():
    x = [(0, 12, 60), (12, 18, 64), (18, 24, 67), (24, 48, 72)]
    y = [(0, 3, 50), (3, 6, 62), (6, 9, 50), (9, 12, 62), (36, 48, 55)]
    reference = make_music({"piano": [(s + 48 * b, e + 48 * b, p) for b in range(8) for s, e, p in x]})
    bars = [x, x, y, y]
    continuation = make_music({"piano": [(s + 48 * b, e + 48 * b, p) for b, bar in enumerate(bars) for s, e, p in bar]})
    x_alone, y_alone = make_music({"piano": x}), make_music({"piano": y})
    for metric in ("onset_duration", "time_pitch"):
        values = continuation_similarity(continuation, reference, metric)
        # each quarter is one bar, compared with the whole reference (pairs never cross quarters)
        expected_x = style_similarity(x_alone, reference, metric)
        expected_y = style_similarity(y_alone, reference, metric)
        assert values.shape == (4,)
        np.testing.assert_allclose(values, [expected_x, expected_x, expected_y, expected_y])
        assert expected_y < 0.9 and expected_x > 0.7
    assert continuation_similarity(continuation, reference, "onset_duration")[:2] == pytest.approx([1.0, 1.0])
    chunks = split_by_onset(continuation, 4)
    assert [len(c.tracks[0].notes) for c in chunks] == [4, 4, 5, 5]
