"""load_dataset's choices (RELUATTN_DATA, --dataset, format detection), validation splits and subsets."""

import numpy as np
import pytest

from data_builders import image_folder_files, write_cifar_archive, write_cifar_folder, write_files, write_zip
from data_builders import private_cache  # noqa: F401  (private_cache is an autouse fixture)
from reluattn.data import DataError, Dataset, detect_format, load_dataset, split_validation, take_subset


def numbered(count: int) -> Dataset:
    """A dataset whose image i is filled with i % 256 and labelled i % 7, so any selection can be checked."""
    values = (np.arange(count) % 256).astype(np.uint8)
    images = np.broadcast_to(values[:, None, None, None], (count, 4, 4, 3)).copy()
    labels = (np.arange(count) % 7).astype(np.int32)
    return Dataset(images, labels, tuple(f"c{i}" for i in range(7)), "folder", "train", "numbers")


def positions(dataset: Dataset) -> np.ndarray:
    return dataset.images[:, 0, 0, 0].astype(np.int64)


def test_split_validation_is_the_tail_of_a_seeded_permutation():
    data = numbered(200)
    train, val = split_validation(data, 50, seed=3)
    order = np.random.default_rng(3).permutation(200)
    np.testing.assert_array_equal(positions(val), np.sort(order[150:]))
    np.testing.assert_array_equal(positions(train), np.sort(order[:150]))
    np.testing.assert_array_equal(val.labels, positions(val) % 7)  # labels travel with their images
    assert len(train) == 150 and len(val) == 50 and train.class_names == data.class_names
    assert "validation" in val.source and "seed 3" in val.source


def test_split_validation_is_deterministic_and_seed_dependent():
    data = numbered(200)
    first = positions(split_validation(data, 20, seed=0)[1])
    np.testing.assert_array_equal(first, positions(split_validation(data, 20, seed=0)[1]))
    assert not np.array_equal(first, positions(split_validation(data, 20, seed=1)[1]))


def test_split_validation_zero_and_bad_sizes():
    data = numbered(10)
    train, val = split_validation(data, 0)
    assert len(train) == 10 and len(val) == 0 and val.images.shape == (0, 4, 4, 3)
    for bad in (10, 11, -1, 2.5, True, "3"):
        with pytest.raises(DataError):
            split_validation(data, bad)


def test_take_subset():
    data = numbered(100)
    subset = take_subset(data, 30, seed=5)
    assert len(subset) == 30 and len(set(positions(subset))) == 30
    np.testing.assert_array_equal(subset.labels, positions(subset) % 7)
    assert list(positions(subset)) == sorted(positions(subset))
    np.testing.assert_array_equal(positions(subset), positions(take_subset(data, 30, seed=5)))
    assert not np.array_equal(positions(subset), positions(take_subset(data, 30, seed=6)))
    assert take_subset(data, 100) is data
    for bad in (0, 101, -5, 1.0):
        with pytest.raises(DataError, match="subset size"):
            take_subset(data, bad)


def test_relu_attn_data_variable_is_the_default(tmp_path, monkeypatch):
    files, _ = image_folder_files({"train": {"a": 2, "b": 1}})
    monkeypatch.setenv("RELUATTN_DATA", str(write_zip(tmp_path / "d.zip", files)))
    data = load_dataset(progress=False)
    assert data.class_names == ("a", "b") and len(data) == 3


def test_detect_format(tmp_path):
    archive = write_cifar_archive(tmp_path, "cifar10")[0]
    renamed = tmp_path / "download.bin"
    renamed.write_bytes(archive.read_bytes())
    extracted = write_cifar_folder(tmp_path / "x", "cifar100")[0]
    files, _ = image_folder_files({"train": {"a": 1}})
    zipped = write_zip(tmp_path / "noext", files)
    assert detect_format(archive) == "cifar-archive" and detect_format(renamed) == "cifar-archive"
    assert detect_format(extracted) == "cifar-folder"
    assert detect_format(write_files(tmp_path / "f", files)) == "image-folder"
    assert detect_format(zipped) == "image-zip"
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    with pytest.raises(DataError, match="neither a CIFAR archive"):
        detect_format(other)


def test_dataset_choice_is_checked(tmp_path):
    files, _ = image_folder_files({"train": {"a": 1}})
    folder = write_files(tmp_path / "f", files)
    with pytest.raises(DataError, match="image folder"):
        load_dataset(folder, dataset="cifar10")
    with pytest.raises(DataError, match="must be one of"):
        load_dataset(folder, dataset="imagenet")
    with pytest.raises(DataError, match="needs --data"):
        load_dataset(None, dataset="folder")
    assert len(load_dataset(folder, dataset="folder", progress=False)) == 1
