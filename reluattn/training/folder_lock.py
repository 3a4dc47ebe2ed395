"""One reluattn process per folder: the lock a run folder (run_folder.py) and a sweep folder
(study/sweep_folder.py) are held with.

    FolderLock(folder, name)     with it: an exclusive, non-blocking lock on <folder>/<name> for the block
    flock(fd, "EX" | "SH", error)    fcntl.flock without waiting; BlockingIOError when another process holds it
    in_use(folder, fd, holder, error)    the error that says who holds the lock on `fd`

The lock is `fcntl.flock`: the kernel drops it when its holder ends, however it ends (SIGKILL included), so a
stale lock cannot outlive its holder. The file holds the holder's PID (for the message a second process
prints) and is never deleted: deleting a lock file while another process opens it would let two in.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path


def flock(fd: int, mode: str, error: type) -> None:
    """fcntl.flock(fd, LOCK_<mode> | LOCK_NB). fcntl is POSIX-only, so it is imported here, when a folder is
    locked, not when reluattn is imported (reluattn.cli and reluattn.testing import on Windows); without it,
    `error` says so."""
    try:
        import fcntl
    except ImportError:
        raise error("locking a folder needs fcntl (Linux, macOS); this platform has none: run reluattn under WSL "
                    "or another POSIX system") from None
    fcntl.flock(fd, getattr(fcntl, f"LOCK_{mode}") | fcntl.LOCK_NB)


def in_use(folder, fd: int, holder: str, error: type) -> Exception:
    """`error` saying that `folder` is in use by another `holder` ("reluattn train"), with the PID in its lock."""
    pid = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
    return error(f"{folder} is in use by another {holder} (PID {pid}); wait for it to finish or stop it, or choose "
                 f"another --out")


class FolderLock:
    """An exclusive, non-blocking lock on `folder`/`name` for the life of a `with` block (or the process).
    A subclass names who holds it (`holder`) and the error (a ValueError whose message says what to do)."""

    holder = "reluattn"
    error = ValueError

    def __init__(self, folder, name: str):
        self.folder = Path(folder)
        self.path = self.folder / name
        self.fd = None

    def __enter__(self) -> "FolderLock":
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise self.error(f"{self.path} is a symbolic link; reluattn will not lock through it — remove it "
                                 f"or choose another --out") from None
            raise
        try:
            flock(self.fd, "EX", self.error)
        except (BlockingIOError, self.error) as error:  # held by another process, or no fcntl here
            if isinstance(error, BlockingIOError):
                error = in_use(self.folder, self.fd, self.holder, self.error)
            os.close(self.fd)
            self.fd = None
            raise error from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the only descriptor releases the lock
            self.fd = None
