"""The decoded-array cache: a second load reads it, a changed source or a corrupt file rebuilds it."""

import os
import warnings

import numpy as np
import pytest

import reluattn.data as data_module
from data_builders import encode_image, image_folder_files, labelled_pixels, write_cifar_archive, write_files, write_zip
from data_builders import private_cache  # noqa: F401  (private_cache is an autouse fixture)
from reluattn.data import DataError, DataWarning, cache_dir, load_dataset
from reluattn.data.cache import atomic_write, read_cache

LAYOUT = {"train": {"cat": 3, "dog": 2}}


def cache_files():
    return sorted((cache_dir() / "arrays").glob("*.npz"))


def refuse_to_decode(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("decoded again although the cache holds this split")
    monkeypatch.setattr(data_module, "read_cifar_archive", fail)
    monkeypatch.setattr(data_module, "read_cifar_folder", fail)
    monkeypatch.setattr(data_module, "load_image_folder", fail)


@pytest.fixture(params=["cifar-archive", "image-zip", "image-folder"])
def source(request, tmp_path):
    if request.param == "cifar-archive":
        return write_cifar_archive(tmp_path, "cifar10")[0]
    files, _ = image_folder_files(LAYOUT)
    if request.param == "image-zip":
        return write_zip(tmp_path / "images.zip", files)
    return write_files(tmp_path / "images", files)


def test_second_load_reads_the_cache(source, monkeypatch):
    first = load_dataset(source, "train", progress=False)
    assert len(cache_files()) == 1
    refuse_to_decode(monkeypatch)
    second = load_dataset(source, "train", progress=False)
    np.testing.assert_array_equal(first.images, second.images)
    np.testing.assert_array_equal(first.labels, second.labels)
    assert first.class_names == second.class_names and first.kind == second.kind
    assert second.labels.dtype == np.int32 and second.images.dtype == np.uint8


def test_cache_files_need_no_pickle(source):
    load_dataset(source, "train", progress=False)
    with np.load(cache_files()[0], allow_pickle=False) as stored:
        assert stored["images"].dtype == np.uint8 and stored["class_names"].dtype.kind == "U"
    assert not list((cache_dir() / "arrays").glob("*.tmp"))  # no temporary file left behind


def test_corrupt_cache_file_is_ignored_and_rebuilt(source):
    expected = load_dataset(source, "train", progress=False)
    (stored,) = cache_files()
    stored.write_bytes(stored.read_bytes()[:300])  # truncated, as after a crash of some other writer
    with pytest.warns(UserWarning, match="unreadable cache file"):
        again = load_dataset(source, "train", progress=False)
    np.testing.assert_array_equal(again.images, expected.images)
    assert read_cache(stored, str(np.load(stored)["key"])) is not None  # rewritten whole


def test_cache_with_wrong_contents_is_rebuilt(tmp_path):
    archive = write_cifar_archive(tmp_path, "cifar10")[0]
    expected = load_dataset(archive, "test", progress=False)
    (stored,) = cache_files()
    with np.load(stored) as old:
        key = str(old["key"])
    np.savez(stored, images=np.zeros((2, 32, 32, 3), np.float32), labels=np.zeros(2, np.int32),
             class_names=np.array(["a"]), kind=np.array("cifar10"), key=np.array(key))
    with pytest.warns(UserWarning):
        again = load_dataset(archive, "test", progress=False)
    np.testing.assert_array_equal(again.images, expected.images)


def test_changed_source_is_decoded_again(tmp_path, monkeypatch):
    files, _ = image_folder_files(LAYOUT)
    path = write_zip(tmp_path / "images.zip", files)
    load_dataset(path, "train", progress=False)
    files.update(image_folder_files({"train": {"cat": 4, "dog": 2}})[0])
    write_zip(path, files)
    os.utime(path, ns=(1, 1))  # a different mtime even on coarse clocks
    again = load_dataset(path, "train", progress=False)
    assert len(again) == 6 and len(cache_files()) == 2


def test_changed_file_inside_a_folder_is_noticed(tmp_path):
    files, _ = image_folder_files(LAYOUT)
    root = write_files(tmp_path / "images", files)
    before = load_dataset(root, "train", progress=False)
    replacement = image_folder_files({"train": {"cat": 3, "dog": 2}}, side=8)[0]["train/dog/0000.png"]
    (root / "train" / "cat" / "0000.png").write_bytes(replacement)
    os.utime(root / "train" / "cat" / "0000.png", ns=(1, 1))
    after = load_dataset(root, "train", progress=False)
    assert after.images[0, 0, 1, 0] != before.images[0, 0, 1, 0]  # red channel holds the class index


def test_cache_is_per_split(tmp_path, monkeypatch):
    archive = write_cifar_archive(tmp_path, "cifar10")[0]
    train = load_dataset(archive, "train", progress=False)
    test = load_dataset(archive, "test", progress=False)
    assert len(cache_files()) == 2 and len(train) != len(test)
    refuse_to_decode(monkeypatch)
    assert len(load_dataset(archive, "test", progress=False)) == len(test)


def test_no_cache_writes_nothing(source):
    load_dataset(source, "train", cache=False, progress=False)
    assert cache_files() == []


def test_cached_kind_is_still_checked(tmp_path):
    archive = write_cifar_archive(tmp_path, "cifar10")[0]
    load_dataset(archive, "test", progress=False)
    with pytest.raises(DataError, match="cifar100 was asked for"):
        load_dataset(archive, "test", dataset="cifar100", progress=False)


def test_unwritable_cache_only_warns(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("RELUATTN_CACHE", str(blocker))
    archive = write_cifar_archive(tmp_path, "cifar10")[0]
    with pytest.warns(UserWarning, match="could not write the cache file"):
        data = load_dataset(archive, "test", progress=False)
    assert len(data) == 4


def test_cache_files_get_the_mode_the_umask_gives(source):
    # A cache folder shared through RELUATTN_CACHE stays readable by the group, as any file the user makes.
    previous = os.umask(0o022)
    try:
        load_dataset(source, "train", progress=False)
    finally:
        os.umask(previous)
    assert oct(cache_files()[0].stat().st_mode & 0o777) == "0o644"


def test_atomic_write_leaves_the_old_file_when_writing_fails(tmp_path):
    target = tmp_path / "file.npz"
    target.write_bytes(b"old contents")

    def crash(file):
        file.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        atomic_write(target, crash)
    assert target.read_bytes() == b"old contents"
    assert [p.name for p in tmp_path.iterdir()] == ["file.npz"]


def test_cache_dir_default(monkeypatch, tmp_path):
    monkeypatch.delenv("RELUATTN_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "reluattn"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "reluattn"


# ------------------------------------------------------------------ what the key holds, what a load checks

@pytest.mark.parametrize("container", ["folder", "zip"])
def test_class_only_in_another_split_renumbers_the_cached_split(tmp_path, container):
    # Adding test/ant/ makes "ant" class 0 for every split: the cached train split must not keep the old
    # numbering (its own files did not change).
    files, _ = image_folder_files({"train": {"cat": 3, "dog": 2}, "test": {"cat": 1}})
    build = (lambda f: write_files(tmp_path / "f", f)) if container == "folder" \
        else (lambda f: write_zip(tmp_path / "f.zip", f))
    path = build(files)
    before = load_dataset(path, "train", progress=False)
    assert before.class_names == ("cat", "dog") and list(before.labels) == [0, 0, 0, 1, 1]
    stamp = path.stat()
    build({"test/ant/0000.png": encode_image(labelled_pixels(0, 0))} if container == "folder"
          else {**files, "test/ant/0000.png": encode_image(labelled_pixels(0, 0))})
    if container == "zip":
        os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # same mtime; the size differs anyway
    after = load_dataset(path, "train", progress=False)
    assert after.class_names == ("ant", "cat", "dog") and list(after.labels) == [1, 1, 1, 2, 2]
    test = load_dataset(path, "test", progress=False)
    assert test.class_names == after.class_names and sorted(test.labels) == [0, 1]


def constant_folder(root, values):
    """An image folder of 8x8 images of one grey level each, all with the same size and modification time."""
    files = {f"train/{name}/0000.png": encode_image(np.full((8, 8, 3), value, np.uint8))
             for name, value in values.items()}
    write_files(root, files)
    for name in files:
        os.utime(root / name, ns=(10**18, 10**18))
    return root


def test_same_named_folders_elsewhere_have_their_own_entries(tmp_path):
    # Two folders called "images", same member names, sizes and mtimes, different pixels.
    first = constant_folder(tmp_path / "a" / "images", {"cat": 10, "dog": 77})
    second = constant_folder(tmp_path / "b" / "images", {"cat": 77, "dog": 10})
    sizes = [(root / "train" / name / "0000.png").stat().st_size for root in (first, second) for name in ("cat", "dog")]
    assert len(set(sizes)) == 1  # the premise: nothing but the location tells them apart
    assert load_dataset(first, "train", progress=False).images[:, 0, 0, 0].tolist() == [10, 77]
    assert load_dataset(second, "train", progress=False).images[:, 0, 0, 0].tolist() == [77, 10]
    assert len(cache_files()) == 2


def rewrite_cache_file(stored, **replacements):
    """Rewrite a cache file with some arrays replaced and everything else (key, hash) kept, as someone
    editing it by hand would."""
    with np.load(stored) as old:
        arrays = {name: old[name] for name in old.files}
    arrays.update(replacements)
    np.savez(stored, **arrays)


@pytest.mark.parametrize("tamper", ["black images", "swapped labels", "renamed classes"])
def test_tampered_cache_file_is_decoded_again(source, tamper):
    expected = load_dataset(source, "train", progress=False)
    (stored,) = cache_files()
    with np.load(stored) as old:
        images, labels, names = old["images"], old["labels"], old["class_names"]
    if tamper == "black images":
        rewrite_cache_file(stored, images=np.zeros_like(images))
    elif tamper == "swapped labels":
        rewrite_cache_file(stored, labels=labels[::-1].copy())
    else:
        rewrite_cache_file(stored, class_names=names[::-1].copy())
    with pytest.warns(DataWarning, match="do not match the hash stored with them") as caught:
        again = load_dataset(source, "train", progress=False)
    assert len(caught) == 1 and "\n" not in str(caught[0].message) and str(stored) in str(caught[0].message)
    np.testing.assert_array_equal(again.images, expected.images)
    np.testing.assert_array_equal(again.labels, expected.labels)
    assert again.class_names == expected.class_names
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # rebuilt: the next load reads it without a word
        load_dataset(source, "train", progress=False)


def test_cache_file_replaced_by_an_older_valid_one_is_not_used_for_another_source(tmp_path):
    # A valid cache file of one source, copied over the entry of another: its key does not match.
    files, _ = image_folder_files(LAYOUT)
    one = write_zip(tmp_path / "one.zip", files)
    other = write_zip(tmp_path / "other.zip", image_folder_files({"train": {"cat": 1, "dog": 1}})[0])
    load_dataset(one, "train", progress=False)
    (first,) = cache_files()
    expected = load_dataset(other, "train", progress=False)
    (second,) = [path for path in cache_files() if path != first]
    second.write_bytes(first.read_bytes())
    with pytest.warns(DataWarning, match="unreadable cache file"):
        again = load_dataset(other, "train", progress=False)
    np.testing.assert_array_equal(again.images, expected.images)
