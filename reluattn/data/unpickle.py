"""A pickle reader that cannot run code: it hands out only the few callables a CIFAR batch needs.

A pickle names functions that the reader calls while loading, which is how a malicious file runs code.
CIFAR batches need dicts, lists, bytes, strings and ints (no lookup) plus NumPy's array rebuilding. Files
re-pickled under Python 3 also name four harmless helpers, admitted here with their arguments checked:

    _codecs.encode(text, "latin1")             how protocols 0-2 store bytes under Python 3
    builtins.bytes()                           how they store the empty bytes (no argument: no allocation)
    numpy._core.numeric._frombuffer(...)       how protocol 5 stores an array (numpy.core.numeric in NumPy 1)
    numpy._core.multiarray.scalar(dtype, ...)  how a NumPy scalar label (np.int64(3)) is stored

Object dtypes are refused in all of them (they would unpickle arbitrary objects). Everything else is
refused with a message naming the callable and why (the same approach as PyTorch's `weights_only` loader).

An array's shape costs nothing in a pickle: `numpy.ndarray((10**7, 3072), 'u1')` is a few bytes that would
allocate 30 GB. So the memory an array may take before its bytes arrive (numpy.ndarray called directly,
_reconstruct's shape, a scalar's dtype) is bounded, over the whole file, by the file's own size (`budget`),
and such arrays are zero-filled rather than handed out uninitialised. NumPy's own pickles allocate (0,)
there and then fill the array from bytes the file carries, which ndarray.__setstate__ checks against the
shape before it allocates.
"""

from __future__ import annotations

import io
import pickle

import numpy as np

from .errors import DataError

try:  # NumPy >= 2 moved the array internals to numpy._core; old pickles still name numpy.core
    from numpy._core.multiarray import _reconstruct, scalar
    from numpy._core.numeric import _frombuffer
except ImportError:  # pragma: no cover - NumPy 1.x
    from numpy.core.multiarray import _reconstruct, scalar
    from numpy.core.numeric import _frombuffer


class _Refused(Exception):
    """An admitted callable called with arguments it is not admitted for; the message says why."""


def _plain(dtype, what: str) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype.hasobject:
        raise _Refused(f"{what} with the object dtype {dtype}, which would unpickle arbitrary objects")
    return dtype


def _latin1_encode(text, encoding="utf-8", errors="strict"):
    if not isinstance(text, str) or str(encoding).lower().replace("-", "") != "latin1" or errors != "strict":
        raise _Refused(f"_codecs.encode with the codec {encoding!r}; only latin1 (how Python 3 pickles bytes) "
                       f"is admitted")
    return text.encode("latin-1")


def _empty_bytes(*arguments):
    if arguments:
        raise _Refused(f"bytes{arguments!r:.40}; only bytes() (how Python 3 pickles b'') is admitted")
    return b""


def _plain_frombuffer(buffer, dtype, shape, order):
    return _frombuffer(buffer, _plain(dtype, "_frombuffer"), shape, order)


def _plain_scalar(dtype, *state):
    return scalar(_plain(dtype, "a NumPy scalar"), *state)


class _Allocations:
    """What the arrays a pickle makes without carrying their bytes may cost together: at most `budget` bytes."""

    def __init__(self, budget: int):
        self.budget = budget
        self.spent = 0

    def take(self, shape, dtype: np.dtype, what: str) -> tuple:
        try:
            shape = tuple(int(n) for n in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        except (TypeError, ValueError):
            raise _Refused(f"{what} with the shape {shape!r:.60}, which is not a tuple of whole numbers") from None
        if any(n < 0 for n in shape):
            raise _Refused(f"{what} with the negative shape {shape}")
        size = dtype.itemsize
        for n in shape:
            size *= n  # Python ints: no overflow
        if self.spent + size > self.budget:
            raise _Refused(f"{what} with the shape {shape} of {dtype}, {size:,} bytes, more than the "
                           f"{self.budget:,}-byte file could hold (an array named by its shape alone)")
        self.spent += size
        return shape


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler for CIFAR batches; see the module's docstring for what it admits."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"): _reconstruct,   # how NumPy 1.x (and Python 2) pickled arrays
        ("numpy._core.multiarray", "_reconstruct"): _reconstruct,  # how NumPy 2 pickles them
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): _latin1_encode,
        ("__builtin__", "bytes"): _empty_bytes,   # protocols 0-2 name the Python 2 module
        ("builtins", "bytes"): _empty_bytes,
        ("numpy.core.numeric", "_frombuffer"): _plain_frombuffer,
        ("numpy._core.numeric", "_frombuffer"): _plain_frombuffer,
        ("numpy.core.multiarray", "scalar"): _plain_scalar,
        ("numpy._core.multiarray", "scalar"): _plain_scalar,
    }

    def __init__(self, file, source: str, budget: int):
        super().__init__(file, encoding="bytes")  # Python-2 str values stay bytes, as the format expects
        self.source = source
        self.allocations = _Allocations(budget)
        # The shape-checked stand-ins for the callables that allocate by shape (see the module docstring).
        self.bounded = {np.ndarray: self._ndarray, _reconstruct: self._reconstruct, _plain_scalar: self._scalar}

    def _ndarray(self, shape, dtype=float, *rest, **keywords):
        if rest or keywords:  # buffer=, offset=, strides=: views of other objects, which NumPy never pickles
            raise _Refused("numpy.ndarray with a buffer, offset or strides; only a shape and a dtype are admitted")
        dtype = _plain(dtype, "numpy.ndarray")
        return np.zeros(self.allocations.take(shape, dtype, "numpy.ndarray"), dtype)

    def _reconstruct(self, subtype, shape, dtype):
        if subtype != self._ndarray:
            raise _Refused(f"_reconstruct of {getattr(subtype, '__name__', subtype)!r:.40}; only numpy.ndarray is "
                           f"admitted")
        dtype = _plain(dtype, "_reconstruct")
        array = _reconstruct(np.ndarray, self.allocations.take(shape, dtype, "_reconstruct"), dtype)
        array.fill(0)  # never hand out uninitialised memory (NumPy's own pickles fill it from their bytes)
        return array

    def _scalar(self, dtype, *state):
        self.allocations.take((), _plain(dtype, "a NumPy scalar"), "a NumPy scalar")
        return _plain_scalar(dtype, *state)

    def find_class(self, module, name):
        allowed = self.ALLOWED.get((module, name))
        allowed = self.bounded.get(allowed, allowed)
        if allowed is None:
            raise DataError(f"{self.source} is not a plain CIFAR batch: its pickle asks for {module}.{name}, "
                            f"which is not one of the array and bytes constructors a CIFAR batch needs and "
                            f"could run code; refusing to load it (use the official archive)")
        return allowed

    def persistent_load(self, pid):
        raise DataError(f"{self.source} is not a plain CIFAR batch (it uses persistent ids); refusing to load it")


def load_pickle(file, source: str, budget: int | None = None):
    """Unpickle `file` (bytes or a readable binary file, read as a stream) with `RestrictedUnpickler`;
    `source` names the file in error messages. `budget`: the file's size in bytes (bytes: their length),
    which bounds the arrays it may make from a shape alone."""
    if isinstance(file, (bytes, bytearray)):
        stream, budget = io.BytesIO(file), len(file) if budget is None else budget
    else:
        stream = file
        if budget is None:
            raise TypeError("load_pickle of a stream needs its size as budget=")
    try:
        return RestrictedUnpickler(stream, source, budget).load()
    except DataError:
        raise
    except _Refused as error:
        raise DataError(f"{source} is not a plain CIFAR batch: its pickle calls {error}; refusing to load "
                        f"it (use the official archive)") from error
    except Exception as error:  # any malformed pickle: UnpicklingError, EOFError, TypeError, ...
        raise DataError(f"{source} is not a readable CIFAR batch ({type(error).__name__}: {error}); "
                        f"the file may be truncated or corrupt, get a fresh copy") from error
