"""The restricted unpickler: numpy numeric scalars rebuilt safely, everything else refused."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

from data.safe_pickle import PickledEvent, UnsafePickleError, restricted_load

SCALAR = b"cnumpy._core.multiarray\nscalar\n"  # the GLOBAL opcode numpy 2 writes (numpy 1: numpy.core.multiarray)


class Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class Event:
    """Like the Pop Music Transformer's utils.Event (pickled by older dumps)."""

    def __init__(self, name, time, value, text):
        self.name, self.time, self.value, self.text = name, time, value, text


def _scalar_pickle(code: bytes, data: bytes, module: bytes = b"numpy._core.multiarray", state: bytes = b"") -> bytes:
    """Protocol-0 text of ``scalar(dtype(code, False, True) [BUILD state], data)``, built by hand."""
    dtype = b"cnumpy\ndtype\n(V" + code + b"\nI00\nI01\ntR"
    if state:
        dtype += state + b"b"
    raw = b"c_codecs\nencode\n(V" + data.decode("latin1").encode("raw_unicode_escape") + b"\nVlatin1\ntR"
    return b"c" + module + b"\nscalar\n(" + dtype + raw + b"tR."


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4, 5])
def test_numpy_numeric_scalars_are_rebuilt(protocol):
    values = [np.int64(120), np.int64(-3), np.float32(1.5), np.float64(2.25), np.bool_(True), np.uint8(200)]
    data = pickle.dumps([{"name": "Tempo", "value": v} for v in values], protocol=protocol)
    assert b"multiarray" in data  # numpy's scalar global really is in the stream
    loaded = restricted_load(data)
    assert [e["value"] for e in loaded] == values
    assert [type(e["value"]) for e in loaded] == [type(v) for v in values]


def test_numpy_1_global_name_and_byte_order_are_accepted():
    little = _scalar_pickle(b"i8", (120).to_bytes(8, "little"), b"numpy.core.multiarray")
    assert restricted_load(little) == 120
    state = b"(I3\nV>\nNNNI-1\nI-1\nI0\nt"
    big = _scalar_pickle(b"i8", (120).to_bytes(8, "big"), state=state)
    assert restricted_load(big) == 120


@pytest.mark.parametrize(
    "payload, message",
    [
        (_scalar_pickle(b"O", b"\0" * 8), "not a plain numeric dtype"),  # object dtype
        (_scalar_pickle(b"V8", b"\0" * 8), "not a plain numeric dtype"),  # void / structured
        (_scalar_pickle(b"U1", b"\0" * 4), "not a plain numeric dtype"),  # strings
        (_scalar_pickle(b"M8", b"\0" * 8), "not a plain numeric dtype"),  # datetimes
        (_scalar_pickle(b"i8", b"\0" * 3), "needs 8 bytes"),  # wrong length
        (_scalar_pickle(b"i8", b"\0" * 8, state=b"(I3\nV<\nN(Vx\ntNI-1\nI-1\nI0\nt"), "not a plain numeric"),
        (b"cnumpy.core.multiarray\n_reconstruct\n(cnumpy\nndarray\n(I0\ntVb\ntR.", "refusing"),  # arrays
        (b"cnumpy\nload\n(Vx.npy\ntR.", "refusing"),
        (SCALAR + b"(I1\nI2\ntR.", "not a plain numeric"),  # scalar() of something that is not a dtype
        (b"c_codecs\nencode\n(Vx\nVrot13\ntR.", "latin-1"),  # other codecs
        (b"cbuiltins\neval\n(V1\ntR.", "refusing"),
    ],
)
def test_unsafe_numpy_and_other_globals_are_refused(payload, message):
    with pytest.raises(UnsafePickleError, match=message):
        restricted_load(payload)


def test_malicious_pickle_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    pickle.loads(pickle.dumps(Exploit(tmp_path / "control")))  # the payload really works when unrestricted
    assert (tmp_path / "control").exists()
    payload = pickle.dumps([{"name": "Tempo", "value": np.int64(120)}, Exploit(marker)])
    with pytest.raises(UnsafePickleError, match="posix.system|os.system"):
        restricted_load(payload)
    assert not marker.exists()
    for name in (b"builtins\neval", b"subprocess\nPopen", b"os\nsystem", b"posix\nsystem", b"numpy\nfromfile"):
        with pytest.raises(UnsafePickleError):
            restricted_load(b"c" + name + b"\n(S'1'\ntR.")
    with pytest.raises(UnsafePickleError, match="only allowed for Event"):
        restricted_load(b"ccopy_reg\n_reconstructor\n(c__builtin__\nobject\nc__builtin__\nobject\nNtR.")


@pytest.mark.parametrize("protocol", [0, 1, 2, 4, 5])
def test_event_objects_become_local_stand_ins(protocol):
    events = [Event("Bar", None, None, None), Event("Tempo", 0, np.int64(120), None)]
    loaded = restricted_load(pickle.dumps(events, protocol=protocol))
    assert all(type(e) is PickledEvent for e in loaded)
    assert [(e.name, e.value) for e in loaded] == [("Bar", None), ("Tempo", 120)]
