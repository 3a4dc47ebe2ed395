"""Decoding the images of a folder or a .zip into one uint8 array, in this process or in workers.

Each file is read within the size limit of limits.py (a zip member by declared and by actual size, in
blocks), opened by Pillow, checked against the image-side limit and for squareness from its header
before any pixel is decoded, and converted to RGB uint8. 16-bit PNGs keep their high byte (v >> 8, as
Pillow does for 16-bit colour and libpng's strip_16), so 65535 becomes 255 and 257 * k becomes k; a pixel
format reluattn cannot read (32-bit integer or float pixels) is refused by name.

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
import stat
import warnings
import zipfile
import zlib
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import numpy as np
from PIL import Image
from ..progress import tqdm

from .errors import DataError, DataWarning
from .limits import check_declared, check_image_size, image_side_limit, member_limit_bytes, read_limited

CHUNK_SIZE = 1024        # images per task handed to a worker (also the progress bar's step)
SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I")  # how Pillow opens a 16-bit grayscale PNG
EIGHT_BIT_MODES = ("1", "L", "LA", "La", "P", "PA", "RGB", "RGBA", "RGBa", "RGBX", "CMYK", "YCbCr")

_reader = None  # in a worker process: the open source, set once by _open_source


# The compression methods Python's zipfile unpacks (stored, deflate, bzip2, lzma).
ZIP_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA)


class _Reader:
    """Reads member bytes from a folder or a zip (kept open)."""

    def __init__(self, root: str, is_zip: bool):
        self.root, self.is_zip = root, is_zip
        self.archive = zipfile.ZipFile(root) if is_zip else None
        self.limit = member_limit_bytes()  # both read once: they are asked for every image
        self.side_limit = image_side_limit()

    def read(self, member: str) -> bytes:
        what = f"{self.root}: {member}"
        try:
            if self.archive is not None:
                info = self.archive.getinfo(member)
                check_declared(what, info.file_size, limit=self.limit)
                if info.flag_bits & 0x1:  # zipfile would ask for a password (a RuntimeError showing a ZipInfo)
                    raise DataError(f"{what} is encrypted; reluattn reads only archives without a password: "
                                    f"re-pack it without one")
                if info.compress_type not in ZIP_METHODS:  # e.g. Deflate64 (9), which zipfile cannot unpack
                    raise DataError(f"{what} is compressed with zip method {info.compress_type}, which Python's "
                                    f"zipfile cannot unpack; re-pack the archive with plain deflate (zip -r)")
                with self.archive.open(info) as file:
                    return read_limited(file, what, self.limit)  # in blocks: a deflate stream may hold more
            # O_NONBLOCK: opening a FIFO put there since indexing returns at once instead of hanging
            descriptor = os.open(Path(self.root) / member, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
            with open(descriptor, "rb") as file:
                status = os.fstat(file.fileno())
                if not stat.S_ISREG(status.st_mode):  # replaced by a FIFO or a device since indexing
                    raise DataError(f"{what} is not a regular file; remove it")
                check_declared(what, status.st_size, "is", self.limit)
                return read_limited(file, what, self.limit)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, KeyError) as error:
            raise DataError(f"cannot read {member} from {self.root} ({error}); the file is corrupt or "
                            f"unreadable: replace it") from error

    def close(self):
        if self.archive is not None:
            self.archive.close()


def _open_source(root: str, is_zip: bool) -> None:
    global _reader
    _reader = _Reader(root, is_zip)


def _to_rgb(image: Image.Image, what: str) -> np.ndarray:
    """A loaded Pillow image -> (H, W, 3) uint8, scaling 16-bit grayscale instead of clipping it."""
    if image.mode in SIXTEEN_BIT_MODES:
        values = np.asarray(image)  # (H, W) uint16 or int32
        if values.size and (values.min() < 0 or values.max() > 65535):
            raise DataError(f"{what} has {image.mode} pixels outside 0..65535; save it as an 8-bit or 16-bit PNG")
        gray = (values.astype(np.uint32) >> 8).astype(np.uint8)  # (H, W): the high byte, 65535 -> 255
        return np.repeat(gray[:, :, None], 3, axis=2)  # (H, W, C)
    if image.mode not in EIGHT_BIT_MODES:
        raise DataError(f"{what} has pixel mode {image.mode}, which reluattn does not read (it reads 8-bit "
                        f"and 16-bit JPEG/PNG); convert it to 8-bit RGB")
    rgb = image if image.mode == "RGB" else image.convert("RGB")
    return np.asarray(rgb, dtype=np.uint8)  # (H, W, C)


# The only formats the loader reads, told apart by their first bytes (not by the file name). Pillow is
# asked for these plugins alone: left to guess, it would hand an "image" holding PostScript to Ghostscript
# (its EPS plugin), and TIFF, JPEG 2000, PSD, FITS and other decoders would be reachable the same way.
IMAGE_SIGNATURES = {"PNG": b"\x89PNG\r\n\x1a\n", "JPEG": b"\xff\xd8\xff"}


def image_format(data: bytes, what: str) -> str:
    """"PNG" or "JPEG" from the file's first bytes; any other content is a DataError naming the file."""
    for name, signature in IMAGE_SIGNATURES.items():
        if data.startswith(signature):
            return name
    raise DataError(f"{what} is neither a PNG nor a JPEG file by its content (it starts with {data[:8]!r}); "
                    f"reluattn reads only PNG and JPEG images: remove it or convert it")


def decode_image(data: bytes, member: str, source: str, side_limit: int | None = None) -> np.ndarray:
    """One JPEG/PNG file's bytes -> (H, W, 3) uint8 RGB; an unreadable, oversized or non-square file, or
    one whose content is another format, is a DataError naming it."""
    what = f"image {member} in {source}"
    formats = (image_format(data, what),)  # Pillow may use this one plugin and no other
    try:
        with Image.open(io.BytesIO(data), formats=formats) as image:
            check_image_size(what, *image.size, side_limit)  # from the header, before decoding a pixel
            image.load()
            pixels = _to_rgb(image, what)  # (H, W, C)
    except DataError:
        raise
    except Exception as error:  # Pillow raises OSError, SyntaxError, DecompressionBombError, ...
        raise DataError(f"cannot decode {what} ({type(error).__name__}: {error}); remove or replace it") from error
    return pixels


def _decode_with(reader: _Reader, members: list[str]) -> np.ndarray:
    images = None
    for position, member in enumerate(members):
        image = decode_image(reader.read(member), member, reader.root, reader.side_limit)  # (H, W, C)
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
                warnings.warn(f"could not start {workers} decoding processes ({error}); decoding in this one",
                              DataWarning)
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
