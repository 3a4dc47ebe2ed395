"""Image-folder datasets (folders and zips of <split>/<class>/<image>) and the shared CIFAR-10 JPEG zip."""

import os
import threading
import tracemalloc
import unicodedata
import warnings
from pathlib import Path

import numpy as np
import pytest

from data_builders import (blank_gray_png, declare_zip_size, encode_image, image_folder_files, labelled_pixels,
                           png_bytes, write_files, write_zip, write_zip_bomb)
from data_builders import private_cache, one_line_error  # noqa: F401  (private_cache is an autouse fixture)
from reluattn.data import DataError, DataWarning, detect_format, index_image_folder, load_dataset
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


# ------------------------------------------------------------------------- sizes, depths and limits

@pytest.mark.parametrize("channels", [1, 2, 3, 4], ids=["gray", "gray-alpha", "rgb", "rgba"])
def test_16_bit_pngs_are_scaled_not_clipped(tmp_path, channels):
    # 257 * k is k in 8 bits; 65535 is 255. Clipping made every value above 255 white.
    levels = np.arange(64, dtype=np.uint16).reshape(8, 8) * 4  # 0, 4, ..., 252
    pixels = levels * 257 if channels == 1 else np.stack([levels * 257] * channels, axis=-1)
    if channels in (2, 4):
        pixels[..., -1] = 65535  # opaque
    files = {"train/a/0.png": png_bytes(pixels, bit_depth=16), "train/b/0.png": png_bytes(pixels[:, ::-1], 16)}
    data = load_dataset(write_files(tmp_path / "f", files), "train", cache=False)
    assert data.images.shape == (2, 8, 8, 3)
    for channel in range(3):
        np.testing.assert_array_equal(data.images[0, :, :, channel], levels)
        np.testing.assert_array_equal(data.images[1, :, :, channel], levels[:, ::-1])


def test_16_bit_png_extremes(tmp_path):
    pixels = np.array([[0, 255, 256, 65535]] * 4, dtype=np.uint16)
    data = load_dataset(write_files(tmp_path / "f", {"train/a/0.png": png_bytes(pixels, 16)}), "train", cache=False)
    np.testing.assert_array_equal(data.images[0, 0, :, 0], [0, 0, 1, 255])  # the high byte


@pytest.fixture(scope="module")
def huge_png():
    return blank_gray_png(9000, 9000)  # 0.4 MB on disk, 243 MB as RGB pixels


@pytest.mark.parametrize("container", ["folder", "zip"])
def test_huge_image_is_a_clear_error(tmp_path, container, huge_png):
    files, _ = image_folder_files(LAYOUT)
    files["train/cat/0001.png"] = huge_png
    path = write_files(tmp_path / "f", files) if container == "folder" else write_zip(tmp_path / "f.zip", files)
    with pytest.raises(DataError) as excinfo:
        load_dataset(path, "train", cache=False)
    message = one_line_error(excinfo)
    assert "train/cat/0001.png" in message and "9000x9000" in message and "1024x1024 limit" in message
    assert "RELUATTN_MAX_IMAGE_SIDE=9000" in message


def test_image_side_limit_can_be_raised(tmp_path, monkeypatch):
    files, _ = image_folder_files({"train": {"cat": 2}}, side=16)
    path = write_files(tmp_path / "f", files)
    monkeypatch.setenv("RELUATTN_MAX_IMAGE_SIDE", "15")
    with pytest.raises(DataError, match="16x16 pixels, larger than the 15x15 limit"):
        load_dataset(path, "train", cache=False)
    monkeypatch.setenv("RELUATTN_MAX_IMAGE_SIDE", "16")
    assert load_dataset(path, "train", cache=False).images.shape == (2, 16, 16, 3)


@pytest.mark.parametrize("container", ["folder", "zip"])
def test_non_square_images_are_a_clear_error_at_load_time(tmp_path, container):
    files = {f"train/cat/{n}.png": encode_image(np.zeros((30, 40, 3), np.uint8)) for n in range(3)}
    path = write_files(tmp_path / "f", files) if container == "folder" else write_zip(tmp_path / "f.zip", files)
    with pytest.raises(DataError) as excinfo:
        load_dataset(path, "train", cache=False)
    message = one_line_error(excinfo)
    assert "train/cat/0.png" in message and "40x30" in message and "not square" in message


def test_zip_member_over_the_limit_is_refused_from_its_header(tmp_path, monkeypatch):
    files, _ = image_folder_files(LAYOUT)
    path = write_zip_bomb(tmp_path / "f.zip", "train/cat/bomb.png", 3 << 20, files)  # 3 MiB of zeros, 3 KB
    monkeypatch.setenv("RELUATTN_MAX_MEMBER_MB", "2")
    with pytest.raises(DataError) as excinfo:
        load_dataset(path, "train", cache=False)
    message = one_line_error(excinfo)
    assert "train/cat/bomb.png declares 3.0 MiB, over the 2 MiB limit" in message
    assert "RELUATTN_MAX_MEMBER_MB=3" in message


def test_zip_member_declaring_300_mib_is_refused_under_the_default_limit(tmp_path):
    files, _ = image_folder_files(LAYOUT)
    path = declare_zip_size(write_zip(tmp_path / "f.zip", files), "train/cat/0001.png", 300 << 20)
    with pytest.raises(DataError) as excinfo:
        load_dataset(path, "train", cache=False)
    assert "train/cat/0001.png declares 300.0 MiB, over the 256 MiB limit" in one_line_error(excinfo)


def test_zip_member_unpacking_to_more_than_it_declares_is_read_in_bounded_memory(tmp_path):
    # It declares 1,000 bytes but its deflate stream holds 64 MiB: reading it whole would unpack all 64.
    files, _ = image_folder_files(LAYOUT)
    path = write_zip_bomb(tmp_path / "f.zip", "train/cat/bomb.png", 64 << 20, files)
    declare_zip_size(path, "train/cat/bomb.png", 1000)
    tracemalloc.start()
    try:
        with pytest.raises(DataError) as excinfo:
            load_dataset(path, "train", cache=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "train/cat/bomb.png" in one_line_error(excinfo)
    assert peak < 8 << 20


def test_plain_file_over_the_limit_is_refused(tmp_path, monkeypatch):
    files, _ = image_folder_files(LAYOUT)
    root = write_files(tmp_path / "f", files)
    (root / "train" / "cat" / "0001.png").write_bytes(bytes(3 << 20))
    monkeypatch.setenv("RELUATTN_MAX_MEMBER_MB", "2")
    with pytest.raises(DataError) as excinfo:
        load_dataset(root, "train", cache=False)
    assert "train/cat/0001.png is 3.0 MiB, over the 2 MiB limit" in one_line_error(excinfo)


# ------------------------------------------------------------------------- odd entries in plain folders

def test_symlinked_class_folder_is_read(tmp_path):
    files, truth = image_folder_files(LAYOUT)
    elsewhere = write_files(tmp_path / "elsewhere", {name: data for name, data in files.items()
                                                     if name.startswith("train/cat/")})
    root = write_files(tmp_path / "f", {name: data for name, data in files.items()
                                        if not name.startswith("train/cat/")})
    (root / "train" / "cat").symlink_to(elsewhere / "train" / "cat", target_is_directory=True)
    data = load_dataset(root, "train", cache=False)
    assert data.class_names == SORTED_CLASSES and len(data) == len(truth["train"])
    check_labels_match_pixels(data)


def test_symlinked_split_folder_and_root_are_read(tmp_path):
    files, truth = image_folder_files(LAYOUT)
    real = write_files(tmp_path / "real", files)
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "train").symlink_to(real / "train", target_is_directory=True)
    (tmp_path / "root-link").symlink_to(real, target_is_directory=True)
    assert len(load_dataset(tmp_path / "linked", "train", cache=False)) == len(truth["train"])
    assert len(load_dataset(tmp_path / "root-link", "test", cache=False)) == len(truth["test"])


def test_symlink_loop_is_not_followed(tmp_path):
    files, truth = image_folder_files(LAYOUT)
    root = write_files(tmp_path / "f", files)
    (root / "train" / "cat" / "loop").symlink_to(root / "train", target_is_directory=True)
    with pytest.warns(DataWarning, match="links back to one of its parent folders"):
        data = load_dataset(root, "train", cache=False)
    assert len(data) == len(truth["train"])


def load_in_thread(path, split, seconds=30):
    """load_dataset in a thread; if it is still running after `seconds`, unblock any FIFO it waits on and
    fail (today's hang), so a regression fails the test instead of hanging the suite."""
    outcome = {}

    def run():
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                outcome["data"] = load_dataset(path, split, cache=False)
            outcome["warnings"] = [str(w.message) for w in caught if issubclass(w.category, DataWarning)]
        except Exception as error:  # reported below
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        for fifo in Path(path).rglob("*.png"):
            if fifo.is_fifo():
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # a writer that closes: the reader sees EOF
        thread.join(10)
        pytest.fail(f"loading {path} hung for {seconds} s on a FIFO")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["data"], outcome["warnings"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="this system has no FIFOs (os.mkfifo)")
def test_fifo_named_like_an_image_is_skipped_not_waited_on(tmp_path):
    files, truth = image_folder_files(LAYOUT)
    root = write_files(tmp_path / "f", files)
    os.mkfifo(root / "train" / "cat" / "x.png")
    os.symlink(root / "nowhere.png", root / "train" / "cat" / "broken.png")
    data, caught = load_in_thread(root, "train")
    assert len(data) == len(truth["train"])
    check_labels_match_pixels(data)
    assert any("skipping 2 entries that are not a regular file" in message and "train/cat/x.png" in message
               and "train/cat/broken.png" in message for message in caught)


@pytest.mark.parametrize("container", ["folder", "zip"])
def test_class_names_in_nfc_and_nfd_are_one_class(tmp_path, container):
    composed, decomposed = unicodedata.normalize("NFC", "café"), unicodedata.normalize("NFD", "café")
    assert composed != decomposed
    files = {f"train/{composed}/0.png": encode_image(labelled_pixels(0, 0)),
             f"test/{decomposed}/0.png": encode_image(labelled_pixels(0, 1)),
             "train/tea/0.png": encode_image(labelled_pixels(1, 0)),
             "test/tea/0.png": encode_image(labelled_pixels(1, 1))}
    path = write_files(tmp_path / "f", files) if container == "folder" else write_zip(tmp_path / "f.zip", files)
    for split in ("train", "test"):
        with pytest.warns(DataWarning, match="differ only in Unicode normalisation"):
            data = load_dataset(path, split, cache=False)
        assert data.class_names == (composed, "tea") and list(data.labels) == [0, 1]
        np.testing.assert_array_equal(data.images[:, 3, 3, 0], data.labels)


@pytest.mark.parametrize("container", ["folder", "zip"])
def test_class_names_differing_only_in_case_warn(tmp_path, container):
    # In different splits, so that a case-insensitive file system holds both folders too.
    files = {"train/Cat/0.png": encode_image(labelled_pixels(0, 0)),
             "test/cat/0.png": encode_image(labelled_pixels(1, 0))}
    path = write_files(tmp_path / "f", files) if container == "folder" else write_zip(tmp_path / "f.zip", files)
    for split, label in (("train", 0), ("test", 1)):
        with pytest.warns(DataWarning, match="Cat and cat differ only in case") as caught:
            data = load_dataset(path, split, cache=False)
        assert "\n" not in str(caught[0].message)
        assert data.class_names == ("Cat", "cat") and list(data.labels) == [label]


# ------------------------------------------------------------------------------------- the shared zip

SHARED_ZIP = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "cifar10-train.zip"
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


def patch_zip_member(path: Path, member: str, flag_bits: int | None = None, method: int | None = None) -> Path:
    """Rewrite `member`'s general-purpose flags and compression method in its local header and the central
    directory, leaving its data alone (an "encrypted" member, or one in a method zipfile cannot unpack)."""
    import struct
    data = bytearray(path.read_bytes())
    name = member.encode()
    for signature, flags_at, method_at, name_length_at, name_at in ((b"PK\x03\x04", 6, 8, 26, 30),
                                                                     (b"PK\x01\x02", 8, 10, 28, 46)):
        start = data.find(signature)
        while start != -1:
            length = struct.unpack_from("<H", data, start + name_length_at)[0]
            if data[start + name_at:start + name_at + length] == name:
                if flag_bits is not None:
                    struct.pack_into("<H", data, start + flags_at, flag_bits)
                if method is not None:
                    struct.pack_into("<H", data, start + method_at, method)
            start = data.find(signature, start + 4)
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("damage, fragment", [
    ({"flag_bits": 0x1}, "is encrypted; reluattn reads only archives without a password"),
    ({"method": 9}, "is compressed with zip method 9, which Python's zipfile cannot unpack"),  # Deflate64
])
def test_encrypted_or_deflate64_zip_members_are_named(tmp_path, damage, fragment):
    files, _ = image_folder_files(LAYOUT)
    path = patch_zip_member(write_zip(tmp_path / "f.zip", files), "train/cat/0001.png", **damage)
    with pytest.raises(DataError) as excinfo:
        load_dataset(path, "train", cache=False, workers=1)
    message = one_line_error(excinfo)
    assert "train/cat/0001.png" in message and fragment in message and "ZipInfo" not in message
