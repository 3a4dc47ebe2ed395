"""Only PNG and JPEG are decoded, chosen by content: any other format under an image name is refused by name
(audit 2026-11-27, S1: a "PNG" holding PostScript was handed to Ghostscript by Pillow's EPS plugin)."""

import io
import os
import stat

import numpy as np
import pytest
from PIL import Image

from data_builders import encode_image, image_folder_files, labelled_pixels, write_files, write_zip
from data_builders import private_cache  # noqa: F401  (autouse: a private decoded-image cache)
from reluattn.data import DataError, load_dataset
from reluattn.data.decode import decode_image

EPS = (b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 8 8\n"
       b"newpath 0 0 moveto 8 0 lineto 8 8 lineto closepath fill showpage\n%%EOF\n")


def _pillow_bytes(format: str) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(labelled_pixels(0, 0)).save(buffer, format=format)
    return buffer.getvalue()


# Formats Pillow would otherwise pick by content: written by Pillow where it can, else their signatures.
OTHER_FORMATS = {
    "eps": lambda: EPS,
    "tiff": lambda: _pillow_bytes("TIFF"),
    "bmp": lambda: _pillow_bytes("BMP"),
    "gif": lambda: _pillow_bytes("GIF"),
    "webp": lambda: _pillow_bytes("WEBP"),
    "ico": lambda: _pillow_bytes("ICO"),
    "psd": lambda: b"8BPS\x00\x01" + bytes(20),
    "fits": lambda: b"SIMPLE  =                    T" + b" " * 50,
    "jpeg2000": lambda: b"\x00\x00\x00\x0cjP  \r\n\x87\n" + bytes(20),
}


@pytest.fixture
def stub_ghostscript(tmp_path, monkeypatch):
    """A `gs` first on PATH that only records that it ran; yields the record file's path."""
    bin_dir, record = tmp_path / "bin", tmp_path / "gs-called"
    bin_dir.mkdir()
    gs = bin_dir / "gs"
    gs.write_text(f"#!/bin/sh\necho \"$@\" >> {record}\nexit 1\n")
    gs.chmod(gs.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return record


@pytest.mark.parametrize("name", ["0000.png", "0000.jpg"])
@pytest.mark.parametrize("container", ["folder", "zip"])
def test_postscript_under_an_image_name_is_refused_and_ghostscript_never_runs(tmp_path, stub_ghostscript,
                                                                             name, container):
    files, _ = image_folder_files({"train": {"airplane": 2, "cat": 2}})
    files[f"train/airplane/{name}"] = EPS
    path = (write_files(tmp_path / "eps", files) if container == "folder" else write_zip(tmp_path / "eps.zip", files))
    with pytest.raises(DataError) as excinfo:
        load_dataset(str(path), "train")
    message = str(excinfo.value)
    assert f"airplane/{name}" in message and "neither a PNG nor a JPEG" in message
    assert not stub_ghostscript.exists(), "Ghostscript was run on the file's content"


@pytest.mark.parametrize("format", sorted(OTHER_FORMATS))
@pytest.mark.parametrize("name", ["x.png", "x.jpeg"])
def test_every_other_format_is_refused_by_content(format, name, stub_ghostscript):
    with pytest.raises(DataError, match="neither a PNG nor a JPEG"):
        decode_image(OTHER_FORMATS[format](), name, "data.zip")
    assert not stub_ghostscript.exists()


@pytest.mark.parametrize("format", ["PNG", "JPEG"])
def test_png_and_jpeg_are_read_by_content_whatever_the_name(format):
    pixels = labelled_pixels(3, 1)  # (8, 8, 3)
    decoded = decode_image(encode_image(pixels, format), "misnamed.png" if format == "JPEG" else "misnamed.jpg",
                           "data.zip")
    assert decoded.shape == (8, 8, 3)
    if format == "PNG":  # lossless
        np.testing.assert_array_equal(decoded, pixels)
