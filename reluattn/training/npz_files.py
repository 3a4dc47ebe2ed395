"""Reading a checkpoint's .npz files without trusting the sizes they declare.

An .npz is a zip of .npy files, each starting with a header that states its shape and dtype. A 634 KB
`params.npz` can hold a deflated 150-million-element array, and `np.load` would unpack it all before anyone
could compare its shape with the model's. So the headers are read first (a few hundred bytes of each
member), checked against what the checkpoint's config.json says the arrays must be, and only then are
the arrays loaded:

    declared = npz_declarations(handle)      {name: (shape, dtype)} from the headers alone
    arrays = read_npz(path, check)           check(declared) raises before anything is unpacked

Each file is opened once, so a checkpoint pruned by a running `reluattn train` after it was opened is still
read whole; one gone before it was opened raises `Vanished`.
"""

from __future__ import annotations

import math
import zipfile
from pathlib import Path

import numpy as np

# The array kinds a checkpoint holds: bool, signed and unsigned integers, floats.
NUMERIC_KINDS = "biuf"


class NpzError(ValueError):
    """A file that is not an .npz of plain numeric arrays (the caller names the checkpoint)."""


class Vanished(OSError):
    """The file was deleted before it could be opened (a checkpoint pruned while being read)."""


def npz_declarations(handle) -> dict:
    """{array name: (shape, dtype)} of an open .npz file, from each member's .npy header."""
    declared = {}
    with zipfile.ZipFile(handle) as archive:
        for info in archive.infolist():
            if not info.filename.endswith(".npy"):
                raise NpzError(f"it holds {info.filename!r}, which is not an .npy array")
            with archive.open(info) as member:
                version = np.lib.format.read_magic(member)
                if version == (1, 0):
                    shape, _, dtype = np.lib.format.read_array_header_1_0(member)
                elif version == (2, 0):
                    shape, _, dtype = np.lib.format.read_array_header_2_0(member)
                else:
                    raise NpzError(f"{info.filename} has .npy format version {version}, which reluattn never writes")
            declared[info.filename[:-4]] = (tuple(shape), np.dtype(dtype))
    return declared


def non_numeric(declared: dict) -> list[str]:
    """'name (dtype)' for every declared array that is not bool, integer or float."""
    return [f"{name} ({dtype.str})" for name, (_, dtype) in declared.items()
            if dtype.kind not in NUMERIC_KINDS or dtype.hasobject or dtype.fields is not None]


def elements(shape: tuple) -> int:
    return math.prod(shape)


def read_npz(path, check=None) -> dict:
    """{name: array} of the .npz at `path`, after `check(declarations)` (which raises to refuse it)."""
    path = Path(path)
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        raise Vanished(f"{path} is gone") from None
    with handle:
        declared = npz_declarations(handle)
        bad = non_numeric(declared)
        if bad:
            raise NpzError(f"it holds arrays that are not numbers: {', '.join(bad[:3])}")
        if check is not None:
            check(declared)
        handle.seek(0)
        with np.load(handle, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
