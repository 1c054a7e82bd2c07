import numpy as np
import pytest
from groove_helpers import make_midi, notes_of

from groove import Augmentation, GrooveTokenizer
from groove.roles import BASS, DRUMS, TICKS_PER_BAR


@pytest.fixture(scope="module")
def tok():
    return GrooveTokenizer()


def _skip(notes, bars):
    cut = bars * TICKS_PER_BAR
    return [(s - cut, e - cut, p) for s, e, p in notes if s >= cut]


def test_augmentation_invariants(tok, trio_files):
    piece = tok.parse(trio_files[0])
    rng = np.random.default_rng(0)
    settings = Augmentation(max_skip_bars=3, drop_prob=0.6, max_transpose=5)
    shifts, skips = set(), set()
    for _ in range(60):
        aug = tok.augment(piece, rng, settings)
        assert any(aug.tracks), "at least one non-empty track"
        assert -5 <= aug.transposition <= 5 and 0 <= aug.skipped_bars <= 3
        shifts.add(aug.transposition)
        skips.add(aug.skipped_bars)
        original = piece.tracks(aug.accompaniment)
        for role, notes in enumerate(aug.tracks):
            if not aug.kept[role]:
                assert notes == []
                continue
            k = 0 if role == DRUMS else aug.transposition  # drums are never transposed
            assert notes == [(s, e, p + k) for s, e, p in _skip(original[role], aug.skipped_bars)]
    assert len(shifts) > 5 and skips == {0, 1, 2, 3}


def test_encode_augmented_decodes_to_the_draw(tok, trio_files):
    rng_a, rng_b = np.random.default_rng(5), np.random.default_rng(5)
    ids = tok.encode_augmented(trio_files[1], rng_a)
    aug = tok.augment(trio_files[1], rng_b)
    assert ids == tok.encode_augmented(trio_files[1], np.random.default_rng(5))  # reproducible
    report = tok.decode_with_report(ids)
    assert report.skipped == 0
    names = ("bass", "drums", "accompaniment")
    assert notes_of(report.music) == {names[r]: sorted(n) for r, n in enumerate(aug.tracks) if n}
    draws = {tuple(tok.encode_augmented(trio_files[1], rng_a)) for _ in range(5)}
    assert len(draws) > 1, "different draws differ"


def test_transposition_stays_in_range():
    tok = GrooveTokenizer()
    midi = make_midi([("BB Bass", 33, False, [(0, 480, 125)]), ("BB Piano", 0, False, [(0, 480, 2)]),
                      ("BB Drums", 0, True, [(0, 240, 127)])])
    piece = tok.parse(midi)
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(100):
        aug = tok.augment(piece, rng, Augmentation(drop_prob=0.0))
        seen.add(aug.transposition)
        assert aug.tracks[DRUMS] == [(0, 6, 127)]
    assert seen == {-2, -1, 0, 1, 2}


def test_accompaniment_drawn_among_candidates(tok):
    midi = make_midi([("BB Bass", 33, False, [(0, 480, 40)]), ("BB Piano", 0, False, [(0, 480, 60), (480, 960, 62)]),
                      ("BB Guitar", 25, False, [(0, 480, 64)]), ("BB Strings", 48, False, [(0, 480, 67)])])
    piece = tok.parse(midi)
    assert notes_of(tok.decode(tok.encode(midi)))["accompaniment"] == [(0, 12, 60), (12, 24, 62)]  # most notes
    rng = np.random.default_rng(0)
    chosen = {tok.augment(piece, rng, Augmentation(drop_prob=0.0, max_transpose=0)).accompaniment for _ in range(40)}
    assert chosen == {0, 1, 2}
    bass_only = make_midi([("BB Bass", 33, False, [(0, 480, 40)])])
    for _ in range(10):
        aug = tok.augment(bass_only, rng, Augmentation(drop_prob=1.0))
        assert aug.accompaniment == -1 and aug.tracks[BASS]
