"""A run folder's layout (the one home of its names), who may use it, and what `reluattn train` may find,
write and delete in it.

    <run>/checkpoints/step_00000100/   CHECKPOINT_FILES:
        config.json       the run's configuration (TrainConfig and a description of its data)
        params.npz        the parameter tree, flattened to "blocks/0/attn/qkv/w"-style keys
        opt_state.npz     the optimizer state, flattened the same way (its layout is the backend's)
        state.json        step, epoch, seeds: what a resumed run needs to continue exactly
    <run>/checkpoints/LATEST   the name of the newest complete checkpoint
    <run>/metrics.jsonl        one JSON object per line (run_dir.py)
    <run>/summary.json         written at the end of a run (step_loop.py)
    <run>/.reluattn.lock       the lock one `reluattn train` holds while it uses the folder (below)

    with use_run_folder(run_dir, new_run=True):   the lock, the checks and the clean-up below
        ...

    RunFolderLock(run_dir)          one `reluattn train` per folder at a time
    check_fresh_run_folder(...)     a new run starts only in an empty folder, or one of its own runs that
                                    stopped before it logged or saved anything
    clean_leftovers(run_dir)        temporaries a killed run left behind

The lock (folder_lock.py, `fcntl.flock` on `<run>/.reluattn.lock`) lasts as long as its holder, however it
ends; its file holds the holder's PID and marks the folder as a reluattn run folder.

reluattn deletes only what it wrote: its own files by name (`remove_our_files`), and a folder only once it
is empty. A folder holding anything else is left in place, and the message says what is in the way.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path

from .folder_lock import FolderLock, flock, in_use

LOCK = ".reluattn.lock"
CHECKPOINTS = "checkpoints"
LATEST = "LATEST"  # in checkpoints/: the name of the newest complete checkpoint
METRICS = "metrics.jsonl"
SUMMARY = "summary.json"
# What a run folder holds when reluattn wrote all of it (besides its temporaries, below).
RUN_FOLDER_NAMES = {LOCK, METRICS, SUMMARY, CHECKPOINTS}
# What `reluattn sweep` keeps beside a run in a cell's folder (written before the run starts): a new run
# neither reads nor writes them, so they do not stand in its way.
CELL_RECORD = "cell.json"    # the sweep's record of the cell: labels, command, status, machine
TRAIN_LOG = "train.log"      # what the cell's training printed
FEWSHOT = "fewshot.json"     # the cell's few-shot probe
CONFIG_COPY = "config.json"  # a copy of the checkpoint's config.json, kept beside the logs
COMPANION_NAMES = {CELL_RECORD, TRAIN_LOG, FEWSHOT, CONFIG_COPY}
CONFIG, PARAMS, OPT_STATE, STATE = "config.json", "params.npz", "opt_state.npz", "state.json"  # in a checkpoint
CHECKPOINT_FILES = (CONFIG, PARAMS, OPT_STATE, STATE)
# Temporaries reluattn makes in a run folder (files.py; older versions used ".<name>.tmp", ".tmp-step_N-PID").
TEMPORARY_PREFIXES = (".metrics.jsonl.", ".summary.json.", ".LATEST.", ".tmp-step_")


def is_temporary_name(name: str) -> bool:
    return name.startswith(TEMPORARY_PREFIXES)


def is_companion_name(name: str) -> bool:
    """A sweep's file, or its temporary (".<name>.<...>")."""
    return name in COMPANION_NAMES or any(name.startswith(f".{companion}.") for companion in COMPANION_NAMES)


class RunFolderError(ValueError):
    """A run folder is in use, or holds something a run must not touch; the message says what to do."""


class RunFolderLock(FolderLock):
    """An exclusive, non-blocking lock on a run folder for the life of a `with` block (or the process); makes
    the folder when it is not there."""

    holder, error = "reluattn train", RunFolderError

    def __init__(self, run_dir):
        super().__init__(run_dir, LOCK)
        self.run_dir = self.folder
        self.existed = False  # whether the lock file was there already (the folder held a reluattn run)

    def __enter__(self) -> "RunFolderLock":
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.existed = os.path.lexists(self.path)
        return super().__enter__()


@contextmanager
def use_run_folder(run_dir, *, new_run: bool):
    """Hold `run_dir`'s lock for the block, after refusing a new run where it does not belong, and clean up
    what an interrupted run left."""
    run_dir = Path(run_dir)
    if new_run and run_dir.exists():  # before the lock file would mark a folder that is not ours as a run
        check_fresh_run_folder(run_dir, os.path.lexists(run_dir / LOCK))
    with RunFolderLock(run_dir) as lock:
        if new_run:  # again, holding the lock: another run may have started meanwhile
            check_fresh_run_folder(run_dir, lock.existed)
        clean_leftovers(run_dir)
        yield lock


def refuse_if_in_use(run_dir) -> None:
    """The lock's error now, when another process holds `run_dir`'s lock (before any other check of the
    folder, whose contents that process is changing); creates nothing."""
    try:
        fd = os.open(Path(run_dir) / LOCK, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return  # no lock file (or not one we can read): nobody can be holding it
    try:
        flock(fd, "SH", RunFolderError)
    except BlockingIOError:
        raise in_use(run_dir, fd, RunFolderLock.holder, RunFolderError) from None
    finally:
        os.close(fd)


def has_complete_checkpoint(run_dir) -> bool:
    root = Path(run_dir) / CHECKPOINTS
    return root.is_dir() and any(path.is_dir() and all((path / name).is_file() for name in CHECKPOINT_FILES)
                                 for path in root.glob("step_*"))


def foreign_entries(run_dir) -> list[str]:
    """Names in a run folder (and its checkpoints/) that reluattn would not have written."""
    run_dir = Path(run_dir)
    found = [entry.name for entry in run_dir.iterdir() if entry.name not in RUN_FOLDER_NAMES
             and not is_temporary_name(entry.name) and not is_companion_name(entry.name)]
    root = run_dir / CHECKPOINTS
    if root.is_symlink() or root.exists() and not root.is_dir():
        found.append(CHECKPOINTS)
    elif root.is_dir():
        for entry in root.iterdir():
            ours = entry.name == LATEST or entry.name.startswith("step_") or is_temporary_name(entry.name)
            if not ours:
                found.append(f"{CHECKPOINTS}/{entry.name}")
            elif entry.is_dir() and not entry.is_symlink():
                found += [f"{CHECKPOINTS}/{entry.name}/{inner.name}" for inner in entry.iterdir()
                          if inner.name not in CHECKPOINT_FILES]
    return sorted(found)


def earlier_run(run_dir) -> str | None:
    """What shows that `run_dir` holds a run that got somewhere (so a new run must not start over it): its
    summary.json, any checkpoints/step_* folder (complete or not), or metrics.jsonl records past step 0."""
    run_dir = Path(run_dir)
    if os.path.lexists(run_dir / SUMMARY):
        return SUMMARY
    root = run_dir / CHECKPOINTS
    steps = sorted(entry.name for entry in root.iterdir() if entry.name.startswith("step_")) if root.is_dir() else []
    if steps:
        return f"{CHECKPOINTS}/{steps[-1]}"
    last = _last_logged_step(run_dir / METRICS)
    return f"{METRICS} records up to step {last}" if last else None


def _last_logged_step(path: Path) -> int:
    """The largest "step" of the records in a metrics.jsonl (0 when none, or no file)."""
    if not path.is_file():
        return 0
    last = 0
    with open(path, errors="replace") as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                continue
            step = record.get("step") if isinstance(record, dict) else None
            if isinstance(step, int) and not isinstance(step, bool):
                last = max(last, step)
    return last


def check_fresh_run_folder(run_dir, had_lock_file: bool) -> None:
    """Refuse to start a new run in `run_dir` unless it is new, empty (but for a sweep's files), or a
    reluattn run that stopped before it logged or saved anything (`earlier_run`).

    `had_lock_file`: whether the lock file was there before this run took the lock (a run folder marks
    itself with it; a run of ours killed before it logged or saved anything may be started again)."""
    run_dir = Path(run_dir)
    if has_complete_checkpoint(run_dir):
        raise RunFolderError(f"{run_dir} already holds a run with checkpoints; pass --resume to continue it, or "
                             f"choose another --out for a new run")
    others = [entry.name for entry in run_dir.iterdir() if entry.name != LOCK and not is_companion_name(entry.name)]
    if not others:
        return  # empty, or only what a sweep keeps beside the run
    foreign = foreign_entries(run_dir)
    if had_lock_file and not foreign:
        evidence = earlier_run(run_dir)
        if evidence is None:
            return  # a run of ours stopped before it logged or saved anything: start it again
        raise RunFolderError(f"{run_dir} holds an earlier run ({evidence}) with no complete checkpoint to resume; "
                             f"choose another --out for a new run, or delete its {METRICS}, {SUMMARY} and "
                             f"{CHECKPOINTS}/ to start over in it — a new run never replaces an old one's records")
    shown = ", ".join((foreign or others)[:5]) + (" ..." if len(foreign or others) > 5 else "")
    raise RunFolderError(f"{run_dir} is not empty and is not a reluattn run folder (it holds {shown}); choose "
                         f"another --out (a new or empty folder), or --resume if it is a run to continue — "
                         f"reluattn never deletes files it did not write")


def remove_our_files(directory) -> bool:
    """Delete the checkpoint files reluattn writes in `directory`, then the folder if that left it empty.
    Returns whether the folder is gone (False: it holds something else, which is left alone)."""
    directory = Path(directory)
    if directory.is_symlink() or not directory.is_dir():
        return False
    for name in CHECKPOINT_FILES:
        path = directory / name
        if path.is_file() or path.is_symlink():
            path.unlink()
    try:
        directory.rmdir()
    except OSError:
        return False
    return True


def clean_leftovers(run_dir) -> list[str]:
    """Remove the temporaries an interrupted run left (checkpoint folders being written, half-written
    metrics/summary/LATEST replacements); call it holding the lock. Returns what was removed."""
    run_dir = Path(run_dir)
    removed = []
    for folder in (run_dir, run_dir / CHECKPOINTS):
        if not folder.is_dir() or folder.is_symlink():
            continue
        for entry in folder.iterdir():
            if not is_temporary_name(entry.name):
                continue
            if entry.is_dir() and not entry.is_symlink():
                gone = remove_our_files(entry)
            else:
                entry.unlink()
                gone = True
            if gone:
                removed.append(str(entry.relative_to(run_dir)))
    return removed
