"""Image-folder datasets: a folder or a .zip holding `<split>/<class>/<image>` (JPEG or PNG).

The class index of an image is the position of its class folder's name in the sorted list of class names
(taken over all splits, so every split numbers the classes alike). Images are decoded with Pillow to RGB
uint8 without resizing; all images of a dataset must share one size. Zip members are read in memory.
Decoding runs in this process unless `workers` > 1 asks for worker processes. They are started with
"spawn" (safe after JAX has started its threads), which re-imports the main script in each worker: a
script that asks for workers needs the `if __name__ == "__main__":` guard (`python -m reluattn` and the
`reluattn` command have it). The gain is modest (measured in the data helper's report) and the decoded
arrays are cached, so one process is the default.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import warnings
import zipfile
import zlib
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image
from ..progress import tqdm

from .errors import DataError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
CHUNK_SIZE = 1024        # images per task handed to a worker (also the progress bar's step)


@dataclass(frozen=True)
class FolderIndex:
    """What an image folder holds, without decoding anything."""
    root: str                 # the folder or the .zip
    is_zip: bool
    class_names: tuple        # sorted class-folder names; a label is a position in this tuple
    splits: dict              # split name -> tuple of (member path inside root, label), sorted

    def members(self, split: str) -> tuple[list[str], np.ndarray]:
        """Member paths and labels (N,) int32 of `split`; a missing split is a DataError."""
        if split not in self.splits:
            raise DataError(f"{self.root} has no split {split!r}; it holds: {', '.join(sorted(self.splits))}")
        entries = self.splits[split]
        return [member for member, _ in entries], np.array([label for _, label in entries], dtype=np.int32)


def _unsafe(name: str) -> bool:
    """A member name that would land outside the folder it was extracted into (`../x`, `/x`, `C:x`)."""
    name = name.replace("\\", "/")
    return name.startswith("/") or ".." in name.split("/") or name[1:2] == ":"


def _hidden(parts) -> bool:
    return any(part.startswith(".") or part == "__MACOSX" for part in parts)


def _list_zip(path: Path) -> tuple[list[str], list[str]]:
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as error:
        raise DataError(f"cannot read {path} as a zip archive ({error}); it is truncated or corrupt: "
                        f"get a fresh copy") from error
    for info in infos:
        if _unsafe(info.filename):
            raise DataError(f"{path} holds the member {info.filename!r}, whose path leaves the archive; "
                            f"refusing a tampered archive")
    files = [info.filename for info in infos if not info.is_dir()]
    folders = [info.filename.rstrip("/") for info in infos if info.is_dir()]
    return files, folders


def _list_folder(path: Path) -> tuple[list[str], list[str]]:
    files, folders = [], []
    for directory, subdirectories, names in os.walk(path):
        relative = os.path.relpath(directory, path).replace(os.sep, "/")
        prefix = "" if relative == "." else relative + "/"
        folders.extend(prefix + name for name in subdirectories)
        files.extend(prefix + name for name in names)
    return files, folders


def index_image_folder(path) -> FolderIndex:
    """Index a folder or .zip of `<split>/<class>/<image>`; one wrapping folder around it is allowed."""
    path = Path(path)
    is_zip = path.is_file()
    files, folders = _list_zip(path) if is_zip else _list_folder(path)
    member_of = {}  # path parts (without "." and empty parts) -> the member's name as stored
    for name in files:
        parts = tuple(part for part in name.split("/") if part not in ("", "."))
        if name.lower().endswith(IMAGE_SUFFIXES) and not _hidden(parts):
            member_of[parts] = name
    images = list(member_of)
    if not images:
        raise DataError(f"{path} holds no JPEG/PNG images in <split>/<class>/<image> folders; point --data at "
                        f"a CIFAR archive or an image folder like train/cat/0001.jpg")
    depths = {len(parts) for parts in images}
    prefix = ()
    if depths == {4} and len({parts[0] for parts in images}) == 1:
        prefix = images[0][:1]  # a zip of the dataset's folder: strip the one wrapping folder
    elif depths == {2}:
        raise DataError(f"{path}: images sit one folder deep ({'/'.join(images[0])}) but an image folder needs "
                        f"<split>/<class>/<image> (e.g. train/cat/0001.png): put class folders in split folders")
    stray = next((parts for parts in images if len(parts) != 3 + len(prefix)), None)
    if stray is not None:
        raise DataError(f"{path}: image {'/'.join(stray)} is not at <split>/<class>/<image>; move or remove it")
    class_names = tuple(sorted({parts[len(prefix) + 1] for parts in images}))
    split_names = {parts[len(prefix)] for parts in images}
    for parts in sorted({tuple(name.split("/"))[len(prefix):] for name in folders}):
        if len(parts) == 2 and parts[0] in split_names and parts[1] not in class_names and not _hidden(parts):
            raise DataError(f"{path}: class folder {'/'.join(prefix + parts)} holds no JPEG/PNG images in any "
                            f"split; add images or remove the folder")
    label_of = {name: position for position, name in enumerate(class_names)}
    splits: dict = {}
    for parts, member in member_of.items():
        split, class_name = parts[len(prefix):len(prefix) + 2]
        splits.setdefault(split, []).append((member, label_of[class_name]))
    for split, entries in splits.items():  # sorted by class, then by file name
        splits[split] = tuple(sorted(entries, key=lambda entry: (entry[1], entry[0])))
    return FolderIndex(str(path), is_zip, class_names, splits)


# ----------------------------------------------------------------------------------------------- decoding

_reader = None  # in a worker process: the open source, set once by _open_source


class _Reader:
    """Reads member bytes from a folder or a zip (kept open)."""

    def __init__(self, root: str, is_zip: bool):
        self.root, self.is_zip = root, is_zip
        self.archive = zipfile.ZipFile(root) if is_zip else None

    def read(self, member: str) -> bytes:
        try:
            if self.archive is not None:
                return self.archive.read(member)
            return (Path(self.root) / member).read_bytes()
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, KeyError) as error:
            raise DataError(f"cannot read {member} from {self.root} ({error}); the file is corrupt or "
                            f"unreadable: replace it") from error

    def close(self):
        if self.archive is not None:
            self.archive.close()


def _open_source(root: str, is_zip: bool) -> None:
    global _reader
    _reader = _Reader(root, is_zip)


def decode_image(data: bytes, member: str, source: str) -> np.ndarray:
    """One JPEG/PNG file's bytes -> (H, W, 3) uint8 RGB; an unreadable file is a DataError naming it."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            rgb = image if image.mode == "RGB" else image.convert("RGB")
            pixels = np.asarray(rgb, dtype=np.uint8)  # (H, W, C)
    except Exception as error:  # Pillow raises OSError, SyntaxError, DecompressionBombError, ...
        raise DataError(f"cannot decode image {member} in {source} ({type(error).__name__}: {error}); "
                        f"remove or replace it") from error
    return pixels


def _decode_with(reader: _Reader, members: list[str]) -> np.ndarray:
    images = None
    for position, member in enumerate(members):
        image = decode_image(reader.read(member), member, reader.root)  # (H, W, C)
        if images is None:
            images = np.empty((len(members), *image.shape), dtype=np.uint8)  # (n, H, W, C)
        elif image.shape != images.shape[1:]:
            raise _size_error(reader.root, member, image.shape, members[0], images.shape[1:])
        images[position] = image
    return images


def _size_error(root, member, shape, first_member, first_shape) -> DataError:
    return DataError(f"{root}: image {member} is {shape[1]}x{shape[0]} but {first_member} is "
                     f"{first_shape[1]}x{first_shape[0]}; all images of a dataset must share one size "
                     f"(resize them first)")


def _decode_chunk(members: list[str]) -> np.ndarray:
    return _decode_with(_reader, members)


def worker_count(workers: int | None) -> int:
    """Processes to decode with: `workers`, or 1 (this process) when None."""
    if workers is None:
        return 1
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise DataError(f"workers must be a whole number >= 1, got {workers!r}")
    return workers


def decode_images(root, is_zip: bool, members: list[str], *, progress: bool = True,
                  workers: int | None = None, description: str = "decoding images") -> np.ndarray:
    """Decode `members` of a folder or zip into one (N, H, W, 3) uint8 array, in the given order."""
    if not members:
        raise DataError(f"{root}: no images to decode")
    chunks = [members[start:start + CHUNK_SIZE] for start in range(0, len(members), CHUNK_SIZE)]
    workers = min(worker_count(workers), len(chunks))
    with tqdm(total=len(members), desc=description, unit="img", disable=not progress, leave=False) as bar:
        if workers > 1:
            try:
                return _decode_in_pool(str(root), is_zip, chunks, workers, bar)
            except BrokenProcessPool as error:
                raise DataError(f"the {workers} decoding processes died ({error}); decode with workers=1, or put "
                                f"your script's code under if __name__ == '__main__':") from error
            except OSError as error:  # no processes or semaphores allowed here: decode in this one
                warnings.warn(f"could not start {workers} decoding processes ({error}); decoding in this one")
                bar.reset()
        reader = _Reader(str(root), is_zip)
        try:
            parts = []
            for chunk in chunks:
                parts.append(_decode_with(reader, chunk))
                if parts[-1].shape[1:] != parts[0].shape[1:]:
                    raise _size_error(root, chunk[0], parts[-1].shape[1:], members[0], parts[0].shape[1:])
                bar.update(len(chunk))
        finally:
            reader.close()
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def _decode_in_pool(root: str, is_zip: bool, chunks: list, workers: int, bar) -> np.ndarray:
    context = multiprocessing.get_context("spawn")
    images, starts = None, np.cumsum([0] + [len(chunk) for chunk in chunks])
    first_shape = None
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_open_source, initargs=(root, is_zip))
    try:
        futures = {pool.submit(_decode_chunk, chunk): index for index, chunk in enumerate(chunks)}
        for future in as_completed(futures):
            index = futures[future]
            part = future.result()  # (n, H, W, C); a DataError from the worker is raised here
            if images is None:
                first_shape = (chunks[index][0], part.shape[1:])
                images = np.empty((int(starts[-1]), *part.shape[1:]), dtype=np.uint8)  # (N, H, W, C)
            elif part.shape[1:] != images.shape[1:]:
                raise _size_error(root, chunks[index][0], part.shape[1:], *first_shape)
            images[starts[index]:starts[index + 1]] = part
            bar.update(len(part))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # on an error, stop at once instead of decoding the rest
    return images


def load_image_folder(path, split: str = "train", *, progress: bool = True, workers: int | None = None,
                      index: FolderIndex | None = None):
    """Images (N, H, W, 3) uint8, labels (N,) int32 and class names of one split of an image folder."""
    index = index or index_image_folder(path)
    members, labels = index.members(split)
    images = decode_images(index.root, index.is_zip, members, progress=progress, workers=workers,
                           description=f"decoding {Path(index.root).name}/{split}")
    return images, labels, index.class_names


def folder_fingerprint(index: FolderIndex, split: str) -> list:
    """(member, size, mtime) of each file `split` reads, for the cache key of a plain folder."""
    members, _ = index.members(split)
    rows = []
    for member in members:
        status = (Path(index.root) / member).stat()
        rows.append((member, status.st_size, status.st_mtime_ns))
    return rows
