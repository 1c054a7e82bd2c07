"""Fixtures of the REMI tests: tokenizers and a hand-made on-grid piece."""

from __future__ import annotations

import pytest
from remi_helpers import make_midi

from remi import REMITokenizer


@pytest.fixture(scope="session")
def tok() -> REMITokenizer:
    return REMITokenizer()


@pytest.fixture(scope="session")
def tok_4_4() -> REMITokenizer:
    return REMITokenizer(time_signatures=False)


@pytest.fixture
def on_grid_midi():
    """On the grid, all in range: meter changes (4/4, 3/4, 6/8, 5/4, 2/2), tempo changes, chords of
    simultaneous notes, an empty bar, a 16-sub-beat note; 10080 ticks per beat like music21's files."""
    notes = (
        # bar 1, 4/4 (sub-beats 0..15): a chord with a whole note, same-onset pairs, the last sub-beat
        [(0, 4, 60, 80), (0, 4, 64, 80), (0, 4, 67, 80), (0, 16, 48, 60), (6, 2, 72, 40), (8, 8, 65, 86)]
        + [(8, 8, 69, 86), (15, 1, 71, 52)]
        # bar 2, 3/4 (16..27)
        + [(16, 12, 50, 70), (16, 4, 62, 70), (20, 4, 62, 72), (24, 4, 62, 74)]
        # bars 3-4, 6/8 (28..39, 40..51); bar 4 left empty
        + [(28, 6, 55, 64), (31, 3, 59, 66), (34, 6, 57, 68)]
        # bar 5, 5/4 (52..71, written as parts of 12 and 8)
        + [(52, 12, 43, 60), (52, 2, 79, 84), (64, 8, 45, 60), (70, 2, 81, 84)]
        # bar 6, 2/2 (72..87): the extreme pitches
        + [(72, 8, 60, 58), (80, 8, 64, 58), (86, 2, 107, 40), (86, 2, 22, 40)]
    )
    meters = [(0, 4, 4), (16, 3, 4), (28, 6, 8), (52, 5, 4), (72, 2, 2)]
    tempi = [(0, 98), (20, 110), (53, 62), (86, 200)]
    return make_midi(notes, tpq=10080, tempi=tempi, meters=meters)
