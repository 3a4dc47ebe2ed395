"""Small datasets in the real on-disk formats, built inside tests (no network, no shared files).

`python2_pickle` writes what Python 2's cPickle wrote for the canonical CIFAR batches: protocol 2, strings
as BINSTRING (so they load as bytes with encoding="bytes"), NumPy arrays through
numpy.core.multiarray._reconstruct.
"""

from __future__ import annotations

import gzip
import io
import pickle
import pickletools
import struct
import tarfile
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
CIFAR100_CLASSES = tuple(f"class_{i:02d}" for i in range(100))


class Python2Pickler(pickle._Pickler):
    """The pure-Python pickler, writing every str and bytes as a Python-2 byte string."""
    dispatch = pickle._Pickler.dispatch.copy()

    def save_python2_string(self, obj):
        data = obj if isinstance(obj, bytes) else obj.encode("latin-1")
        if len(data) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(data)]) + data)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(data)) + data)
        self.memoize(obj)

    dispatch[bytes] = save_python2_string
    dispatch[str] = save_python2_string


def python2_pickle(obj) -> bytes:
    buffer = io.BytesIO()
    Python2Pickler(buffer, protocol=2).dump(obj)
    # Python 2 / NumPy 1 named the array module numpy.core.multiarray.
    return buffer.getvalue().replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")


def rename_modules(data: bytes, old: str, new: str) -> bytes:
    """A pickle with module names starting `old` renamed to start `new` (NumPy 2 -> NumPy 1 names, say),
    its FRAME opcodes dropped so that string lengths may change (frames are only a reading hint)."""
    ops = list(pickletools.genops(data))
    out = bytearray()
    for (opcode, argument, start), following in zip(ops, [op[2] for op in ops[1:]] + [len(data)]):
        if opcode.name == "FRAME":
            continue
        if opcode.name in ("SHORT_BINUNICODE", "BINUNICODE", "GLOBAL") and str(argument).startswith(old):
            renamed = new + argument[len(old):]
            if opcode.name == "GLOBAL":  # "module name": module and name joined by a space
                out += b"c" + renamed.replace(" ", "\n").encode() + b"\n"
            else:
                encoded = renamed.encode()
                out += b"\x8c" + bytes([len(encoded)]) + encoded
            continue
        out += data[start:following]
    return bytes(out)


def python3_pickle(protocol: int, numpy_1_names: bool = False):
    """A pickler as Python 3 re-pickles a CIFAR batch: labels become NumPy int64 scalars, bytes go through
    _codecs.encode (protocol 2; the empty bytes through bytes()) and arrays through
    numpy._core.numeric._frombuffer (protocol 5)."""
    def dump(record):
        record = {key: [np.int64(label) for label in value] if key in (b"labels", b"fine_labels") else value
                  for key, value in record.items()}
        record[b"empty"] = b""
        data = pickle.dumps(record, protocol=protocol)
        return rename_modules(data, "numpy._core", "numpy.core") if numpy_1_names else data
    return dump


def to_rows(images: np.ndarray) -> np.ndarray:
    """(n, 32, 32, 3) -> the format's (n, 3072) channel-major rows."""
    return np.ascontiguousarray(images.transpose(0, 3, 1, 2).reshape(len(images), 3072))


def cifar_files(kind: str, *, per_batch: int = 3, test_size: int = 4, seed: int = 0, pickler=python2_pickle):
    """{file name: pickled bytes} of a small CIFAR-10 or CIFAR-100 and the expected arrays per split."""
    rng = np.random.default_rng(seed)
    classes = CIFAR10_CLASSES if kind == "cifar10" else CIFAR100_CLASSES
    batches = {"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]} if kind == "cifar10" \
        else {"train": ["train"], "test": ["test"]}
    files, expected = {}, {}
    for split, names in batches.items():
        parts = []
        for name in names:
            count = per_batch if split == "train" else test_size
            if kind == "cifar100" and split == "train":
                count = per_batch * 2
            images = rng.integers(0, 256, (count, 32, 32, 3), dtype=np.uint8)
            labels = [int(v) for v in rng.integers(0, len(classes), count)]
            record = {b"batch_label": name.encode(), b"data": to_rows(images),
                      b"filenames": [f"img_{i}.png".encode() for i in range(count)]}
            if kind == "cifar10":
                record[b"labels"] = labels
            else:
                record[b"fine_labels"] = labels
                record[b"coarse_labels"] = [label // 5 for label in labels]
            files[name] = pickler(record)
            parts.append((images, np.array(labels, dtype=np.int32)))
        expected[split] = (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
    if kind == "cifar10":
        files["batches.meta"] = pickler({b"label_names": [c.encode() for c in classes], b"num_vis": 3072,
                                         b"num_cases_per_batch": per_batch})
    else:
        files["meta"] = pickler({b"fine_label_names": [c.encode() for c in classes],
                                 b"coarse_label_names": [f"super_{i}".encode() for i in range(20)]})
    return files, expected, classes


def folder_name(kind: str) -> str:
    return "cifar-10-batches-py" if kind == "cifar10" else "cifar-100-python"


def write_tar(path: Path, members: dict, *, folder: str | None = None, mode: str = "w:gz") -> Path:
    """A tar archive holding `members` (name -> bytes), under `folder/` when given."""
    with tarfile.open(path, mode) as archive:
        if folder:
            info = tarfile.TarInfo(folder)
            info.type = tarfile.DIRTYPE
            archive.addfile(info)
        for name, data in members.items():
            info = tarfile.TarInfo(f"{folder}/{name}" if folder else name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def write_cifar_archive(directory: Path, kind: str = "cifar10", **options):
    files, expected, classes = cifar_files(kind, **options)
    files["readme.html"] = b"<html></html>"
    name = "cifar-10-python.tar.gz" if kind == "cifar10" else "cifar-100-python.tar.gz"
    return write_tar(Path(directory) / name, files, folder=folder_name(kind)), expected, classes


def write_cifar_folder(directory: Path, kind: str = "cifar10", **options):
    """The folder the archive extracts to: returns (parent folder, expected, classes)."""
    files, expected, classes = cifar_files(kind, **options)
    folder = Path(directory) / folder_name(kind)
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return Path(directory), expected, classes


def encode_image(pixels: np.ndarray, format: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=format)
    return buffer.getvalue()


def _png(width: int, height: int, bit_depth: int, color_type: int, compressed_rows: bytes) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", compressed_rows)
            + chunk(b"IEND", b""))


def png_bytes(pixels: np.ndarray, bit_depth: int = 8) -> bytes:
    """A PNG written by hand (Pillow cannot write 16-bit colour): (H, W) gray, (H, W, 2) gray+alpha,
    (H, W, 3) RGB or (H, W, 4) RGBA, at 8 or 16 bits per sample."""
    height, width = pixels.shape[:2]
    channels = 1 if pixels.ndim == 2 else pixels.shape[2]
    sample = ">u2" if bit_depth == 16 else "u1"
    rows = pixels.reshape(height, width * channels).astype(sample)
    raw = b"".join(b"\x00" + row.tobytes() for row in rows)  # filter type 0 on every row
    return _png(width, height, bit_depth, {1: 0, 2: 4, 3: 2, 4: 6}[channels], zlib.compress(raw))


def blank_gray_png(width: int, height: int) -> bytes:
    """A valid all-black 8-bit grayscale PNG of any size, compressed row by row (a few hundred KB for
    9000x9000) without holding its pixels."""
    compressor = zlib.compressobj(1)
    row = b"\x00" * (width + 1)
    body = b"".join(compressor.compress(row) for _ in range(height)) + compressor.flush()
    return _png(width, height, 8, 0, body)


def write_zip_bomb(path: Path, member: str, size: int, others: dict | None = None) -> Path:
    """A zip whose `member` holds `size` zero bytes, deflated as it is written (a few KB per 10 MiB),
    beside the ordinary members `others`."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in (others or {}).items():
            archive.writestr(name, data)
        with archive.open(member, "w", force_zip64=size > 0x7FFFFFFF) as file:
            block = bytes(1 << 20)
            for start in range(0, size, len(block)):
                file.write(block[:size - start])
    return Path(path)


def declare_zip_size(path: Path, member: str, size: int) -> Path:
    """Rewrite the uncompressed size `member` declares (local header and central directory), leaving its
    data alone: a zip that lies about what a member unpacks to."""
    data = bytearray(Path(path).read_bytes())
    name = member.encode()
    for signature, size_at, name_length_at, name_at in ((b"PK\x03\x04", 22, 26, 30), (b"PK\x01\x02", 24, 28, 46)):
        start = data.find(signature)
        while start != -1:
            length = struct.unpack_from("<H", data, start + name_length_at)[0]
            if data[start + name_at:start + name_at + length] == name:
                struct.pack_into("<I", data, start + size_at, size)
            start = data.find(signature, start + 4)
    Path(path).write_bytes(bytes(data))
    return Path(path)


def tar_header_only(name: str, declared: int) -> bytes:
    """A gzipped tar holding one member header that declares `declared` bytes, followed by 1 KB."""
    info = tarfile.TarInfo(name)
    info.size = declared
    return gzip.compress(info.tobuf(format=tarfile.GNU_FORMAT) + bytes(1024))


def labelled_pixels(label: int, number: int, side: int = 8) -> np.ndarray:
    """An image whose pixels say which class and which image it is (red = label, green = number)."""
    pixels = np.zeros((side, side, 3), dtype=np.uint8)
    pixels[..., 0] = label
    pixels[..., 1] = number
    pixels[0, 0, 2] = 255  # one marked corner, so a flipped or transposed read shows
    return pixels


def image_folder_files(layout: dict, side: int = 8) -> tuple[dict, dict]:
    """layout {split: {class: count}} -> ({relative path: PNG bytes}, {split: [(class, number)]})."""
    classes = sorted({name for counts in layout.values() for name in counts})
    files, truth = {}, {}
    for split, counts in layout.items():
        for name, count in counts.items():
            for number in range(count):
                pixels = labelled_pixels(classes.index(name), number, side)
                files[f"{split}/{name}/{number:04d}.png"] = encode_image(pixels)
                truth.setdefault(split, []).append((name, number))
    return files, truth


def write_files(root: Path, files: dict) -> Path:
    for name, data in files.items():
        path = Path(root) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return Path(root)


def write_zip(path: Path, files: dict) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return Path(path)


# ------------------------------------------------------------------ shared by the data tests

@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """A private decoded-image cache and no RELUATTN_DATA (import into a test module to use it)."""
    monkeypatch.setenv("RELUATTN_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("RELUATTN_DATA", raising=False)


def one_line_error(excinfo) -> str:
    """The message of a raised error, which must be one non-empty line without surrounding blanks."""
    message = str(excinfo.value)
    assert "\n" not in message and message.strip() == message and message
    return message
