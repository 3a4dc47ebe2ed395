"""Datasets as uint8 arrays: CIFAR-10/100 archives (safely unpickled), image folders and zips, downloads,
a decoded-array cache, validation splits and subsets. NumPy, Pillow, tqdm and the standard library only.

    from reluattn.data import load_dataset, split_validation, take_subset
    full = load_dataset("cifar10-train.zip", "train")   # or a CIFAR .tar.gz, or None (RELUATTN_DATA / download)
    train, val = split_validation(full, 5000, seed=0)
    train.images  # (N, S, S, C) uint8      train.labels  # (N,) int32      train.class_names  # K names

Every problem with the input raises `DataError` (a ValueError) whose message is one line saying what is
wrong and what to do. Augmentation is the training tool's: see `reluattn/training/augment.py`.
"""

from __future__ import annotations

import os
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .cache import cache_dir, cache_file, cache_key, file_fingerprint, read_cache, write_cache
from .cifar import SPLITS as CIFAR_SPLITS
from .cifar import cifar_folder_files, find_cifar_folder, is_tar_name, read_cifar_archive, read_cifar_folder
from .download import ARCHIVES, fetch_cifar
from .errors import DataError, DataWarning
from .folder import folder_fingerprint, index_image_folder, load_image_folder

DATASETS = ("cifar10", "cifar100", "folder")
FORMATS = ("cifar-archive", "cifar-folder", "image-zip", "image-folder")


@dataclass(frozen=True, eq=False)
class Dataset:
    """A labelled image set held in memory."""
    images: np.ndarray   # (N, S, S, C) uint8
    labels: np.ndarray   # (N,) int32, positions in class_names
    class_names: tuple   # K names
    kind: str            # "cifar10", "cifar100" or "folder"
    split: str           # the split it was read from
    source: str          # where it came from, in words

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def select(self, indices, note: str) -> "Dataset":
        """The images at `indices`, with `note` added to the source description."""
        indices = np.asarray(indices, dtype=np.int64)
        return Dataset(self.images[indices], self.labels[indices], self.class_names, self.kind, self.split,
                       f"{self.source}, {note}")


def detect_format(path) -> str:
    """Which of FORMATS `path` is, from its type, name and first bytes."""
    path = Path(path)
    if path.is_dir():
        return "cifar-folder" if find_cifar_folder(path) is not None else "image-folder"
    if not path.is_file():
        raise DataError(f"{path} does not exist; point --data (or RELUATTN_DATA) at a CIFAR archive "
                        f"(cifar-10-python.tar.gz), its extracted folder, or an image folder / .zip")
    if path.name.lower().endswith(".zip"):
        return "image-zip"
    if is_tar_name(path):
        return "cifar-archive"
    try:
        with open(path, "rb") as file:
            head = file.read(4)
    except OSError as error:
        raise DataError(f"cannot read {path} ({error.strerror or error}); check its permissions") from error
    if head.startswith(b"\x1f\x8b") or tarfile.is_tarfile(path):  # gzip magic, or a plain tar
        return "cifar-archive"
    if zipfile.is_zipfile(path):
        return "image-zip"
    raise DataError(f"{path} is neither a CIFAR archive (.tar.gz), a zip of images nor a folder; point --data "
                    f"at one of those")


def _check_request(path: Path, source_format: str, dataset: str | None, split: str) -> None:
    if dataset == "folder" and source_format.startswith("cifar"):
        raise DataError(f"--dataset folder was asked for but {path} is a CIFAR archive; drop --dataset or use "
                        f"--dataset cifar10/cifar100")
    if dataset in ("cifar10", "cifar100") and source_format.startswith("image"):
        raise DataError(f"--dataset {dataset} was asked for but {path} is an image folder; drop --dataset or use "
                        f"--dataset folder")
    if source_format.startswith("cifar") and split not in CIFAR_SPLITS:
        raise DataError(f"CIFAR data has the splits {', '.join(CIFAR_SPLITS)}; got {split!r}")


def _sources(path: Path, source_format: str, split: str):
    """What the decoded split depends on (for the cache key), and the folder index when one was built.
    A plain folder's fingerprint holds the class list of all splits (a class only another split has shifts
    the labels); any change to a zip or archive changes its own fingerprint (size, mtime, inode)."""
    if source_format == "image-folder":
        index = index_image_folder(path)
        return folder_fingerprint(index, split), index
    if source_format == "cifar-folder":
        return [file_fingerprint(file) for file in cifar_folder_files(path, split) if file.is_file()], None
    return [file_fingerprint(path)], None


def _read(path: Path, source_format: str, split: str, dataset, progress: bool, workers, index):
    if source_format == "cifar-archive":
        return read_cifar_archive(path, split, expected=dataset)
    if source_format == "cifar-folder":
        return read_cifar_folder(path, split, expected=dataset)
    images, labels, class_names = load_image_folder(path, split, progress=progress, workers=workers, index=index)
    return images, labels, class_names, "folder"


DATA_ENV = "RELUATTN_DATA"  # where the data is when no --data is given (the Makefile or CI may set it)


def data_source(data=None) -> str | None:
    """The dataset to read: `data` (a path), else the RELUATTN_DATA variable, else None (meaning the
    canonical CIFAR archive, downloaded into the cache). The one place that reads RELUATTN_DATA."""
    if data is None or str(data) == "":
        data = os.environ.get(DATA_ENV) or None
    return None if data is None else str(Path(data).expanduser().absolute())


def load_dataset(data=None, split: str = "train", *, dataset: str | None = None, cache: bool = True,
                 progress: bool = True, workers: int | None = None) -> Dataset:
    """Load one split as uint8 arrays.

    data:    a CIFAR .tar.gz, its extracted folder, or an image folder / .zip of `<split>/<class>/<image>`;
             None means the RELUATTN_DATA variable, else the CIFAR archive downloaded into the cache folder.
    split:   "train" / "test" for CIFAR; a top-level folder name for image folders.
    dataset: "cifar10", "cifar100", "folder", or None to tell from `data` (it picks what None downloads).
    cache:   keep decoded arrays in the cache folder (RELUATTN_CACHE, else ~/.cache/reluattn).
    workers: processes decoding image files (None or 1: this one; more need a __main__ guard, see folder.py).
    """
    if dataset not in (None, *DATASETS):
        raise DataError(f"--dataset must be one of {', '.join(DATASETS)}; got {dataset!r}")
    if not isinstance(split, str) or not split:
        raise DataError(f"the split must be a folder name such as 'train'; got {split!r}")
    data = data_source(data)
    if data is None:
        if dataset == "folder":
            raise DataError("--dataset folder needs --data PATH (an image folder or .zip of <split>/<class>/<image>)")
        data = fetch_cifar(dataset or "cifar10", progress=progress)
    path = Path(data).expanduser().absolute()
    source_format = detect_format(path)
    _check_request(path, source_format, dataset, split)
    sources, index = _sources(path, source_format, split)
    key = cache_key(source_format, split, sources)
    stored_at = cache_file(path.name, split, key)
    cached = read_cache(stored_at, key) if cache else None
    if cached is not None:
        images, labels, class_names, kind = cached
        if dataset not in (None, kind) and kind != "folder":
            raise DataError(f"--dataset {dataset} was asked for but {path} holds {kind}")
    else:
        images, labels, class_names, kind = _read(path, source_format, split, dataset, progress, workers, index)
        if cache:
            write_cache(stored_at, key, images, labels, class_names, kind)
    return Dataset(images, labels, tuple(class_names), kind, split, f"{kind} '{split}' split of {path}")


def _check_count(name: str, value, low: int, high: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise DataError(f"{name} must be a whole number of images; got {value!r}")
    if not low <= value <= high:
        raise DataError(f"{name} must be between {low} and {high} for {what}; got {value}")
    return int(value)


def split_validation(dataset: Dataset, val_size: int, seed: int = 0) -> tuple[Dataset, Dataset]:
    """(train, validation): validation is the last `val_size` images of a permutation fixed by `seed`,
    train the rest; both keep the source's order. `val_size` 0 gives an empty validation set."""
    count = len(dataset)
    val_size = _check_count("the validation size", val_size, 0, count - 1, f"{count} images")
    order = np.random.default_rng(seed).permutation(count)
    train = np.sort(order[:count - val_size])
    held_out = np.sort(order[count - val_size:])
    return (dataset.select(train, f"{count - val_size} images kept for training (validation seed {seed})"),
            dataset.select(held_out, f"{val_size} images held out for validation (seed {seed})"))


def take_subset(dataset: Dataset, size: int, seed: int = 0) -> Dataset:
    """`size` images drawn without replacement (fixed by `seed`), in the source's order."""
    count = len(dataset)
    size = _check_count("the subset size", size, 1, count, f"{count} images")
    if size == count:
        return dataset
    chosen = np.sort(np.random.default_rng(seed).choice(count, size=size, replace=False))
    return dataset.select(chosen, f"a subset of {size} images (seed {seed})")


__all__ = ["ARCHIVES", "DATA_ENV", "DATASETS", "DataError", "DataWarning", "Dataset", "FORMATS", "cache_dir",
           "detect_format", "data_source", "fetch_cifar", "index_image_folder", "load_dataset", "split_validation",
           "take_subset"]
