"""Image-folder datasets (folders and zips of <split>/<class>/<image>) and the shared CIFAR-10 JPEG zip."""

import os
from pathlib import Path

import numpy as np
import pytest

from data_builders import encode_image, image_folder_files, labelled_pixels, write_files, write_zip
from data_builders import private_cache, one_line_error  # noqa: F401  (private_cache is an autouse fixture)
from reluattn.data import DataError, detect_format, index_image_folder, load_dataset
from reluattn.data import decode as decode_module
from reluattn.data.decode import decode_images

LAYOUT = {"train": {"truck": 3, "cat": 2, "airplane": 4}, "test": {"cat": 1, "truck": 2, "airplane": 1}}
SORTED_CLASSES = ("airplane", "cat", "truck")


@pytest.fixture(params=["folder", "zip"])
def image_dataset(request, tmp_path):
    files, truth = image_folder_files(LAYOUT)
    if request.param == "folder":
        return write_files(tmp_path / "images", files), truth
    return write_zip(tmp_path / "images.zip", files), truth


def check_labels_match_pixels(data):
    # Each image's red channel holds its class index, green its number; the corner mark shows orientation.
    assert data.images.dtype == np.uint8 and data.images.shape[1:] == (8, 8, 3)
    assert data.labels.dtype == np.int32
    np.testing.assert_array_equal(data.images[:, 3, 3, 0], data.labels)
    assert (data.images[:, 0, 0, 2] == 255).all() and (data.images[:, 7, 7, 2] == 0).all()


@pytest.mark.parametrize("split", ["train", "test"])
def test_classes_sorted_and_labels_right(image_dataset, split):
    path, truth = image_dataset
    data = load_dataset(path, split, cache=False, progress=False)
    assert data.class_names == SORTED_CLASSES and data.kind == "folder" and data.split == split
    assert len(data) == len(truth[split])
    check_labels_match_pixels(data)
    counts = {name: int((data.labels == SORTED_CLASSES.index(name)).sum()) for name in SORTED_CLASSES}
    assert counts == {name: LAYOUT[split].get(name, 0) for name in SORTED_CLASSES}
    # Sorted by class, then by file name.
    assert list(data.labels) == sorted(data.labels)
    for label, name in enumerate(SORTED_CLASSES):
        np.testing.assert_array_equal(data.images[data.labels == label, 3, 3, 1], np.arange(counts[name]))


def test_class_numbering_is_shared_by_splits(tmp_path):
    # "bird" exists only in train: test must still number "cat" as 1, not 0.
    files, _ = image_folder_files({"train": {"bird": 1, "cat": 1}, "test": {"cat": 2}})
    data = load_dataset(write_files(tmp_path / "d", files), "test", cache=False)
    assert data.class_names == ("bird", "cat") and list(data.labels) == [1, 1]


def test_missing_split_lists_the_existing_ones(image_dataset):
    path, _ = image_dataset
    with pytest.raises(DataError) as excinfo:
        load_dataset(path, "validation", cache=False)
    message = one_line_error(excinfo)
    assert "validation" in message and "test, train" in message


@pytest.mark.parametrize("wrapper", ["mydata/", "./", "./mydata/"])
def test_zip_with_one_wrapping_folder(tmp_path, wrapper):
    files, truth = image_folder_files(LAYOUT)
    path = write_zip(tmp_path / "wrapped.zip", {f"{wrapper}{name}": data for name, data in files.items()})
    data = load_dataset(path, "train", cache=False)
    assert data.class_names == SORTED_CLASSES and len(data) == len(truth["train"])
    check_labels_match_pixels(data)


def test_hidden_and_non_image_files_are_ignored(tmp_path):
    files, truth = image_folder_files(LAYOUT)
    files.update({"README.txt": b"about", "train/cat/.DS_Store": b"x", "__MACOSX/train/cat/._0000.png": b"x",
                  "train/.ipynb_checkpoints/x.png": b"garbage", "train/cat/notes.txt": b"hi"})
    for path in (write_files(tmp_path / "f", files), write_zip(tmp_path / "f.zip", files)):
        data = load_dataset(path, "train", cache=False)
        assert data.class_names == SORTED_CLASSES and len(data) == len(truth["train"])


def test_grayscale_and_palette_images_become_rgb(tmp_path):
    from PIL import Image
    import io
    gray = io.BytesIO()
    Image.fromarray(np.full((8, 8), 77, np.uint8)).save(gray, format="PNG")
    palette = io.BytesIO()
    Image.fromarray(labelled_pixels(0, 5)).convert("P").save(palette, format="PNG")
    files = {"train/a/gray.png": gray.getvalue(), "train/a/palette.png": palette.getvalue(),
             "train/b/rgb.jpg": encode_image(labelled_pixels(1, 9), "JPEG")}
    data = load_dataset(write_files(tmp_path / "f", files), "train", cache=False)
    assert data.images.shape == (3, 8, 8, 3)
    assert (data.images[0] == 77).all()  # gray.png sorts first; its one channel is copied to all three
    assert list(data.labels) == [0, 0, 1]
    assert abs(int(data.images[2, 3, 3, 1]) - 9) <= 3  # JPEG is lossy


@pytest.mark.parametrize("files, expected", [
    ({}, "holds no JPEG/PNG images"),
    ({"notes.txt": b"x", "train/readme.md": b"y"}, "holds no JPEG/PNG images"),
    ({"cat/0001.png": "IMAGE", "dog/0001.png": "IMAGE"}, "one folder deep"),
    ({"train/0001.png": "IMAGE"}, "one folder deep"),
    ({"train/cat/0001.png": "IMAGE", "train/cat/deeper/0002.png": "IMAGE"}, "is not at <split>/<class>/<image>"),
])
@pytest.mark.parametrize("container", ["folder", "zip"])
def test_bad_layouts(tmp_path, files, expected, container):
    files = {name: encode_image(labelled_pixels(0, 0)) if data == "IMAGE" else data for name, data in files.items()}
    path = write_files(tmp_path / "f", files) if container == "folder" else write_zip(tmp_path / "f.zip", files)
    (tmp_path / "f").mkdir(exist_ok=True)
    with pytest.raises(DataError) as excinfo:
        load_dataset(path, "train", cache=False)
    assert expected in one_line_error(excinfo)


def test_empty_class_folder_is_an_error(tmp_path):
    files, _ = image_folder_files(LAYOUT)
    root = write_files(tmp_path / "f", files)
    (root / "train" / "dog").mkdir()
    with pytest.raises(DataError) as excinfo:
        load_dataset(root, "train", cache=False)
    assert "train/dog" in one_line_error(excinfo) and "no JPEG/PNG images" in str(excinfo.value)


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("container", ["folder", "zip"])
def test_unreadable_image_is_named(tmp_path, monkeypatch, workers, container):
    monkeypatch.setattr(decode_module, "CHUNK_SIZE", 3)  # several chunks, so several workers get work
    files, _ = image_folder_files(LAYOUT)
    files["train/truck/0001.png"] = b"\x89PNG\r\n\x1a\n this is not really a png"
    files["train/cat/0000.png"] = files["train/cat/0000.png"][:40]  # a truncated file
    path = write_files(tmp_path / "f", files) if container == "folder" else write_zip(tmp_path / "f.zip", files)
    with pytest.raises(DataError) as excinfo:
        load_dataset(path, "train", cache=False, workers=workers)
    message = one_line_error(excinfo)
    assert "train/cat/0000.png" in message or "train/truck/0001.png" in message
    assert "remove or replace it" in message


@pytest.mark.filterwarnings("error")  # a failed worker pool falls back with a warning: not here
@pytest.mark.parametrize("odd", ["train/truck/0000.png", "train/truck/0002.png"])  # first of a chunk, or inside
@pytest.mark.parametrize("workers", [1, 2])
def test_mixed_sizes_name_the_file(tmp_path, monkeypatch, workers, odd):
    monkeypatch.setattr(decode_module, "CHUNK_SIZE", 3)  # train: airplane 0-3, cat 4-5, truck 6-8
    files, _ = image_folder_files(LAYOUT)
    files[odd] = encode_image(labelled_pixels(2, 2, side=16))
    with pytest.raises(DataError) as excinfo:
        load_dataset(write_zip(tmp_path / "f.zip", files), "train", cache=False, workers=workers)
    message = one_line_error(excinfo)
    assert odd in message and "16x16" in message and "8x8" in message


@pytest.mark.filterwarnings("error")
def test_worker_processes_decode_the_same_images(tmp_path, monkeypatch):
    monkeypatch.setattr(decode_module, "CHUNK_SIZE", 2)
    files, _ = image_folder_files(LAYOUT)
    path = write_zip(tmp_path / "f.zip", files)
    serial = load_dataset(path, "train", cache=False, workers=1)
    parallel = load_dataset(path, "train", cache=False, workers=2)
    np.testing.assert_array_equal(serial.images, parallel.images)
    np.testing.assert_array_equal(serial.labels, parallel.labels)


@pytest.mark.parametrize("bad_name", ["../train/cat/0000.png", "/train/cat/0009.png"])
def test_zip_member_escaping_the_folder_is_refused(tmp_path, bad_name):
    files, _ = image_folder_files(LAYOUT)
    files[bad_name] = encode_image(labelled_pixels(0, 0))
    with pytest.raises(DataError, match="leaves the archive"):
        load_dataset(write_zip(tmp_path / "f.zip", files), "train", cache=False)
    assert not (tmp_path.parent / "train").exists()


def test_truncated_zip_is_a_clear_error(tmp_path):
    files, _ = image_folder_files(LAYOUT)
    path = write_zip(tmp_path / "f.zip", files)
    path.write_bytes(path.read_bytes()[:-200])
    with pytest.raises(DataError) as excinfo:
        load_dataset(path, "train", cache=False)
    assert "truncated or corrupt" in one_line_error(excinfo)


def test_missing_path_is_a_clear_error(tmp_path):
    with pytest.raises(DataError) as excinfo:
        load_dataset(tmp_path / "nowhere.zip")
    assert "does not exist" in one_line_error(excinfo) and "--data" in str(excinfo.value)


# ------------------------------------------------------------------------------------- the shared zip

SHARED_ZIP = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "cifar10-train.zip"
ENVIRONMENT_DATA = os.environ.get("RELUATTN_DATA")  # read before the fixture hides it from load_dataset
CIFAR10_ORDER = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def shared_zip() -> Path:
    """RELUATTN_DATA when it names a zip, else ../shared/data/cifar10-train.zip beside the repository."""
    candidate = ENVIRONMENT_DATA
    path = Path(candidate) if candidate and candidate.endswith(".zip") else SHARED_ZIP
    assert path.is_file(), (f"the shared CIFAR-10 zip is missing at {path}: set RELUATTN_DATA to "
                            f"cifar10-train.zip or place it at ../shared/data/ beside the repository")
    return path


def test_shared_cifar10_zip_index_and_a_sample():
    path = shared_zip()
    assert detect_format(path) == "image-zip"
    index = index_image_folder(path)
    assert index.class_names == CIFAR10_ORDER and set(index.splits) == {"train"}
    members, labels = index.members("train")
    assert len(members) == 50_000 and np.bincount(labels).tolist() == [5000] * 10
    for member, label in zip(members, labels):
        assert member.split("/")[1] == CIFAR10_ORDER[label]
    sample = list(range(0, 50_000, 500))  # 100 images, 10 of each class
    images = decode_images(index.root, True, [members[i] for i in sample], progress=False, workers=1)
    assert images.shape == (100, 32, 32, 3) and images.dtype == np.uint8
    assert 60 < images.mean() < 180 and images.std() > 30  # real photographs, not blank


@pytest.mark.parametrize("workers", [0, -1, 1.5, True])
def test_bad_worker_counts_are_refused(tmp_path, workers):
    files, _ = image_folder_files(LAYOUT)
    with pytest.raises(DataError, match="workers must be"):
        load_dataset(write_zip(tmp_path / "f.zip", files), "train", cache=False, workers=workers)
