"""The cache folder: downloaded archives and decoded datasets (uint8 `.npz`, no pickle), so a second run
starts in seconds.

A decoded split is keyed by what it was read from (absolute path, size and modification time of each
source file), the split and the format version; a changed source gets a new key. Files are written to a
temporary name and renamed into place, so a crash never leaves a half-written cache file under the real
name, and a cache file that cannot be read anyway is ignored (and rebuilt by the caller).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from pathlib import Path

import numpy as np

FORMAT_VERSION = 1
ARRAYS = ("images", "labels", "class_names", "kind", "key")


def cache_dir() -> Path:
    """`RELUATTN_CACHE`, else `$XDG_CACHE_HOME/reluattn`, else `~/.cache/reluattn`."""
    if os.environ.get("RELUATTN_CACHE"):
        return Path(os.environ["RELUATTN_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "reluattn"


def file_fingerprint(path) -> list:
    """[absolute path, size, mtime in ns] of one file: enough to notice that it changed."""
    status = Path(path).stat()
    return [str(Path(path).resolve()), status.st_size, status.st_mtime_ns]


def cache_key(source_format: str, split: str, sources: list) -> str:
    """A short hash of everything the decoded arrays depend on."""
    text = json.dumps({"version": FORMAT_VERSION, "format": source_format, "split": split, "sources": sources},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def cache_file(name: str, split: str, key: str) -> Path:
    safe_name = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:60]
    return cache_dir() / "arrays" / f"{safe_name}-{split}-{key}.npz"


def read_cache(path: Path, key: str):
    """(images, labels, class_names, kind) from a cache file, or None when it is missing or unusable."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as stored:
            if set(stored.files) != set(ARRAYS) or str(stored["key"]) != key:
                raise ValueError(f"holds {sorted(stored.files)} for another key")
            images, labels, class_names = stored["images"], stored["labels"], stored["class_names"]
            kind = str(stored["kind"])
        if images.dtype != np.uint8 or images.ndim != 4 or labels.dtype != np.int32 \
                or labels.shape != images.shape[:1] or class_names.ndim != 1:
            raise ValueError("arrays of the wrong type or shape")
        if labels.size and (labels.min() < 0 or labels.max() >= class_names.size):
            raise ValueError("labels out of range")
        return images, labels, tuple(str(name) for name in class_names), kind
    except Exception as error:  # a truncated or foreign file: zipfile, OSError, ValueError, EOFError, ...
        warnings.warn(f"ignoring unreadable cache file {path} ({type(error).__name__}: {error}); rebuilding it")
        return None


def atomic_write(path: Path, write) -> None:
    """Call `write(file)` on a temporary file beside `path`, then rename it to `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_cache(path: Path, key: str, images: np.ndarray, labels: np.ndarray, class_names, kind: str) -> bool:
    """Store decoded arrays; a failure (full disk, read-only folder) only warns: the cache is optional."""
    names = np.array(list(class_names), dtype=str)  # a unicode array, so loading needs no pickle
    try:
        atomic_write(path, lambda file: np.savez(file, images=images, labels=labels, class_names=names,
                                                 kind=np.array(kind), key=np.array(key)))
        return True
    except OSError as error:
        warnings.warn(f"could not write the cache file {path} ({error.strerror or error}); "
                      f"the next run will decode again (set RELUATTN_CACHE to a writable folder)")
        return False
