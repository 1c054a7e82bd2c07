"""Restricted unpickling for dataset files (Pop1K7's event pickles and ``dictionary.pkl``).

Pickles can run arbitrary code when loaded, so dataset pickles are read with :class:`RestrictedUnpickler`,
which resolves only these globals and refuses every other one with :class:`UnsafePickleError`:

* ``numpy.dtype`` and ``numpy.core.multiarray.scalar`` (numpy 2: ``numpy._core.multiarray.scalar``), the
  two globals a pickled numpy scalar such as ``numpy.int64(120)`` needs, for plain numeric dtypes only
  (bool, signed and unsigned integers, floats: :data:`NUMERIC_DTYPES`). No numpy function is called with
  pickled arguments: the dtype call is checked and recorded, its state (byte order) checked, and the
  scalar rebuilt from its raw bytes with ``numpy.frombuffer``;
* ``_codecs.encode`` for ``latin1`` only (how protocols 0-2 store those raw bytes);
* any class named ``Event`` becomes the local :class:`PickledEvent` (older dumps pickled the Pop Music
  Transformer's ``utils.Event``); ``copyreg._reconstructor`` may build that stand-in and nothing else.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass
from typing import Any

import numpy as np

NUMERIC_DTYPES = frozenset({"b1", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8"})
SCALAR_MODULES = ("numpy.core.multiarray", "numpy._core.multiarray")  # numpy 1 and numpy 2 names
BYTE_ORDERS = ("<", ">", "|", "=")


class UnsafePickleError(pickle.UnpicklingError):
    """A pickle asked for a class or function we do not load."""


@dataclass
class PickledEvent:
    """Local stand-in for a pickled ``Event`` object (Pop Music Transformer's ``utils.Event``)."""

    name: str = ""  # event type, e.g. "Note_Pitch"
    value: Any = None  # event value, e.g. 60
    time: Any = None  # onset in ticks (unused here)
    text: Any = None  # free text (unused here)


class DtypeRequest:
    """A pickled ``numpy.dtype(code, align, copy)`` call, checked; the real dtype is made by :meth:`dtype`."""

    def __init__(self, code: str):
        self.code = code  # numpy type code, one of NUMERIC_DTYPES
        self.order = "="  # byte order from the pickled state

    def __setstate__(self, state: Any) -> None:
        # numpy's dtype state: (version, byte order, subarray, names, fields, elsize, alignment, flags[, metadata])
        if not (isinstance(state, tuple) and len(state) in (8, 9) and state[0] in (3, 4)):
            raise UnsafePickleError(f"unexpected numpy.dtype state {state!r}")
        order, subarray, names, fields = state[1:5]
        metadata = state[8] if len(state) == 9 else None
        if order not in BYTE_ORDERS or any(x is not None for x in (subarray, names, fields, metadata)):
            raise UnsafePickleError(f"numpy.dtype state {state!r} is not a plain numeric dtype")
        self.order = order

    def dtype(self) -> np.dtype:
        plain = np.dtype(self.code)
        return plain.newbyteorder(self.order) if self.order in "<>" else plain


def _dtype(code: Any, align: Any = False, copy: Any = True) -> DtypeRequest:
    """Stands in for ``numpy.dtype`` in a pickle: plain numeric type codes only."""
    if not isinstance(code, str) or code not in NUMERIC_DTYPES or align not in (False, 0):
        raise UnsafePickleError(f"numpy.dtype({code!r}, align={align!r}) is not a plain numeric dtype")
    return DtypeRequest(code)


def _scalar(request: Any, data: Any = None) -> np.generic:
    """Stands in for ``numpy.core.multiarray.scalar``: one value of a checked dtype from its raw bytes."""
    if not isinstance(request, DtypeRequest):
        raise UnsafePickleError("numpy scalar of a dtype that is not a plain numeric one")
    dtype = request.dtype()
    if not isinstance(data, bytes) or len(data) != dtype.itemsize:
        raise UnsafePickleError(f"numpy scalar of dtype {dtype} needs {dtype.itemsize} bytes of data")
    return np.frombuffer(data, dtype=dtype)[0]


def _latin1(text: Any, encoding: Any = "latin1") -> bytes:
    """Stands in for ``_codecs.encode`` (protocols 0-2 store bytes as latin-1 text)."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise UnsafePickleError("_codecs.encode is only allowed for latin-1 text")
    return text.encode("latin1")


def _reconstruct(cls: type, base: type, state: Any) -> PickledEvent:
    """``copyreg._reconstructor`` (protocols 0 and 1), for PickledEvent only."""
    if cls is not PickledEvent or base is not object or state is not None:
        raise UnsafePickleError("copyreg._reconstructor is only allowed for Event objects")
    return PickledEvent.__new__(PickledEvent)


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that resolves only the globals listed in the module docstring."""

    def find_class(self, module: str, name: str) -> Any:
        if name == "Event":
            return PickledEvent
        if module in SCALAR_MODULES and name == "scalar":
            return _scalar
        if module == "numpy" and name == "dtype":
            return _dtype
        if module == "_codecs" and name == "encode":
            return _latin1
        if module in ("copyreg", "copy_reg") and name == "_reconstructor":  # protocols 0-1 (2.x name too)
            return _reconstruct
        if module in ("builtins", "__builtin__") and name == "object":
            return object
        raise UnsafePickleError(
            f"refusing to load global {module}.{name}: dataset pickles hold only lists, dicts, numbers, "
            "numpy numeric scalars, strings and Event objects"
        )


def restricted_load(data: bytes) -> Any:
    """Unpickle ``data`` with :class:`RestrictedUnpickler`."""
    return RestrictedUnpickler(io.BytesIO(data)).load()


def plain_value(value: Any) -> Any:
    """A numpy scalar as the Python number it holds; anything else unchanged."""
    return value.item() if isinstance(value, np.generic) else value
