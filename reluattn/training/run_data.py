"""The images a run trains and validates on, chosen from its TrainConfig the same way every time.

    training split -> hold out `test_split` images as the held-out test split, if asked (fixed by `data_seed`)
                   -> hold out `val_split` of the rest for validation (fixed by `data_seed`)
                   -> keep `subset` of the rest, if asked (also fixed by `data_seed`)
    validation     =  the held-out images, or the dataset's "test" split when val_split is 0
    test           =  the `test_split` images: scored once, at the end of the run; no choice is made on them

The test images are carved first, so every run of one dataset and `data_seed` shares them whatever its
validation size; with `test_split` 0 the validation images are the same as before the option existed.

`evaluate` and `attention` rebuild the same "val" split from a checkpoint's config, so a run's held-out
images can be scored again later; the images it rebuilds from must have the fingerprint the checkpoint
recorded, or the positions would pick other images (training ones, in a grown or repacked dataset).
With `image_size` set (`--image-size`), every split is upsampled to it by nearest neighbour (each pixel
repeated factor x factor times; see `upsample_images`), for training and evaluation alike.
"""

from __future__ import annotations

import hashlib
import dataclasses
from dataclasses import dataclass

import numpy as np

from ..data import (DataError, data_source, detect_format, index_image_folder, load_dataset, split_validation,
                    take_subset)
from ..data.cifar import SPLITS as CIFAR_SPLITS
from ..data.limits import IMAGE_SIDE_VARIABLE, image_side_limit
from .config import TrainConfig, memory_available_bytes


@dataclass(frozen=True)
class RunData:
    train: object          # reluattn.data.Dataset: images (N, S, S, C) uint8, labels (N,) int32
    validation: object     # the same, or None when there is nothing to validate on
    description: dict      # what a checkpoint records about the data (JSON)
    test: object = None    # the held-out test split (`test_split` images), or None


def available_splits(data, dataset: str | None) -> tuple[str, ...]:
    """The split names `data` holds (train/test for CIFAR, the top-level folders of an image folder)."""
    path = data_source(data)
    if path is None or detect_format(path).startswith("cifar"):
        return tuple(CIFAR_SPLITS)
    return tuple(sorted(index_image_folder(path).splits))


def channel_statistics(images, chunk: int = 4096) -> tuple[list, list]:
    """Per-channel mean and standard deviation of pixel / 255 over uint8 (N, S, S, C) images."""
    channels = images.shape[-1]
    total = np.zeros(channels)
    squares = np.zeros(channels)
    for start in range(0, len(images), chunk):  # in chunks: a float64 copy of all of CIFAR is 1.2 GB
        pixels = images[start:start + chunk].reshape(-1, channels).astype(np.float64) / 255.0  # (n, C)
        total += pixels.sum(axis=0)
        squares += np.square(pixels).sum(axis=0)
    count = images.size // channels
    mean = total / count
    std = np.sqrt(np.maximum(squares / count - np.square(mean), 0.0))
    std = np.where(std > 1e-3, std, 1.0)  # a constant channel: leave its scale alone
    return [round(float(m), 4) for m in mean], [round(float(s), 4) for s in std]


def data_fingerprint(*datasets, image_size: int | None = None) -> str:
    """SHA-256 of the images, labels and class names of `datasets` (None entries count as absent): equal
    fingerprints mean the same pixels in the same order with the same labels. With `image_size`, of the
    images upsampled to it (`upsample_images`), computed in chunks without an upsampled copy of them all."""
    digest = hashlib.sha256()
    for dataset in datasets:
        if dataset is None:
            digest.update(b"none")
            continue
        images = dataset.images
        shape = images.shape
        if image_size is not None and image_size != shape[1]:
            shape = (shape[0], image_size, image_size, shape[3])  # what upsample_images gives
        digest.update(repr((shape, list(dataset.class_names))).encode())
        for start in range(0, len(images), 1024):
            digest.update(np.ascontiguousarray(upsample_images(images[start:start + 1024], image_size)).data)
        digest.update(np.ascontiguousarray(dataset.labels, dtype=np.int64).data)
    return f"sha256:{digest.hexdigest()}"


def upsample_images(images: np.ndarray, size: int | None) -> np.ndarray:
    """uint8 (N, S, S, C) images upsampled by nearest neighbour to (N, size, size, C); size a multiple of S.

    Nearest neighbour, not bilinear: it adds no new pixel values (the per-channel mean and std are exactly
    those of the stored images), stays uint8, and at patch size P*factor gives the stored-size model's
    tokens back, so longer sequences hold exactly the same information."""
    side = images.shape[1]
    if size is None or size == side:
        return images
    if size % side:
        raise ValueError(f"--image-size {size} must be a whole multiple of the stored image side {side} "
                         f"(nearest-neighbour upsampling repeats each pixel); try {2 * side}")
    factor = size // side
    return np.repeat(np.repeat(images, factor, axis=1), factor, axis=2)  # (N, size, size, C)


def check_upsampled_size(size: int | None, count: int, channels: int) -> None:
    """Refuse an --image-size over the image-side limit, or whose upsampled images would not fit in memory."""
    if size is None:
        return
    limit = image_side_limit()
    if size > limit:
        raise ValueError(f"--image-size {size} is over the {limit}-pixel limit on image sides; choose a smaller "
                         f"--image-size (or raise {IMAGE_SIDE_VARIABLE} if the machine can hold it)")
    needed = count * size * size * channels  # uint8 pixels of the upsampled training and validation images
    available = memory_available_bytes()
    if available is not None and needed > available:
        raise ValueError(f"--image-size {size} would hold {count:,} images of {size}x{size}x{channels} bytes, "
                         f"{needed / 2**30:,.1f} GiB, more than the {available / 2**30:,.1f} GiB of memory "
                         f"available now; choose a smaller --image-size (or --subset)")


def _upsampled(dataset, size: int | None):
    if size is None or dataset is None:
        return dataset
    return dataclasses.replace(dataset, images=upsample_images(dataset.images, size))


def carve_held_out(full, config: TrainConfig, path) -> tuple:
    """(rest, test) of a dataset's training split: the `test_split` images held out first (None when 0)."""
    if not config.test_split:
        return full, None
    if "test" in available_splits(path, config.dataset):
        raise DataError(f"{path} has a test split of its own: use it (evaluate --split test) instead of "
                        f"--test-split, which carves one out of training images")
    rest, test = split_validation(full, config.test_split, config.data_seed)
    return rest, dataclasses.replace(test, source=test.source.replace("for validation", "as the test split"))


def load_run_data(config: TrainConfig, data=None, *, progress: bool = True) -> RunData:
    """Training, validation and held-out test images for `config` (not yet resolved: any preset or saved
    config)."""
    path = data_source(data)
    full, test = carve_held_out(load_dataset(path, "train", dataset=config.dataset, progress=progress), config, path)
    if config.val_split > 0:
        train, validation = split_validation(full, config.val_split, config.data_seed)
        validation_split = "val"
    elif "test" in available_splits(path, config.dataset):
        train, validation = full, load_dataset(path, "test", dataset=config.dataset, progress=progress)
        validation_split = "test"
    else:
        train, validation, validation_split = full, None, None
    if config.subset is not None:
        train = take_subset(train, config.subset, config.data_seed)
    stored_size, _, channels = train.images.shape[1:]
    check_upsampled_size(config.image_size, len(train) + (0 if validation is None else len(validation)), channels)
    mean, std = channel_statistics(train.images)  # nearest-neighbour upsampling leaves them exactly as they are
    train, validation = _upsampled(train, config.image_size), _upsampled(validation, config.image_size)
    test = _upsampled(test, config.image_size)
    image_size = train.images.shape[1]
    description = {
        "path": path,                       # None: the downloaded CIFAR archive
        "kind": train.kind,
        "source": train.source,
        "class_names": list(train.class_names),
        "image_size": int(image_size),      # what the model sees (after --image-size upsampling)
        "stored_image_size": int(stored_size),
        "channels": int(channels),
        "num_train": len(train),
        "num_validation": 0 if validation is None else len(validation),
        "validation_split": validation_split,
        "num_test": 0 if test is None else len(test),  # the held-out test split (--test-split)
        "mean": mean,                       # per channel, of pixel / 255: what normalisation subtracts
        "std": std,                         # and divides by (training and evaluation alike)
        "fingerprint": data_fingerprint(train, validation),  # what --resume checks it continues on
    }
    return RunData(train, validation, description, test)


def load_split(config: TrainConfig, description: dict, data, split: str | None, *, progress: bool = True):
    """(images, labels, split name) of one split, for evaluating a run's checkpoint.

    `split` None means "test" when the dataset has one or the run held one out, else "val" (the run's
    validation images)."""
    path = data_source(data) or description.get("path")
    splits = available_splits(path, config.dataset)
    if split is None:
        split = "test" if "test" in splits or config.test_split else "val"
    if split == "val" or (split == "test" and config.test_split):
        if split == "val" and config.val_split == 0:
            raise DataError(f"this run held out no validation images (val_split 0); choose --split from "
                            f"{', '.join(splits)}")
        rest, test = carve_held_out(load_dataset(path, "train", dataset=config.dataset, progress=progress),
                                    config, path)
        train, validation = split_validation(rest, config.val_split, config.data_seed)
        _check_held_out(config, description, train, validation, path)  # also vouches for the test carve
        dataset = test if split == "test" else validation
    else:
        if split not in splits:
            raise DataError(f"{path} has no split {split!r}; choose --split from {', '.join(splits + ('val',))}")
        dataset = load_dataset(path, split, dataset=config.dataset, progress=progress)
    expected = description.get("class_names")
    if expected is not None and list(dataset.class_names) != list(expected):
        raise DataError(f"the classes of {path} ({len(dataset.class_names)}: {', '.join(dataset.class_names[:4])}"
                        f"...) are not the ones the run was trained on ({len(expected)}: "
                        f"{', '.join(expected[:4])}...); point --data at the run's dataset")
    return upsample_images(dataset.images, config.image_size), dataset.labels, split


def _check_held_out(config: TrainConfig, description: dict, train, validation, path) -> None:
    """Refuse a rebuilt "val" split whose data is not the data the run recorded (its fingerprint)."""
    saved = description.get("fingerprint")  # absent in checkpoints written before it was recorded
    if not saved:
        return
    if config.subset is not None:
        train = take_subset(train, config.subset, config.data_seed)
    now = data_fingerprint(train, validation, image_size=config.image_size)
    if now != saved:
        where = path or "the downloaded CIFAR archive"
        raise DataError(f"the images in {where} are not the ones the run was trained and validated on (fingerprint "
                        f"saved {saved[:19]}..., now {now[:19]}...), so 'val', rebuilt by position, would hold other "
                        f"images; point --data at the run's data, or score a split by name (--split test)")
