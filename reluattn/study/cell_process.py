"""The process that runs a cell: `python -m reluattn train` (or `evaluate`) under the sweep, and what a stop
signal to the sweep does to it.

    run_child(arguments, stdout, stderr)   run it to its end; its exit code (None: the sweep was stopping)
    stop_requested                         the sweep's SIGINT / SIGTERM handler (Child.stop: the signal)

A child dies with the sweep, even by SIGKILL (PR_SET_PDEATHSIG on Linux), so no orphan trains unwatched. It
runs in a process group of its own: a terminal's Ctrl-C reaches only the sweep, which passes it on once and
waits while the cell saves its checkpoint (a trainer stops at once, without saving, on a second signal).
A second signal to the sweep is passed on too, and stops the sweep at once.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

from ..training.run_folder import RunFolderError

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _start_child() -> None:
    """In the child, before it runs: be killed when the sweep dies (even by SIGKILL), so no orphan trains on
    unwatched; take a process group of its own, so a terminal's Ctrl-C reaches only the sweep, which
    forwards it once (a trainer stops at once on a second signal); take the stop signals again."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: an orphan finishes its run, and the lock keeps it alone
        pass
    os.setpgid(0, 0)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def _child_environment() -> dict:
    """The cells share JAX's persistent compilation cache: a cell's second seed compiles nothing."""
    from ..data.cache import cache_dir
    environment = dict(os.environ)
    environment.setdefault("JAX_COMPILATION_CACHE_DIR", str(cache_dir() / "xla"))
    environment.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    return environment


class Child:
    """The running `reluattn` subprocess, and the stop signal the sweep received (forwarded to it once)."""
    process = None
    stop = None          # the first SIGINT / SIGTERM, or None
    forwarded = False    # whether `process` was sent it


def _forward_stop() -> None:
    if Child.process is not None and Child.stop is not None and not Child.forwarded:
        Child.forwarded = True
        Child.process.send_signal(Child.stop)


def stop_requested(signum, frame):
    """Ctrl-C / SIGTERM: the running cell saves a checkpoint and stops, the sweep waits for it, then stops.
    A second signal stops at once."""
    if Child.stop is not None:
        if Child.process is not None:
            Child.process.send_signal(signum)
        raise KeyboardInterrupt("interrupted again: stopped at once; rerun the same command to continue "
                                "(a cell goes on from its last checkpoint)")
    Child.stop = signum
    _forward_stop()


def run_child(arguments: list[str], stdout, stderr) -> int | None:
    """Run `python -m reluattn ARGUMENTS` to its end (a stop signal is forwarded to it); its exit code, or
    None when the sweep was asked to stop before it started."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # a signal now is handled once the child is known
    try:
        if Child.stop is not None:
            return None
        Child.process = subprocess.Popen([sys.executable, "-m", "reluattn", *arguments], stdout=stdout,
                                         stderr=stderr, stdin=subprocess.DEVNULL, env=_child_environment(),
                                         preexec_fn=_start_child)
        Child.forwarded = False
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    try:
        _forward_stop()  # a signal handled while the child was being started
        return Child.process.wait()  # after a forwarded stop too: the cell saves its checkpoint first
    finally:
        Child.process = None


def open_log(log_path: Path):
    """`train.log` opened for appending; never through a symlink planted in its place."""
    try:
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise RunFolderError(f"{log_path} is a symbolic link; reluattn writes only files it created — "
                                 f"remove it") from None
        raise
    return os.fdopen(fd, "a")
