"""Reading a checkpoint's .npz files without trusting the sizes they declare.

An .npz is a zip of .npy files, each starting with a header that states its shape and dtype. A 634 KB
`params.npz` can hold a deflated 150-million-element array, and `np.load` would unpack it all before anyone
could compare its shape with the model's. So the headers are read first (a few hundred bytes of each
member), checked against what the checkpoint's config.json says the arrays must be, and only then are
the arrays loaded:

    declared = npz_declarations(handle)      {name: (shape, dtype)} from the headers alone
    arrays = read_npz(path, check)           check(declared) raises before anything is unpacked
    params_fit(expected_param_shapes(config)), opt_state_fits(...)   the checks a checkpoint's files get

Each file is opened once, so a checkpoint pruned by a running `reluattn train` after it was opened is still
read whole; one gone before it was opened raises `Vanished`.
"""

from __future__ import annotations

import math
import zipfile
from pathlib import Path

import numpy as np

from ..config import ViTConfig
from ..params import flatten, param_shapes

# The array kinds a checkpoint holds: bool, signed and unsigned integers, floats.
NUMERIC_KINDS = "biuf"


class NpzError(ValueError):
    """A file that is not an .npz of plain numeric arrays (the caller names the checkpoint)."""


class DoesNotFit(NpzError):
    """The arrays an .npz declares are not the ones its checkpoint's config.json describes."""


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


def expected_param_shapes(config: dict) -> dict | None:
    """{leaf: shape} of the parameters a checkpoint's config.json's model has (None: it names no model).
    Raises ValueError for a model that is not a valid ViTConfig."""
    if not isinstance(config.get("model"), dict):
        return None
    shapes = param_shapes(ViTConfig.from_dict(config["model"]))
    return {name: tuple(shape) for name, shape in flatten(shapes, is_leaf=lambda leaf: isinstance(leaf, tuple)).items()}


def params_fit(expected: dict | None):
    """A check for read_npz: exactly the leaves and shapes `expected`, each floating point."""
    def check(declared: dict) -> None:
        if expected is None:
            return
        got = {name: shape for name, (shape, _) in declared.items()}
        problems = [f"missing {name}" for name in expected if name not in got]
        problems += [f"{name} has shape {got[name]}, expected {expected[name]}" for name in expected
                     if name in got and got[name] != expected[name]]
        problems += [f"unexpected leaf {name} {got[name]}" for name in got if name not in expected]
        problems += [f"{name} is {dtype}, not floating point" for name, (_, dtype) in declared.items()
                     if dtype.kind != "f"]
        if problems:
            raise DoesNotFit("; ".join(problems[:4]) + (f"; and {len(problems) - 4} more" if len(problems) > 4 else ""))
    return check


def opt_state_fits(expected: dict | None):
    """A check for read_npz: no optimizer array larger than the largest parameter, and no more of them in all
    than four copies of the parameters (AdamW keeps two; the backend's restore checks the exact layout)."""
    def check(declared: dict) -> None:
        if expected is None:
            return
        largest = max(elements(shape) for shape in expected.values())
        total = sum(elements(shape) for shape in expected.values())
        sizes = {name: elements(shape) for name, (shape, _) in declared.items()}
        too_big = [f"{name} {declared[name][0]}" for name, size in sizes.items() if size > largest]
        if too_big:
            raise DoesNotFit(f"{', '.join(too_big[:3])} larger than any parameter")
        if sum(sizes.values()) > 4 * total + 1024:
            raise DoesNotFit(f"{sum(sizes.values()):,} numbers, more than four copies of the parameters")
    return check
