"""Image-folder datasets: a folder or a .zip holding `<split>/<class>/<image>` (JPEG or PNG).

The class index of an image is the position of its class folder's name in the sorted list of class names
(taken over all splits, so every split numbers the classes alike). Class names are compared in Unicode NFC
form, so `café` spelt with a combining accent (as macOS writes it) and precomposed is one class (with a
warning); names differing only in case stay two classes, with a warning. Symlinked folders are followed
(a link back to one of its own parents is not), and entries that are not regular files (FIFOs, sockets,
devices, broken links) are skipped with a warning, so nothing blocks on them. Decoding: decode.py.
"""

from __future__ import annotations

import os
import unicodedata
import warnings
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .decode import decode_images
from .errors import DataError, DataWarning

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")


@dataclass(frozen=True)
class FolderIndex:
    """What an image folder holds, without decoding anything."""
    root: str                 # the folder or the .zip
    is_zip: bool
    class_names: tuple        # sorted class-folder names (NFC); a label is a position in this tuple
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


def _walk(directory: str, prefix: str, parents: tuple, found: tuple[list, list, list]) -> None:
    """Add the regular files, folders and other entries below `directory` to `found`, following symlinks
    except into a folder that is one of its own `parents` ((device, inode) pairs)."""
    files, folders, others = found
    try:
        entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
    except OSError as error:
        raise DataError(f"cannot list the folder {directory} ({error.strerror or error}); check its "
                        f"permissions") from error
    for entry in entries:
        name = prefix + entry.name
        if _hidden([entry.name]):
            continue  # .git, .ipynb_checkpoints, __MACOSX, .DS_Store: never part of a dataset
        if entry.is_dir():  # follows a symlink: a linked class folder is read like a real one
            status = entry.stat()
            identity = (status.st_dev, status.st_ino)
            if identity in parents:
                warnings.warn(f"{entry.path} links back to one of its parent folders; not following it",
                              DataWarning)
                continue
            folders.append(name)
            _walk(entry.path, name + "/", parents + (identity,), found)
        elif entry.is_file():  # follows a symlink too; False for FIFOs, sockets, devices and broken links
            files.append(name)
        else:
            others.append(name)


def _list_folder(path: Path) -> tuple[list[str], list[str]]:
    files, folders, others = [], [], []
    status = path.stat()
    _walk(str(path), "", ((status.st_dev, status.st_ino),), (files, folders, others))
    skipped = [name for name in others if name.lower().endswith(IMAGE_SUFFIXES)]
    if skipped:
        warnings.warn(f"{path}: skipping {len(skipped)} entr{'y' if len(skipped) == 1 else 'ies'} that "
                      f"{'is' if len(skipped) == 1 else 'are'} not a regular file (FIFO, socket, device or broken "
                      f"link): {', '.join(skipped[:3])}{' ...' if len(skipped) > 3 else ''}", DataWarning)
    return files, folders


def _class_names(raw_names: set, path: Path) -> dict:
    """{folder name as found: class name}: names equal in NFC form become one class (with a warning);
    names differing only in case are two classes (with a warning)."""
    canonical = {name: unicodedata.normalize("NFC", name) for name in raw_names}
    by_form: dict = {}
    for name, form in canonical.items():
        by_form.setdefault(form, set()).add(name)
    for form, names in sorted(by_form.items()):
        if len(names) > 1:
            warnings.warn(f"{path}: the class folders {' and '.join(map(ascii, sorted(names)))} differ only in "
                          f"Unicode normalisation; reading them as the one class {form!r}", DataWarning)
    by_case: dict = {}
    for form in by_form:
        by_case.setdefault(form.casefold(), []).append(form)
    for forms in by_case.values():
        if len(forms) > 1:
            warnings.warn(f"{path}: the class folders {' and '.join(sorted(forms))} differ only in case; they "
                          f"are read as {len(forms)} different classes: rename them if they are one", DataWarning)
    return canonical


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
    class_of = _class_names({parts[len(prefix) + 1] for parts in images}, path)
    class_names = tuple(sorted(set(class_of.values())))
    split_names = {parts[len(prefix)] for parts in images}
    for parts in sorted({tuple(name.split("/"))[len(prefix):] for name in folders}):
        if len(parts) == 2 and parts[0] in split_names and parts[1] not in class_of and not _hidden(parts):
            raise DataError(f"{path}: class folder {'/'.join(prefix + parts)} holds no JPEG/PNG images in any "
                            f"split; add images or remove the folder")
    label_of = {name: position for position, name in enumerate(class_names)}
    splits: dict = {}
    for parts, member in member_of.items():
        split, class_name = parts[len(prefix):len(prefix) + 2]
        splits.setdefault(split, []).append((member, label_of[class_of[class_name]]))
    for split, entries in splits.items():  # sorted by class, then by file name
        splits[split] = tuple(sorted(entries, key=lambda entry: (entry[1], entry[0])))
    return FolderIndex(str(path), is_zip, class_names, splits)


def load_image_folder(path, split: str = "train", *, progress: bool = True, workers: int | None = None,
                      index: FolderIndex | None = None):
    """Images (N, H, W, 3) uint8, labels (N,) int32 and class names of one split of an image folder."""
    index = index or index_image_folder(path)
    members, labels = index.members(split)
    images = decode_images(index.root, index.is_zip, members, progress=progress, workers=workers,
                           description=f"decoding {Path(index.root).name}/{split}")
    return images, labels, index.class_names


def folder_fingerprint(index: FolderIndex, split: str) -> list:
    """What a split of a plain folder depends on, for its cache key: the folder's identity (resolved
    path, device, inode), the class list of all splits, and (member, size, mtime) of each file read."""
    members, _ = index.members(split)
    rows = []
    for member in members:
        status = (Path(index.root) / member).stat()
        rows.append((member, status.st_size, status.st_mtime_ns))
    root = Path(index.root).resolve()
    status = root.stat()
    return [[str(root), status.st_dev, status.st_ino], list(index.class_names), rows]
