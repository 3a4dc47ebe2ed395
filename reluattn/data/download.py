"""Fetching the canonical CIFAR archives into the cache folder, resumably and checksum-verified.

The file grows as `<name>.part` (a new private file renamed into place, so a symlink planted under that name
is replaced, never written through); a cut connection is resumed with an HTTP Range request (or restarted when
the server ignores Range), the finished file's MD5 is checked against the published one, and only then is
it renamed to its real name. An archive already in the cache is verified again before each use (one MD5
pass over the file); one whose MD5 is wrong is moved aside (`<name>.md5-mismatch`, never deleted)
and downloaded again.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import stat
import tempfile
import urllib.error
import urllib.request
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..progress import tqdm

from .cache import cache_dir, new_file_mode
from .errors import DataError, DataWarning


@dataclass(frozen=True)
class Archive:
    filename: str
    url: str
    md5: str
    url_variable: str  # environment variable that overrides the URL (a mirror, or a test server)


# Published by the dataset's author at https://www.cs.toronto.edu/~kriz/cifar.html.
ARCHIVES = {
    "cifar10": Archive("cifar-10-python.tar.gz", "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
                       "c58f30108f718f92721af3b95e74349a", "RELUATTN_CIFAR10_URL"),
    "cifar100": Archive("cifar-100-python.tar.gz", "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
                        "eb9058c3a382ffc7106e4002c42a8d85", "RELUATTN_CIFAR100_URL"),
}
CHUNK_BYTES = 1 << 16


def md5_of(path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _no_network(filename: str, url: str, reason) -> DataError:
    return DataError(f"could not download {filename} from {url} ({reason}). Without network, get the file "
                     f"elsewhere and point --data (or the RELUATTN_DATA variable) at it, at its extracted folder, "
                     f"or at an image folder / .zip of <split>/<class>/<image>")


def _open(url: str, offset: int, timeout: float):
    headers = {"User-Agent": "reluattn", "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    return urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)


def _range_start(response) -> int | None:
    """Where the body of a 206 response starts, from its "Content-Range: bytes start-end/total"."""
    content_range = response.headers.get("Content-Range", "")
    try:
        return int(content_range.split()[1].split("-")[0]) if content_range.startswith("bytes ") else None
    except (IndexError, ValueError):
        return None


def _part_size(part: Path) -> int:
    """Bytes already in `part` to resume from: 0 unless it is a regular file (never read through a link)."""
    try:
        status = os.lstat(part)
    except FileNotFoundError:
        return 0
    return status.st_size if stat.S_ISREG(status.st_mode) else 0


def _open_part(part: Path, offset: int):
    """`part` opened for writing without following a link planted under its name: appended to when resuming,
    else a new private file (mkstemp) renamed over whatever had the name."""
    if offset:
        fd = os.open(part, os.O_RDWR | os.O_NOFOLLOW)  # _part_size saw a regular file; a link now is refused
        return os.fdopen(fd, "r+b")
    fd, temporary = tempfile.mkstemp(prefix=f".{part.name}.", suffix=".tmp", dir=part.parent)
    try:
        os.fchmod(fd, new_file_mode())
        os.replace(temporary, part)  # replaces a planted link itself, never what it points at
    except OSError:
        os.close(fd)
        os.unlink(temporary)
        raise
    return os.fdopen(fd, "wb")


def _transfer(response, part: Path, offset: int, progress: bool, label: str) -> tuple[int, int | None]:
    """Append the response body to `part` from `offset` (0: write it afresh); returns (bytes now in part,
    expected total, or None when the server did not say)."""
    length = response.headers.get("Content-Length")
    total = offset + int(length) if length is not None and length.isdigit() else None
    received = offset
    with _open_part(part, offset) as file, \
            tqdm(total=total, initial=offset, unit="B", unit_scale=True, unit_divisor=1024, desc=label,
                 disable=not progress, leave=False) as bar:
        file.seek(offset)
        file.truncate()
        while True:
            block = response.read(CHUNK_BYTES)
            if not block:
                break
            file.write(block)
            received += len(block)
            bar.update(len(block))
        file.flush()
        os.fsync(file.fileno())
    return received, total


def download(url: str, destination, md5: str, *, progress: bool = True, timeout: float = 10.0,
             attempts: int = 3) -> Path:
    """Download `url` to `destination` via `destination.part`, resuming up to `attempts` times when the
    connection breaks, and verify `md5` before renaming. No connection at all fails at once."""
    destination = Path(destination)
    part = destination.with_name(destination.name + ".part")
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise DataError(f"cannot create the download folder {destination.parent} ({error.strerror or error}); "
                        f"set RELUATTN_CACHE to a writable folder") from error
    name = destination.name
    for attempt in range(attempts):
        offset = _part_size(part)
        try:
            response = _open(url, offset, timeout)
        except urllib.error.HTTPError as error:
            if error.code == 416 and offset:  # nothing after our offset: the part is whole, or is garbage
                if md5_of(part) == md5:
                    os.replace(part, destination)
                    return destination
                part.unlink()
                continue
            raise DataError(f"could not download {name} from {url}: HTTP {error.code} {error.reason}; try again "
                            f"later, or point --data (or RELUATTN_DATA) at a local copy") from error
        except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
            if attempt == 0:  # nothing reachable: fail at once, saying how to do without
                raise _no_network(name, url, getattr(error, "reason", error)) from error
            break  # the server went away mid-download; the .part file stays for next time
        if offset and getattr(response, "status", 200) == 206 and _range_start(response) != offset:
            response.close()  # a range we did not ask for: throw the partial file away and start over
            part.unlink()
            continue
        if getattr(response, "status", 200) != 206:
            offset = 0  # the whole file came (the server ignores Range, or we asked for none): start over
        try:
            with response:
                received, total = _transfer(response, part, offset, progress, name)
        except (OSError, http.client.HTTPException) as error:  # cut off midway (reset, timeout, ...)
            if isinstance(error, OSError) and error.errno in (28, 122):  # ENOSPC, EDQUOT
                raise DataError(f"no space left while downloading {name} to {part}; free some space or set "
                                f"RELUATTN_CACHE to another folder") from error
            continue
        if total is not None and received < total:
            continue  # the connection closed early: resume from what we have
        actual = md5_of(part)
        if actual != md5:
            part.unlink()
            raise DataError(f"{name} downloaded from {url} has md5 {actual}, not the published {md5}; the download "
                            f"was corrupted (or the file changed) and was deleted: run again, or use a local copy")
        os.replace(part, destination)
        return destination
    have = _part_size(part)
    raise DataError(f"the download of {name} from {url} broke off {attempts} times ({have} bytes kept in {part}); "
                    f"run again to resume, or point --data (or RELUATTN_DATA) at a local copy")


def fetch_cifar(kind: str, *, progress: bool = True, url: str | None = None, md5: str | None = None,
                timeout: float = 10.0) -> Path:
    """The canonical archive of `kind` ("cifar10" / "cifar100") in the cache folder, downloaded if absent.
    The URL is `url`, else the archive's environment variable (e.g. RELUATTN_CIFAR10_URL), else the official one."""
    if kind not in ARCHIVES:
        raise DataError(f"only {', '.join(ARCHIVES)} can be downloaded; got {kind!r} (pass --data PATH)")
    archive = ARCHIVES[kind]
    md5 = md5 or archive.md5
    destination = cache_dir() / "downloads" / archive.filename
    if destination.is_file():  # verified again on every use: another program (or a person) may have changed it
        actual = md5_of(destination)
        if actual == md5:
            return destination
        aside = destination.with_name(destination.name + ".md5-mismatch")
        os.replace(destination, aside)
        warnings.warn(f"{destination} has md5 {actual}, not the published {md5}; moved it to {aside.name} and "
                      f"downloading the archive again", DataWarning)
    url = url or os.environ.get(archive.url_variable) or archive.url
    return download(url, destination, md5, progress=progress, timeout=timeout)
