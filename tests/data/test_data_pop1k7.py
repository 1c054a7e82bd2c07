"""Pop1K7 pickles: the restricted unpickler, event mapping, and the corpus builder."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

from data import SPLITS, build_pop1k7_corpus
from data.pop1k7 import PickledEvent, UnsafePickleError, events_to_ids, read_song, restricted_load
from remi import REMITokenizer

# A two-bar song as Pop1K7 stores it: (bar start indices, events {name, value}).
EVENTS = [
    ("Bar", None), ("Beat", 0), ("Chord", "C_M"), ("Tempo", 121),
    ("Note_Pitch", 60), ("Note_Velocity", 64), ("Note_Duration", 480),
    ("Beat", 8), ("Note_Pitch", 64), ("Note_Velocity", 41), ("Note_Duration", 240),
    ("Bar", None), ("Beat", 0), ("Chord", "A_m"), ("Note_Pitch", 57), ("Note_Velocity", 50), ("Note_Duration", 1920),
    ("Bar", None), ("EOS", None),
]
EXPECTED = [
    "Bar_None", "Beat_0", "Chord_C_M", "Tempo_122",  # 121 bpm snaps to the nearest level
    "Note_Pitch_60", "Note_Velocity_64", "Note_Duration_480",
    "Beat_8", "Note_Pitch_64", "Note_Velocity_42", "Note_Duration_240",  # velocity 41 -> 42 (ties go up)
    "Bar_None", "Beat_0", "Chord_A_m", "Note_Pitch_57", "Note_Velocity_50", "Note_Duration_1920",
    "EOS_None",  # the trailing empty bar is dropped
]


class Event:
    """Like the Pop Music Transformer's utils.Event (pickled by older dumps)."""

    def __init__(self, name, time, value, text):
        self.name, self.time, self.value, self.text = name, time, value, text


class Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _song(events, as_objects=False):
    items = [Event(n, None, v, None) if as_objects else {"name": n, "value": v} for n, v in events]
    bars = [i for i, (n, _) in enumerate(events) if n == "Bar"]
    return (bars, items)


def test_dict_events_map_to_remi_tokens(tmp_path):
    path = tmp_path / "song.pkl"
    path.write_bytes(pickle.dumps(_song(EVENTS)))
    events = read_song(path)
    assert events == EVENTS
    tok = REMITokenizer(time_signatures=False)
    assert tok.tokens_to_strings(events_to_ids(events, tok, "song")) == EXPECTED
    with_meters = REMITokenizer(time_signatures=True)
    strings = with_meters.tokens_to_strings(events_to_ids(events, with_meters, "song"))
    assert strings == EXPECTED[:1] + ["TimeSig_4/4"] + EXPECTED[1:]


@pytest.mark.parametrize("protocol", [0, 1, 2, 4, 5])
def test_event_objects_become_local_stand_ins(protocol):
    loaded = restricted_load(pickle.dumps(_song(EVENTS, as_objects=True), protocol=protocol))
    assert all(type(e) is PickledEvent for e in loaded[1])
    assert [(e.name, e.value) for e in loaded[1]] == EVENTS


def test_malicious_pickle_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    payload = pickle.dumps(_song(EVENTS)[:1] + ([Exploit(marker)],))
    pickle.loads(pickle.dumps(Exploit(tmp_path / "control")))  # the payload really works when unrestricted
    assert (tmp_path / "control").exists()
    with pytest.raises(UnsafePickleError, match="posix.system|os.system"):
        restricted_load(payload)
    assert not marker.exists()
    for name in (b"builtins\neval", b"subprocess\nPopen", b"os\nsystem", b"posix\nsystem", b"numpy\nload"):
        crafted = b"c" + name + b"\n(S'1'\ntR."  # GLOBAL then call it with one argument
        with pytest.raises(UnsafePickleError):
            restricted_load(crafted)
    # copyreg._reconstructor may only build the Event stand-in
    crafted = b"ccopy_reg\n_reconstructor\n(c__builtin__\nobject\nc__builtin__\nobject\nNtR."
    with pytest.raises(UnsafePickleError, match="only allowed for Event"):
        restricted_load(crafted)


def test_builder_skips_bad_files(tmp_path):
    folder = tmp_path / "pop"
    folder.mkdir()
    for i in range(4):
        (folder / f"{i:03d}.pkl").write_bytes(pickle.dumps(_song(EVENTS)))
    (folder / "evil.pkl").write_bytes(pickle.dumps(([0], [Exploit(tmp_path / "pwned")])))
    (folder / "truncated.pkl").write_bytes(pickle.dumps(_song(EVENTS))[:40])
    (folder / "unknown.pkl").write_bytes(pickle.dumps(_song([("Bar", None), ("Note_Pitch", 120)])))
    (folder / "shape.pkl").write_bytes(pickle.dumps({"events": []}))
    corpus = build_pop1k7_corpus(folder, tmp_path / "c", progress=False)
    assert not (tmp_path / "pwned").exists()
    skipped = {s["name"]: s["reason"] for s in corpus.summary["skipped"]}
    assert set(skipped) == {"evil", "truncated", "unknown", "shape"}
    assert "unsafe pickle" in skipped["evil"] and "corrupt pickle" in skipped["truncated"]
    assert "Note_Pitch_120" in skipped["unknown"] and "expected a pair" in skipped["shape"]
    assert corpus.summary["settings"]["tokenizer"]["config"] == {"time_signatures": False}
    names = sorted(n for split in SPLITS for n in corpus.names(split))
    assert names == ["000", "001", "002", "003"]
    for split in SPLITS:
        for piece in corpus.pieces(split):
            assert corpus.tokenizer.tokens_to_strings(piece) == EXPECTED
    assert [corpus.summary["splits"][s]["pieces"] for s in SPLITS] == [2, 1, 1]
