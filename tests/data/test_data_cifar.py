"""CIFAR-10/100 python archives and folders: format, pixel layout, safety against malicious pickles and
tampered tar members, and one-line errors for broken input. Archives are built here in the real format."""

import codecs
import gzip
import io
import os
import pickle
import tarfile

import numpy as np
import pytest

from data_builders import (CIFAR10_CLASSES, CIFAR100_CLASSES, cifar_files, folder_name, python2_pickle,
                           python3_pickle, tar_header_only, to_rows, write_cifar_archive, write_cifar_folder,
                           write_tar)
from data_builders import private_cache, one_line_error  # noqa: F401  (private_cache is an autouse fixture)
from reluattn.data import DataError, load_dataset
from reluattn.data.cifar import load_pickle, read_cifar_archive


@pytest.mark.parametrize("split", ["train", "test"])
def test_cifar10_archive_loads_every_batch_in_order(tmp_path, split):
    archive, expected, classes = write_cifar_archive(tmp_path, "cifar10", per_batch=3, test_size=4)
    data = load_dataset(archive, split, cache=False, progress=False)
    images, labels = expected[split]
    assert data.images.dtype == np.uint8 and data.images.shape == (len(labels), 32, 32, 3)
    assert data.labels.dtype == np.int32 and data.labels.shape == (len(labels),)
    np.testing.assert_array_equal(data.images, images)
    np.testing.assert_array_equal(data.labels, labels)
    assert data.class_names == CIFAR10_CLASSES and data.kind == "cifar10" and data.split == split
    assert len(data) == (15 if split == "train" else 4)


@pytest.mark.parametrize("split", ["train", "test"])
def test_cifar100_archive_uses_fine_labels_and_names(tmp_path, split):
    archive, expected, _ = write_cifar_archive(tmp_path, "cifar100", per_batch=3, test_size=4)
    data = load_dataset(archive, split, cache=False, progress=False)
    np.testing.assert_array_equal(data.images, expected[split][0])
    np.testing.assert_array_equal(data.labels, expected[split][1])
    assert data.class_names == CIFAR100_CLASSES and data.num_classes == 100 and data.kind == "cifar100"


def test_pixel_layout_of_a_known_image(tmp_path):
    # Rows are 1024 red, 1024 green, 1024 blue values, each plane row-major: set three pixels by hand.
    row = np.zeros((1, 3072), dtype=np.uint8)
    row[0, 0 * 1024 + 0 * 32 + 5] = 255   # red at (row 0, column 5)
    row[0, 1 * 1024 + 2 * 32 + 0] = 200   # green at (row 2, column 0)
    row[0, 2 * 1024 + 31 * 32 + 30] = 7   # blue at (row 31, column 30)
    files, _, _ = cifar_files("cifar10")
    files["test_batch"] = python2_pickle({b"data": row, b"labels": [3], b"batch_label": b"test"})
    archive = write_tar(tmp_path / "c.tar.gz", files, folder=folder_name("cifar10"))
    image = load_dataset(archive, "test", cache=False).images[0]
    assert image.shape == (32, 32, 3)
    assert tuple(image[0, 5]) == (255, 0, 0) and tuple(image[2, 0]) == (0, 200, 0) and tuple(image[31, 30]) == (0, 0, 7)
    assert image.sum() == 255 + 200 + 7


@pytest.mark.parametrize("kind", ["cifar10", "cifar100"])
def test_extracted_folder_matches_archive(tmp_path, kind):
    parent, expected, classes = write_cifar_folder(tmp_path / "extracted", kind)
    for path in (parent, parent / folder_name(kind)):  # the folder holding it, or the batch folder itself
        data = load_dataset(path, "train", cache=False)
        np.testing.assert_array_equal(data.images, expected["train"][0])
        np.testing.assert_array_equal(data.labels, expected["train"][1])
        assert data.class_names == classes and data.kind == kind


def test_modern_protocol_pickles_load_too(tmp_path):
    files, expected, _ = cifar_files("cifar10", pickler=lambda obj: pickle.dumps(obj, protocol=4))
    archive = write_tar(tmp_path / "c.tar.gz", files, folder=folder_name("cifar10"))
    np.testing.assert_array_equal(load_dataset(archive, "test", cache=False).images, expected["test"][0])


class RunsShell:
    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


class Evaluates:
    def __reduce__(self):
        return (eval, ("__import__('pathlib').Path('MARKER').touch()",))


def test_malicious_pickle_in_an_archive_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "pwned"
    files, _, _ = cifar_files("cifar10")
    files["data_batch_2"] = python2_pickle({b"data": RunsShell(f"touch {marker}"), b"labels": [0]})
    archive = write_tar(tmp_path / "c.tar.gz", files, folder=folder_name("cifar10"))
    with pytest.raises(DataError) as excinfo:
        load_dataset(archive, "train", cache=False)
    message = one_line_error(excinfo)
    assert "data_batch_2" in message and "system" in message and "refusing" in message
    assert not marker.exists()


@pytest.mark.parametrize("payload, asked_for", [(RunsShell("touch MARKER"), "system"), (Evaluates(), "eval")])
@pytest.mark.parametrize("protocol", [0, 2, 4])
def test_restricted_unpickler_refuses_code(tmp_path, monkeypatch, payload, asked_for, protocol):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError) as excinfo:
        load_pickle(pickle.dumps({"data": payload}, protocol=protocol), "evil_batch")
    message = one_line_error(excinfo)
    assert "evil_batch" in message and asked_for in message
    assert not (tmp_path / "MARKER").exists()


@pytest.mark.parametrize("module, name", [
    ("builtins", "getattr"), ("builtins", "eval"), ("os", "system"), ("numpy", "load"), ("numpy", "frombuffer"),
    ("numpy.core.multiarray", "frombuffer"), ("codecs", "encode"), ("collections", "OrderedDict"),
    ("numpy._core.numeric", "fromstring"), ("numpy.lib.npyio", "load")])
def test_unpickler_refuses_every_other_global(module, name):
    # Only NumPy's array rebuilding and the three helpers of Python-3 re-pickled files are admitted.
    with pytest.raises(DataError) as excinfo:
        load_pickle(f"c{module}\n{name}\n.".encode(), "batch")
    message = one_line_error(excinfo)
    assert f"{module}.{name}" in message and "could run code" in message and "refusing" in message


@pytest.mark.parametrize("protocol", [2, 5])
@pytest.mark.parametrize("numpy_1_names", [False, True], ids=["numpy2-names", "numpy1-names"])
@pytest.mark.parametrize("kind", ["cifar10", "cifar100"])
def test_python3_repickled_archive_loads(tmp_path, kind, protocol, numpy_1_names):
    # Re-pickled under Python 3: bytes through _codecs.encode and b"" through bytes() (protocol 2), arrays through
    # numpy._core.numeric._frombuffer (protocol 5, numpy.core.numeric under NumPy 1), NumPy-scalar labels.
    files, expected, classes = cifar_files(kind, pickler=python3_pickle(protocol, numpy_1_names))
    archive = write_tar(tmp_path / "c.tar.gz", files, folder=folder_name(kind))
    for split in ("train", "test"):
        data = load_dataset(archive, split, cache=False, progress=False)
        np.testing.assert_array_equal(data.images, expected[split][0])
        np.testing.assert_array_equal(data.labels, expected[split][1])
        assert data.class_names == classes and data.labels.dtype == np.int32


class Reduces:
    """Pickles as a call of `function(*arguments)`."""

    def __init__(self, function, *arguments):
        self.function, self.arguments = function, arguments

    def __reduce__(self):
        return self.function, self.arguments


@pytest.mark.parametrize("payload, reason", [
    (Reduces(codecs.encode, "x", "rot13"), "rot13"),
    (Reduces(codecs.encode, "eJwLycgsVgCi4pzM5NQ8AE1tBqY=", "base64"), "base64"),
    (Reduces(bytes, 10**9), "only bytes()"),
    (Reduces(np._core.multiarray.scalar, np.dtype(object), 5), "object dtype"),
    (Reduces(np._core.numeric._frombuffer, b"\0" * 8, np.dtype(object), (1,), "C"), "object dtype"),
])
@pytest.mark.parametrize("protocol", [2, 5])
def test_admitted_helpers_refuse_other_arguments(payload, reason, protocol):
    with pytest.raises(DataError) as excinfo:
        load_pickle(pickle.dumps({"data": payload}, protocol=protocol), "odd_batch")
    message = one_line_error(excinfo)
    assert "odd_batch" in message and reason in message and "refusing" in message


def test_restricted_unpickler_admits_the_array_format():
    array = np.arange(12, dtype=np.uint8).reshape(3, 4)
    loaded = load_pickle(python2_pickle({b"data": array, b"labels": [1, 2, 3], b"name": b"x"}), "batch")
    np.testing.assert_array_equal(loaded[b"data"], array)
    assert loaded[b"labels"] == [1, 2, 3] and loaded[b"name"] == b"x"


@pytest.mark.parametrize("bad_name", ["../escaped.txt", "cifar-10-batches-py/../../escaped.txt", "ABSOLUTE"])
def test_tar_member_escaping_the_folder_is_refused_and_not_written(tmp_path, bad_name):
    work = tmp_path / "work"
    work.mkdir()
    outside = tmp_path / "absolute-target.txt"
    bad_name = str(outside) if bad_name == "ABSOLUTE" else bad_name
    files, _, _ = cifar_files("cifar10")
    members = {f"{folder_name('cifar10')}/{name}": data for name, data in files.items()}
    members[bad_name] = b"should never be written"
    archive = write_tar(work / "cifar-10-python.tar.gz", members)
    before = sorted(p for p in tmp_path.rglob("*"))
    with pytest.raises(DataError) as excinfo:
        load_dataset(archive, "train", cache=False)
    assert "leaves the archive" in one_line_error(excinfo)
    assert not (tmp_path / "escaped.txt").exists() and not outside.exists()
    assert sorted(p for p in tmp_path.rglob("*")) == before  # nothing written anywhere


def test_archive_missing_a_batch_names_it(tmp_path):
    files, _, _ = cifar_files("cifar10")
    del files["data_batch_3"]
    archive = write_tar(tmp_path / "c.tar.gz", files, folder=folder_name("cifar10"))
    assert load_dataset(archive, "test", cache=False).images.shape[0] == 4  # the test split is still whole
    with pytest.raises(DataError) as excinfo:
        load_dataset(archive, "train", cache=False)
    assert "data_batch_3" in one_line_error(excinfo)


def test_folder_missing_its_meta_file_says_so(tmp_path):
    parent, _, _ = write_cifar_folder(tmp_path, "cifar10")
    (parent / folder_name("cifar10") / "batches.meta").unlink()
    with pytest.raises(DataError) as excinfo:
        load_dataset(parent, "train", cache=False)
    assert "batches.meta" in one_line_error(excinfo)


def test_truncated_archive_is_a_clear_error(tmp_path):
    archive, _, _ = write_cifar_archive(tmp_path, "cifar10", per_batch=50)
    data = archive.read_bytes()
    archive.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError) as excinfo:
        load_dataset(archive, "train", cache=False)
    assert "truncated or corrupt" in one_line_error(excinfo)


# mtime=0 and named ids: gzip's header holds the time it was made, and an id made from those bytes differed
# between two pytest-xdist workers that collected a second apart (CI refused the run).
@pytest.mark.parametrize("content", [b"\x1f\x8b" + b"\x00" * 100,
                                     gzip.compress(b"not a tar file at all " * 40, mtime=0)],
                         ids=["gzip-magic-then-zeros", "gzip-of-not-a-tar"])
def test_corrupt_archive_is_a_clear_error(tmp_path, content):
    archive = tmp_path / "cifar-10-python.tar.gz"
    archive.write_bytes(content)
    with pytest.raises(DataError) as excinfo:
        load_dataset(archive, cache=False)
    assert str(archive) in one_line_error(excinfo)


def test_corrupt_pickle_inside_the_archive(tmp_path):
    files, _, _ = cifar_files("cifar10")
    files["test_batch"] = files["test_batch"][:100]
    archive = write_tar(tmp_path / "c.tar.gz", files, folder=folder_name("cifar10"))
    with pytest.raises(DataError) as excinfo:
        load_dataset(archive, "test", cache=False)
    assert "test_batch" in one_line_error(excinfo)


def test_batch_with_wrong_shape_is_refused(tmp_path):
    files, _, _ = cifar_files("cifar10")
    files["test_batch"] = python2_pickle({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]})
    archive = write_tar(tmp_path / "c.tar.gz", files, folder=folder_name("cifar10"))
    with pytest.raises(DataError, match="3072"):
        load_dataset(archive, "test", cache=False)


def test_labels_out_of_range_are_refused(tmp_path):
    files, _, _ = cifar_files("cifar10")
    rows = to_rows(np.zeros((1, 32, 32, 3), np.uint8))
    files["test_batch"] = python2_pickle({b"data": rows, b"labels": [10]})
    archive = write_tar(tmp_path / "c.tar.gz", files, folder=folder_name("cifar10"))
    with pytest.raises(DataError, match="labels run from"):
        load_dataset(archive, "test", cache=False)


def test_wrong_dataset_and_split_are_refused(tmp_path):
    archive, _, _ = write_cifar_archive(tmp_path, "cifar10")
    with pytest.raises(DataError, match="cifar100 was asked for"):
        load_dataset(archive, dataset="cifar100", cache=False)
    with pytest.raises(DataError, match="dataset folder"):
        load_dataset(archive, dataset="folder", cache=False)
    with pytest.raises(DataError, match="train, test"):
        load_dataset(archive, "validation", cache=False)


def test_tar_without_cifar_batches(tmp_path):
    archive = write_tar(tmp_path / "other.tar.gz", {"notes.txt": b"hello"})
    with pytest.raises(DataError, match="no CIFAR batches"):
        read_cifar_archive(archive, "train")


def test_uncompressed_tar_works(tmp_path):
    files, expected, _ = cifar_files("cifar10")
    archive = write_tar(tmp_path / "cifar.tar", files, folder=folder_name("cifar10"), mode="w")
    np.testing.assert_array_equal(load_dataset(archive, "test", cache=False).labels, expected["test"][1])


def test_tar_links_are_not_followed(tmp_path):
    # A symlink member named like a batch must not be read (and cannot point anywhere).
    files, _, _ = cifar_files("cifar10")
    del files["test_batch"]
    archive = tmp_path / "c.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"{folder_name('cifar10')}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo(f"{folder_name('cifar10')}/test_batch")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    with pytest.raises(DataError, match="test_batch"):
        load_dataset(archive, "test", cache=False)


# ------------------------------------------------------------------------------- size limits

def test_tar_member_declaring_400_mib_is_refused_before_reading(tmp_path):
    # A 1 KB file whose tar header claims a 400 MiB batch: refused from the header, under the default limit.
    archive = tmp_path / "cifar-10-python.tar.gz"
    archive.write_bytes(tar_header_only(f"{folder_name('cifar10')}/test_batch", 400 << 20))
    with pytest.raises(DataError) as excinfo:
        load_dataset(archive, "test", cache=False)
    message = one_line_error(excinfo)
    assert "test_batch declares 400.0 MiB" in message and "256 MiB limit" in message
    assert "RELUATTN_MAX_MEMBER_MB=400" in message


def test_tar_member_over_a_lowered_limit_is_refused(tmp_path, monkeypatch):
    files, _, _ = cifar_files("cifar10")
    files["test_batch"] = python2_pickle({b"data": np.zeros((1000, 3072), np.uint8), b"labels": [0] * 1000})
    archive = write_tar(tmp_path / "c.tar.gz", files, folder=folder_name("cifar10"))
    monkeypatch.setenv("RELUATTN_MAX_MEMBER_MB", "2")  # test_batch holds about 2.9 MiB
    with pytest.raises(DataError) as excinfo:
        load_dataset(archive, "test", cache=False)
    assert "test_batch declares 2.9 MiB, over the 2 MiB limit" in one_line_error(excinfo)
    monkeypatch.setenv("RELUATTN_MAX_MEMBER_MB", "3")
    assert len(load_dataset(archive, "test", cache=False)) == 1000


def test_cifar_folder_file_over_the_limit_is_refused(tmp_path, monkeypatch):
    parent, _, _ = write_cifar_folder(tmp_path, "cifar10")
    batch = parent / folder_name("cifar10") / "test_batch"
    batch.write_bytes(python2_pickle({b"data": np.zeros((800, 3072), np.uint8), b"labels": [0] * 800}))
    monkeypatch.setenv("RELUATTN_MAX_MEMBER_MB", "1")
    with pytest.raises(DataError) as excinfo:
        load_dataset(parent, "test", cache=False)
    assert "test_batch is 2.3 MiB, over the 1 MiB limit" in one_line_error(excinfo)


@pytest.mark.parametrize("setting", ["0", "-5", "lots", "1.5"])
def test_bad_limit_settings_are_refused(tmp_path, monkeypatch, setting):
    archive, _, _ = write_cifar_archive(tmp_path, "cifar10")
    monkeypatch.setenv("RELUATTN_MAX_MEMBER_MB", setting)
    with pytest.raises(DataError) as excinfo:
        load_dataset(archive, "test", cache=False)
    assert "RELUATTN_MAX_MEMBER_MB must be a whole number" in one_line_error(excinfo)


# ------------------------------------------------------------------------ arrays named by shape alone

# Reads an archive in a fresh process whose address space is capped 200 MB above what importing took, and
# prints the outcome and how much the peak resident memory grew.
CAPPED_READ = r"""
import resource, sys
from reluattn.data import DataError
from reluattn.data.cifar import read_cifar_archive
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
size = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (size + (200 << 20), resource.RLIM_INFINITY))
try:
    read_cifar_archive(sys.argv[1], "train")
    outcome = "loaded"
except DataError as error:
    outcome = "DataError: " + str(error)
except MemoryError as error:
    outcome = "MemoryError: " + str(error)
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) >> 10
print(f"{grown}\n{outcome}")
"""


@pytest.mark.parametrize("how", ["ndarray", "_reconstruct"])
def test_an_array_named_by_its_shape_alone_is_refused_before_it_is_allocated(tmp_path, how):
    # A few hundred bytes naming (100000, 3072) uint8 arrays (307 MB each): the allocation must be refused from
    # the shape, against the member's own size, with the peak memory measured under a 200 MB cap.
    import subprocess
    import sys
    from numpy._core.multiarray import _reconstruct
    shape = (100_000, 3072)
    data = (Reduces(np.ndarray, shape, "u1") if how == "ndarray"
            else Reduces(_reconstruct, np.ndarray, shape, b"B"))
    files, _, _ = cifar_files("cifar10")
    for name in [f"data_batch_{i}" for i in range(1, 6)]:
        files[name] = pickle.dumps({b"data": data, b"labels": Reduces(np.ndarray, (shape[0],), "i8")}, protocol=2)
    archive = write_tar(tmp_path / "c.tar.gz", files, folder=folder_name("cifar10"))
    assert archive.stat().st_size < 20_000  # the test batch and meta file carry real bytes
    result = subprocess.run([sys.executable, "-c", CAPPED_READ, str(archive)], capture_output=True, text=True,
                            timeout=120)
    grown, outcome = result.stdout.strip().split("\n", 1)
    assert outcome.startswith("DataError: ") and "data_batch_1" in outcome, (outcome, result.stderr[-500:])
    assert "307,200,000 bytes, more than the" in outcome and "byte file could hold" in outcome
    assert int(grown) < 50, f"peak resident memory grew by {grown} MB"


def test_an_array_with_its_bytes_still_loads_and_none_is_left_uninitialised():
    # NumPy's own pickles allocate (0,) and fill from the bytes they carry; a small shape-only array is zeros.
    array = np.arange(3072 * 2, dtype=np.int64).astype(np.uint8).reshape(2, 3072)
    loaded = load_pickle(pickle.dumps({b"data": array, b"empty": Reduces(np.ndarray, (4,), "i8")}, protocol=2),
                         "batch")
    np.testing.assert_array_equal(loaded[b"data"], array)
    np.testing.assert_array_equal(loaded[b"empty"], np.zeros(4, np.int64))
