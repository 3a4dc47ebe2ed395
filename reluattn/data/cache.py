"""The cache folder: downloaded archives and decoded datasets (uint8 `.npz`, no pickle), so a second run
starts in seconds.

A decoded split is keyed by what it was read from (resolved path, device and inode of the source, size and
modification time of each file read, and for image folders the class list of all splits), the split and
the format version; a changed source gets a new key. Each file also stores a SHA-256 of its arrays,
checked on every load: a cache file edited or damaged after it was written is ignored with a one-line
warning and rebuilt by the caller, as is one that cannot be read. Files are written to a temporary name
and renamed into place, so a crash never leaves a half-written cache file under the real name.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from pathlib import Path

import numpy as np

from .errors import DataWarning

FORMAT_VERSION = 2  # 2: 16-bit PNGs scaled, not clipped; content hash stored
ARRAYS = ("images", "labels", "class_names", "kind", "key", "content_hash")


def cache_dir() -> Path:
    """`RELUATTN_CACHE`, else `$XDG_CACHE_HOME/reluattn`, else `~/.cache/reluattn`."""
    if os.environ.get("RELUATTN_CACHE"):
        return Path(os.environ["RELUATTN_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "reluattn"


def file_fingerprint(path) -> list:
    """[resolved path, device, inode, size, mtime in ns] of one file: which file it is, and whether it changed."""
    status = Path(path).stat()
    return [str(Path(path).resolve()), status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns]


def content_hash(images: np.ndarray, labels: np.ndarray, class_names, kind: str) -> str:
    """SHA-256 of the decoded arrays and their description (one pass over the images)."""
    digest = hashlib.sha256()
    digest.update(json.dumps([list(map(str, class_names)), kind, images.shape, str(images.dtype),
                              labels.shape, str(labels.dtype)]).encode())
    digest.update(np.ascontiguousarray(images).data)
    digest.update(np.ascontiguousarray(labels).data)
    return digest.hexdigest()


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
            kind, stored_hash = str(stored["kind"]), str(stored["content_hash"])
        if images.dtype != np.uint8 or images.ndim != 4 or labels.dtype != np.int32 \
                or labels.shape != images.shape[:1] or class_names.ndim != 1:
            raise ValueError("arrays of the wrong type or shape")
        if labels.size and (labels.min() < 0 or labels.max() >= class_names.size):
            raise ValueError("labels out of range")
        class_names = tuple(str(name) for name in class_names)
    except Exception as error:  # a truncated or foreign file: zipfile, OSError, ValueError, EOFError, ...
        warnings.warn(f"ignoring unreadable cache file {path} ({type(error).__name__}: {error}); rebuilding it",
                      DataWarning)
        return None
    if content_hash(images, labels, class_names, kind) != stored_hash:
        warnings.warn(f"ignoring the cache file {path}: its contents do not match the hash stored with them "
                      f"(edited or damaged since it was written); decoding the images again", DataWarning)
        return None
    return images, labels, class_names, kind


def new_file_mode() -> int:
    """The mode `open` gives a new file under the process's umask (mkstemp's own 0600 would keep a cache
    folder shared with RELUATTN_CACHE from the user's group)."""
    try:
        with open("/proc/self/status") as status:  # reads the umask without changing it (Linux >= 4.7)
            for line in status:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write(path: Path, write) -> None:
    """Call `write(file)` on a temporary file beside `path`, then rename it to `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        os.fchmod(handle, new_file_mode())
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
        digest = content_hash(images, labels, class_names, kind)
        atomic_write(path, lambda file: np.savez(file, images=images, labels=labels, class_names=names,
                                                 kind=np.array(kind), key=np.array(key),
                                                 content_hash=np.array(digest)))
        return True
    except OSError as error:
        warnings.warn(f"could not write the cache file {path} ({error.strerror or error}); "
                      f"the next run will decode again (set RELUATTN_CACHE to a writable folder)", DataWarning)
        return False
