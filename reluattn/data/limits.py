"""How much one input file may make reluattn hold in memory, and reading files within that.

Two limits, each overridable by an environment variable for data you trust:

    RELUATTN_MAX_MEMBER_MB    largest file read from an archive or folder (a CIFAR batch, one image), in MiB;
                              default 256 (the largest official file, CIFAR-100's train batch, holds
                              50,000 x 3,072 bytes of pixels: 146.5 MiB)
    RELUATTN_MAX_IMAGE_SIDE   largest image width or height, in pixels; default 1024 (a dataset is held
                              in memory as uint8 and a ViT's attention grows with the square of its patches)

A member is checked against its declared size before reading and against the bytes actually produced
while reading (a zip's deflate stream can produce more than its header claims), so a small archive can
never make reluattn read more than the limit for one member into memory.
"""

from __future__ import annotations

import os

from .errors import DataError

MEMBER_LIMIT_VARIABLE = "RELUATTN_MAX_MEMBER_MB"
DEFAULT_MEMBER_LIMIT_MB = 256
IMAGE_SIDE_VARIABLE = "RELUATTN_MAX_IMAGE_SIDE"
DEFAULT_IMAGE_SIDE = 1024
READ_BLOCK = 1 << 20  # bytes read at a time, so an over-long member is stopped within one block


def _positive_setting(variable: str, default: int) -> int:
    text = os.environ.get(variable, "").strip()
    if not text:
        return default
    if not text.isdigit() or int(text) < 1:
        raise DataError(f"{variable} must be a whole number >= 1; got {text!r}")
    return int(text)


def member_limit_bytes() -> int:
    """The largest member or file reluattn reads, in bytes (RELUATTN_MAX_MEMBER_MB, default 256 MiB)."""
    return _positive_setting(MEMBER_LIMIT_VARIABLE, DEFAULT_MEMBER_LIMIT_MB) << 20


def image_side_limit() -> int:
    """The largest image width or height in pixels (RELUATTN_MAX_IMAGE_SIDE, default 1024)."""
    return _positive_setting(IMAGE_SIDE_VARIABLE, DEFAULT_IMAGE_SIDE)


def too_large(what: str, limit: int, declared: int | None = None, verb: str = "declares") -> DataError:
    """The error for a member over the limit: by its declared size, or (None) by what reading it produced."""
    size = f"{verb} {declared / 2**20:.1f} MiB" if declared is not None else "unpacks to more than"
    suggestion = -(-declared >> 20) if declared is not None else 2 * (limit >> 20)
    return DataError(f"{what} {size}, over the {limit >> 20} MiB limit for one file; refusing it (a tampered or "
                     f"foreign archive?). If you trust it, raise the limit, e.g. {MEMBER_LIMIT_VARIABLE}={suggestion}")


def check_declared(what: str, declared: int, verb: str = "declares", limit: int | None = None) -> None:
    """Refuse a member whose header declares (or a file whose size `verb`) more than the limit, before
    reading any of it."""
    limit = member_limit_bytes() if limit is None else limit
    if declared > limit:
        raise too_large(what, limit, declared, verb)


def read_limited(file, what: str, limit: int | None = None) -> bytes:
    """All of `file` (whose read(n) returns fewer than n bytes only at its end, as buffered and zip member
    files do), read block by block and refused as soon as it passes the limit."""
    limit = member_limit_bytes() if limit is None else limit
    blocks, total = [], 0
    while True:
        wanted = min(READ_BLOCK, limit + 1 - total)
        block = file.read(wanted)
        blocks.append(block)
        total += len(block)
        if total > limit:
            raise too_large(what, limit)
        if len(block) < wanted:
            return b"".join(blocks) if len(blocks) > 1 else block


def check_image_size(what: str, width: int, height: int, limit: int | None = None) -> None:
    """Refuse an image larger than the side limit or not square, naming it and its size."""
    limit = image_side_limit() if limit is None else limit
    if max(width, height) > limit:
        raise DataError(f"{what} is {width}x{height} pixels, larger than the {limit}x{limit} limit for one image "
                        f"(every image is held in memory, and attention grows with the square of the patch "
                        f"count); resize the images, or raise the limit with "
                        f"{IMAGE_SIDE_VARIABLE}={max(width, height)}")
    if width != height:
        raise DataError(f"{what} is {width}x{height} pixels, not square; reluattn's ViT takes square images of "
                        f"one size: crop or pad them to a square first")
