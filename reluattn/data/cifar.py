"""The canonical CIFAR-10 / CIFAR-100 "python version" archives (Krizhevsky, 2009), read safely.

`cifar-10-python.tar.gz` holds `cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta}`;
`cifar-100-python.tar.gz` holds `cifar-100-python/{train, test, meta}`. Each file is a Python-2 pickle of a
dict with bytes keys: `data` is a (n, 3072) uint8 array whose rows are channel-major (1024 red, then 1024
green, then 1024 blue values, each a row-major 32x32 plane); labels are a list of ints (`labels`, or
`fine_labels` for CIFAR-100); the meta file names the classes.

Pickles can run arbitrary code, so they are read with `RestrictedUnpickler` (unpickle.py), which admits
only the NumPy array reconstruction the format needs. Archives are streamed member by member into the
unpickler, never extracted, and a member larger than the limit of limits.py is refused before it is read.
"""

from __future__ import annotations

import os
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np

from .errors import DataError
from .limits import check_declared
from .unpickle import RestrictedUnpickler, load_pickle

SPLITS = ("train", "test")
IMAGE_SIDE = 32
ROW_LENGTH = 3 * IMAGE_SIDE * IMAGE_SIDE  # 3072 values per image


@dataclass(frozen=True)
class CifarLayout:
    """Where one CIFAR variant keeps its batches and which dict keys hold labels and class names."""
    name: str                 # "cifar10" or "cifar100"
    folder: str               # the folder inside the archive
    batches: dict             # split -> batch file names, in order
    meta: str                 # the file naming the classes
    labels_key: str
    class_names_key: str


LAYOUTS = {
    "cifar10": CifarLayout("cifar10", "cifar-10-batches-py",
                           {"train": tuple(f"data_batch_{i}" for i in range(1, 6)), "test": ("test_batch",)},
                           "batches.meta", "labels", "label_names"),
    "cifar100": CifarLayout("cifar100", "cifar-100-python", {"train": ("train",), "test": ("test",)},
                            "meta", "fine_labels", "fine_label_names"),
}


def _decode_keys(record, source: str) -> dict:
    if not isinstance(record, dict):
        raise DataError(f"{source} should hold a dict, it holds a {type(record).__name__}; not a CIFAR batch")
    return {key.decode("latin-1") if isinstance(key, bytes) else key: value for key, value in record.items()}


def parse_batch(record, layout: CifarLayout, source: str) -> tuple[np.ndarray, np.ndarray]:
    """An unpickled batch -> images uint8 (n, 32, 32, 3) and labels int32 (n,)."""
    record = _decode_keys(record, source)
    if "data" not in record or layout.labels_key not in record:
        raise DataError(f"{source} lacks the '{'data' if 'data' not in record else layout.labels_key}' entry "
                        f"of a {layout.name} batch (keys: {', '.join(map(str, record))})")
    rows, labels = record["data"], record[layout.labels_key]
    if not isinstance(rows, np.ndarray) or rows.dtype != np.uint8 or rows.ndim != 2 or rows.shape[1] != ROW_LENGTH:
        raise DataError(f"{source}: 'data' should be a uint8 array of shape (n, {ROW_LENGTH}); got "
                        f"{type(rows).__name__} {getattr(rows, 'dtype', '')} {getattr(rows, 'shape', '')}")
    try:
        labels = np.asarray(labels, dtype=np.int64)
    except (TypeError, ValueError) as error:
        raise DataError(f"{source}: '{layout.labels_key}' should be a list of ints ({error})") from error
    if labels.shape != (rows.shape[0],):
        raise DataError(f"{source}: {rows.shape[0]} images but {labels.size} labels")
    # Rows are channel-major planes: (n, 3072) -> (n, C, S, S) -> (n, S, S, C).
    images = rows.reshape(-1, 3, IMAGE_SIDE, IMAGE_SIDE).transpose(0, 2, 3, 1)  # (n, S, S, C)
    return np.ascontiguousarray(images), labels.astype(np.int32)


def parse_class_names(record, layout: CifarLayout, source: str) -> tuple[str, ...]:
    """The class names from the unpickled meta file (`batches.meta` or `meta`)."""
    record = _decode_keys(record, source)
    names = record.get(layout.class_names_key)
    if not isinstance(names, list) or not all(isinstance(name, (bytes, str)) for name in names) or not names:
        raise DataError(f"{source} lacks the '{layout.class_names_key}' list of a {layout.name} meta file")
    return tuple(name.decode("utf-8") if isinstance(name, bytes) else name for name in names)


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise DataError(f"CIFAR data has the splits {', '.join(SPLITS)}; got {split!r}")


def _assemble(layout: CifarLayout, split: str, files: dict, source: str):
    """Parse the batches of `split` and the meta file from `files` (name -> unpickled record); join them."""
    missing = [name for name in (*layout.batches[split], layout.meta) if name not in files]
    if missing:
        raise DataError(f"{source} lacks {layout.folder}/{missing[0]}; it is incomplete or truncated: "
                        f"get a fresh copy of the {layout.name} archive")
    class_names = parse_class_names(files[layout.meta], layout, f"{source}:{layout.meta}")
    parts = [parse_batch(files[name], layout, f"{source}:{name}") for name in layout.batches[split]]
    images = np.concatenate([part[0] for part in parts])  # (N, S, S, C)
    labels = np.concatenate([part[1] for part in parts])  # (N,)
    if labels.size and (labels.min() < 0 or labels.max() >= len(class_names)):
        raise DataError(f"{source}: labels run from {labels.min()} to {labels.max()} but the meta file names "
                        f"{len(class_names)} classes; the archive is corrupt")
    return images, labels, class_names


def _kind_from_names(names, source: str, expected: str | None) -> CifarLayout:
    """Which CIFAR variant a set of file names belongs to (checked against the one asked for)."""
    if any(name == "batches.meta" or name == "test_batch" or name.startswith("data_batch_") for name in names):
        kind = "cifar10"
    elif "meta" in names or "train" in names:
        kind = "cifar100"
    else:
        raise DataError(f"{source} holds no CIFAR batches (expected cifar-10-batches-py/data_batch_1... or "
                        f"cifar-100-python/train...); point --data at a CIFAR archive or an image folder")
    if expected is not None and expected != kind:
        raise DataError(f"--dataset {expected} was asked for but {source} holds {kind}")
    return LAYOUTS[kind]


def _unsafe_member_name(name: str) -> bool:
    """True for member names that would land outside the folder they were extracted into."""
    path = PurePosixPath(name.replace("\\", "/"))
    return path.is_absolute() or ".." in path.parts or (len(name) > 1 and name[1] == ":")


def read_cifar_archive(path, split: str = "train", expected: str | None = None):
    """Images (N, 32, 32, 3) uint8, labels (N,) int32, class names and kind from a CIFAR .tar(.gz).

    One streaming pass reads only the members `split` needs into memory; nothing is written to disk, and
    an archive holding a member whose name escapes its folder (`../x`, `/x`) is refused as tampered."""
    _check_split(split)
    source = str(path)
    wanted = {layout.meta for layout in LAYOUTS.values()}
    for layout in LAYOUTS.values():
        wanted.update(layout.batches[split])
    files, names = {}, set()
    try:
        with tarfile.open(path, mode="r|*") as archive:  # stream mode: one forward pass, no seeking
            for member in archive:
                if _unsafe_member_name(member.name):
                    raise DataError(f"{source} holds the member {member.name!r}, whose path leaves the "
                                    f"archive's folder; refusing a tampered archive (use the official one)")
                if not member.isfile():
                    continue  # folders, links, devices: nothing a CIFAR reader needs
                name = PurePosixPath(member.name).name
                names.add(name)
                if name in wanted:
                    if name in files:
                        raise DataError(f"{source} holds two members named {name}; use the official archive")
                    what = f"{source}:{member.name}"
                    check_declared(what, member.size)  # a tar member holds exactly its declared size
                    files[name] = load_pickle(archive.extractfile(member), what, member.size)  # streamed
    except DataError:
        raise
    except (tarfile.TarError, EOFError, zlib.error, OSError) as error:
        raise DataError(f"cannot read {source} as a tar archive ({type(error).__name__}: {error}); it is "
                        f"truncated or corrupt: download it again") from error
    layout = _kind_from_names(names, source, expected)
    return (*_assemble(layout, split, files, source), layout.name)


def find_cifar_folder(path) -> tuple[CifarLayout, Path] | None:
    """The layout and batch folder of an extracted CIFAR archive at `path` (itself or its CIFAR
    subfolder), or None when `path` is not one. A folder missing its meta file is still recognised by its
    batch files, so that loading it can say what is missing."""
    path = Path(path)
    for layout in LAYOUTS.values():
        for folder in (path, path / layout.folder):
            batch_files = [name for names in layout.batches.values() for name in names]
            if layout.name == "cifar100" and folder.name != layout.folder:
                batch_files = []  # "train" and "test" are too common to recognise CIFAR-100 by
            if any((folder / name).is_file() for name in (layout.meta, *batch_files)):
                return layout, folder
    return None


def cifar_folder_files(path, split: str) -> list[Path]:
    """The files of an extracted CIFAR folder that loading `split` reads (for cache keys)."""
    found = find_cifar_folder(path)
    if found is None:
        return []
    layout, folder = found
    return [folder / name for name in (*layout.batches.get(split, ()), layout.meta)]


def read_cifar_folder(path, split: str = "train", expected: str | None = None):
    """Like `read_cifar_archive`, from the folder the archive extracts to (or the folder holding it)."""
    _check_split(split)
    found = find_cifar_folder(path)
    if found is None:
        raise DataError(f"{path} is not an extracted CIFAR folder (no batches.meta / meta file in it or in "
                        f"cifar-10-batches-py/ or cifar-100-python/)")
    layout, folder = found
    if expected is not None and expected != layout.name:
        raise DataError(f"--dataset {expected} was asked for but {path} holds {layout.name}")
    files = {}
    for name in (*layout.batches[split], layout.meta):
        file = folder / name
        if file.is_file():
            try:
                with open(file, "rb") as stream:
                    size = os.fstat(stream.fileno()).st_size
                    check_declared(str(file), size, "is")
                    files[name] = load_pickle(stream, f"{folder}:{name}", size)  # streamed, never whole
            except OSError as error:
                raise DataError(f"cannot read {file} ({error.strerror or error}); check its permissions") from error
    return (*_assemble(layout, split, files, str(folder)), layout.name)


def is_tar_name(path) -> bool:
    return str(path).lower().endswith((".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tar.xz"))


__all__ = ["DataError", "LAYOUTS", "RestrictedUnpickler", "SPLITS", "cifar_folder_files", "find_cifar_folder",
           "is_tar_name", "load_pickle", "parse_batch", "parse_class_names", "read_cifar_archive",
           "read_cifar_folder"]
