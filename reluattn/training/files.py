"""Writing files so that a crash, a full disk or a planted symlink never damages what is there.

    write_atomically(path, text_or_bytes)   a new temporary file beside `path`, then os.replace
    append_line(path, line)                  one line appended to a regular file (never through a symlink)
    make_temporary_dir(folder, prefix)       a new, private directory in `folder` (tempfile.mkdtemp)
    finite_or_none(value)                    NaN and infinities, however deeply nested, as None: strict JSON

Temporaries are made with `tempfile.mkstemp` / `mkdtemp`, which create a new name with O_CREAT | O_EXCL: a
file or symlink planted under a predictable name is never opened, let alone written through. Every
temporary's name is ".<target name>.<random>.tmp" (a directory's ".<prefix>-<random>.tmp"), so
leftovers of a killed process are recognisable (run_folder.py cleans them). A failed write (a full disk, say) removes its temporary and raises an OSError that
names the file it could not write. The finished file (folder) gets the mode a plain `open` (`mkdir`) would
give it under the umask, not mkstemp's private 0600 (0700), so a run can be shared as any other file.
"""

from __future__ import annotations

import errno
import math
import os
import tempfile
from pathlib import Path

TEMPORARY_MARK = ".tmp"


def _could_not_write(error: OSError, path) -> OSError:
    """The same error, naming `path` (an OSError from write() names no file)."""
    reason = "the disk is full" if error.errno == errno.ENOSPC else (error.strerror or str(error))
    return OSError(error.errno, f"could not write {path}: {reason}")


def default_mode(directory: bool = False) -> int:
    """The mode `open` / `mkdir` would give a new file (folder) under the process's umask; mkstemp and
    mkdtemp make theirs private (0600 / 0700), which would keep a shared run from the user's group."""
    mask = None
    try:
        with open("/proc/self/status") as status:  # reads the umask without changing it (Linux >= 4.7)
            for line in status:
                if line.startswith("Umask:"):
                    mask = int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    if mask is None:
        mask = os.umask(0o022)
        os.umask(mask)
    return (0o777 if directory else 0o666) & ~mask


def fsync_dir(path) -> None:
    """Make a rename inside `path` durable (where the file system supports it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomically(path, content) -> Path:
    """Replace `path` with `content` (str or bytes) all at once: a reader sees the old file or the new one."""
    path = Path(path)
    data = content.encode() if isinstance(content, str) else bytes(content)
    temporary = None
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMPORARY_MARK, dir=path.parent)
        os.fchmod(fd, default_mode())
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except OSError as error:
        if temporary is not None and os.path.lexists(temporary):
            os.unlink(temporary)
        raise _could_not_write(error, path) from None
    fsync_dir(path.parent)
    return path


def write_atomically_with(path, write) -> Path:
    """Like write_atomically, for writers that need a file name (`write(temporary_path)`, e.g. savefig)."""
    path = Path(path)
    temporary = None
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMPORARY_MARK, dir=path.parent)
        os.fchmod(fd, default_mode())
        os.close(fd)
        write(temporary)
        os.replace(temporary, path)
    except OSError as error:
        raise _could_not_write(error, path) from None
    finally:
        if temporary is not None and os.path.lexists(temporary):
            os.unlink(temporary)
    return path


def append_line(path, line: str) -> None:
    """Append `line` (no newline needed) to `path`, creating it; refuses to follow a symlink."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise OSError(error.errno, f"{path} is a symbolic link; reluattn writes only regular files it "
                                       f"created", str(path)) from None
        raise _could_not_write(error, path) from None
    try:
        os.write(fd, (line.rstrip("\n") + "\n").encode())
    except OSError as error:
        raise _could_not_write(error, path) from None
    finally:
        os.close(fd)


def make_temporary_dir(folder, prefix: str) -> Path:
    """A new, empty directory `folder/.<prefix>-XXXX.tmp` that no one else can have made or linked."""
    path = Path(tempfile.mkdtemp(prefix=f".{prefix}-", suffix=TEMPORARY_MARK, dir=folder))
    os.chmod(path, default_mode(directory=True))
    return path


def finite_or_none(value):
    """`value` with every NaN or infinity, however deeply nested, replaced by None (JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite_or_none(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(item) for item in value]
    return value
