"""Who may use a sweep folder, and what `reluattn sweep` may find in it.

    with use_sweep_folder(out, experiment, scale) as saved:            a sweep: lock, admit, clean
    with use_sweep_folder(out, experiment, scale, report=True) as saved:   --report: sweep.json must be there
    is_stale(record, cell, seed)        whether a cell's recorded train command is not the current grid's
    refuse_stale_runs(out, ...)         refuse runs recorded for another experiment or with other flags
    run_dir_of(out, cell, seed)         a run's folder: <out>/<cell>/seed<seed>
    read_cell_record(run_dir)           a run's cell.json, None where it has none (or it does not parse)
    seconds_spent(run_dir, record)      a finished run's time, all its attempts
    plan_sweep(out, cells, seeds)       the sweep's runs, their records, those left and the finished ones' times
    parse_shard("2/7")                  (2, 7): the second of seven shares of a grid's runs (`--shard`)

The lock is a run folder's kind (reluattn/training/folder_lock.py) on `<out>/.reluattn-sweep.lock`, held for
the sweep's (or the report's) life: the kernel drops it when its holder ends, however it ends. `sweep.json`
says which experiment and scale the folder holds; a folder without one is a sweep folder only while it is
empty.
"""

from __future__ import annotations

import json
import os
import shlex
from contextlib import contextmanager
from pathlib import Path

from ..machine import machine_description
from ..training.files import TEMPORARY_MARK, write_atomically
from ..training.folder_lock import FolderLock
from ..training.run_folder import CELL_RECORD, CHECKPOINTS, LATEST, SUMMARY
from .experiments import EXPERIMENTS, SCALES, seeds_of, train_arguments

SWEEP_LOCK = ".reluattn-sweep.lock"
SWEEP_RECORD = "sweep.json"
REPORT_FILES = ("results.csv", "results.json")


class SweepFolderError(ValueError):
    """A sweep folder is in use, or is not a sweep of this experiment and scale; the message says what to do."""


class SweepFolderLock(FolderLock):
    """An exclusive, non-blocking lock on a sweep folder for the life of a `with` block."""

    holder, error = "reluattn sweep", SweepFolderError

    def __init__(self, out):
        super().__init__(out, SWEEP_LOCK)
        self.out = self.folder


def first_few(names: list[str]) -> str:
    """The first five of `names` for a one-line message, "..." when there are more."""
    return ", ".join(names[:5]) + (" ..." if len(names) > 5 else "")


def read_sweep_record(out) -> dict | None:
    """{"experiment", "scale"} from `out`/sweep.json; None when there is none; an error when it is damaged."""
    path = Path(out) / SWEEP_RECORD
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        saved = json.loads(text)
    except ValueError:
        saved = None
    if (not isinstance(saved, dict) or saved.get("experiment") not in EXPERIMENTS
            or saved.get("scale") not in SCALES):
        raise SweepFolderError(f"{path} is not a sweep record (it needs an \"experiment\" of "
                               f"{', '.join(EXPERIMENTS)} and a \"scale\" of {', '.join(SCALES)}); fix it, or "
                               f"choose another --out")
    return {"experiment": saved["experiment"], "scale": saved["scale"]}


def _our_temporaries(out: Path, experiment: str) -> list[Path]:
    """The temporaries a killed sweep or report left in `out` (files.py names them ".<name>.<random>.tmp")."""
    names = (*REPORT_FILES, SWEEP_RECORD, f"{experiment}.png")
    return [entry for entry in out.iterdir() if entry.name.endswith(TEMPORARY_MARK)
            and any(entry.name.startswith(f".{name}.") for name in names)
            and (entry.is_symlink() or entry.is_file())]


def _admitted(out: Path, experiment: str | None, scale: str | None, report: bool) -> dict | None:
    """{"experiment", "scale"} of the sweep in `out`, or None for an empty folder a sweep may take; refuses
    any other folder, and (with `report`) one without sweep.json or of another experiment or scale."""
    saved = read_sweep_record(out) if out.is_dir() else None
    if saved is None:
        if report:
            raise SweepFolderError(f"{out} holds no {SWEEP_RECORD}, so it is not a sweep folder; pass the --out "
                                   f"of a sweep")
        if not out.is_dir():
            return None
        ours = {SWEEP_LOCK, *(entry.name for entry in _our_temporaries(out, experiment))}
        others = sorted(entry.name for entry in out.iterdir() if entry.name not in ours)
        if others:
            shown = first_few(others)
            raise SweepFolderError(f"{out} is not empty and is not a sweep folder (no {SWEEP_RECORD}; it holds "
                                   f"{shown}); choose another --out (a new or empty folder) — reluattn never "
                                   f"overwrites files it did not write")
        return None
    wanted = {"experiment": experiment or saved["experiment"], "scale": scale or saved["scale"]}
    if wanted != saved:
        if report:
            raise SweepFolderError(f"{out} holds the sweep {saved['experiment']} at scale {saved['scale']} (its "
                                   f"{SWEEP_RECORD}), not {wanted['experiment']} at scale {wanted['scale']}; "
                                   f"run `reluattn sweep {saved['experiment']} --report --out {out}`")
        raise SweepFolderError(f"{out} holds the sweep {saved['experiment']} at scale {saved['scale']}; choose "
                               f"another --out for {experiment} at scale {scale}")
    return saved


@contextmanager
def use_sweep_folder(out, experiment: str | None, scale: str | None, *, report: bool = False):
    """Hold `out`'s lock for the block, after admitting the folder: a sweep of `experiment` at `scale`, or an
    empty folder (made a sweep's; not with `report`). Yields {"experiment", "scale"} from its sweep.json
    (with `report`, a None `experiment` or `scale` is taken from there). Removes the temporaries a killed
    sweep or report left."""
    out = Path(out)
    if os.path.lexists(out) and not out.is_dir():
        raise SweepFolderError(f"{out} is a file, not a folder; pass a folder as --out (a new or empty one, or "
                               f"the folder of a sweep)")
    if report and not out.is_dir():
        raise SweepFolderError(f"{out} is not a folder; pass the --out of a sweep")
    _admitted(out, experiment, scale, report)  # before a lock file is made in a folder that is not a sweep's
    out.mkdir(parents=True, exist_ok=True)
    with SweepFolderLock(out):
        saved = _admitted(out, experiment, scale, report)  # again, holding the lock
        if saved is None:
            saved = {"experiment": experiment, "scale": scale}
            write_atomically(out / SWEEP_RECORD, json.dumps(saved, indent=2, sort_keys=True) + "\n")
        for temporary in _our_temporaries(out, saved["experiment"]):
            temporary.unlink()
        yield saved


def recorded_train_arguments(command) -> list[str] | None:
    """The `reluattn train` arguments of a recorded command, less --out and --data (None: not one)."""
    if not isinstance(command, str):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if words[:2] != ["reluattn", "train"]:
        return None
    words, arguments = words[2:], []
    while words:
        word = words.pop(0)
        if word in ("--out", "--data") and words:
            words.pop(0)
        else:
            arguments.append(word)
    return arguments


def is_stale(record: dict, cell, seed: int) -> bool:
    """Whether a cell record's run is not the current grid's (its train command differs; --out and --data may)."""
    return recorded_train_arguments(record.get("command")) != train_arguments(cell, seed)


def run_dir_of(out: Path, cell_name: str, seed: int) -> Path:
    return Path(out) / cell_name / f"seed{seed}"


def has_checkpoint(run_dir: Path) -> bool:
    """Whether the run has a checkpoint to resume from (the trainer writes LATEST after a complete one)."""
    return (run_dir / CHECKPOINTS / LATEST).is_file()


def refuse_stale_runs(out: Path, experiment: str, scale: str, jobs, records) -> None:
    """A run finished (or checkpointed, so it would resume) with other flags than the grid's is not the
    current cell: refuse rather than count it as done, resume it, or delete it. So is a run recorded for another
    experiment (copied in): the report would leave it out, so the sweep must not count it as done."""
    foreign = [f"{cell.name}/seed{seed} ({records[cell.name, seed].get('experiment')})" for cell, seed in jobs
               if records[cell.name, seed] is not None and records[cell.name, seed].get("experiment") != experiment]
    if foreign:
        shown = first_few(foreign)
        raise ValueError(f"{out}: {len(foreign)} runs were recorded for another experiment than {experiment} "
                         f"({shown}; \"experiment\" in their cell.json); a sweep folder holds one experiment's "
                         f"runs: pass a new --out, or move those run folders away")
    stale = [f"{cell.name}/seed{seed}" for cell, seed in jobs
             if records[cell.name, seed] is not None and is_stale(records[cell.name, seed], cell, seed)
             and (records[cell.name, seed].get("status") == "done"
                  or has_checkpoint(run_dir_of(out, cell.name, seed)))]
    if stale:
        shown = first_few(stale)
        raise ValueError(f"{out}: {len(stale)} runs were trained with other flags than the {experiment} grid at "
                         f"scale {scale} now gives ({shown}; compare their cell.json \"command\" with "
                         f"`reluattn sweep {experiment} --scale {scale} --list`); pass a new --out to run the "
                         f"current grid, or move those run folders away to train them again")


def read_cell_record(run_dir: Path) -> dict | None:
    try:
        record = json.loads((run_dir / CELL_RECORD).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def seconds_spent(run_dir: Path, record: dict) -> float:
    """A finished run's time: the trainer's own wall time where it is longer, since a resumed run's record counts
    only its last attempt (and a killed attempt left no record of its time)."""
    try:
        trained = float(json.loads((run_dir / SUMMARY).read_text()).get("wall_time_s", 0.0))
    except (OSError, ValueError, TypeError, AttributeError):
        trained = 0.0
    return max(float(record.get("sweep_seconds", 0.0)), trained)


def parse_shard(text: str) -> tuple[int, int]:
    """"K/N" -> (K, N) with 1 <= K <= N: a sweep that runs only the K-th of N shares of its grid's runs."""
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise ValueError(f"takes K/N, two whole numbers (e.g. 2/7), not {text!r}") from None
    if not 1 <= k <= n:
        raise ValueError(f"K/N needs 1 <= K <= N, got {text}")
    return k, n


def plan_sweep(out: Path, cells, seeds: int, shard: tuple[int, int] | None = None):
    """The sweep's (cell, seed) runs, seed-major (a sweep cut short still has the whole grid at its first seeds;
    a headline cell runs at least its own number of seeds); each run's cell record (None where there is none);
    the runs not done; and each cell's times in seconds of the runs finished on this machine (the time left is
    estimated per cell; runs copied in from another machine, say a GPU's, would misstate this one's pace).
    `shard` (K, N): only every N-th of those runs from the K-th on. The share depends on the grid alone, not on
    what the folder holds, so N sweeps in folders of their own split the runs and each resumes only its own."""
    jobs = [(cell, cell.first_seed + i) for i in range(max(seeds_of(cell, seeds) for cell in cells))
            for cell in cells if i < seeds_of(cell, seeds)]
    if shard is not None:
        jobs = jobs[shard[0] - 1::shard[1]]
    records = {(c.name, s): read_cell_record(run_dir_of(out, c.name, s)) for c, s in jobs}
    pending = [(c, s) for c, s in jobs if (records[c.name, s] or {}).get("status") != "done"]
    seconds, here = {}, machine_description()
    for (name, seed), record in records.items():
        if (record or {}).get("status") == "done" and record.get("machine", here) == here:
            seconds.setdefault(name, []).append(seconds_spent(run_dir_of(out, name, seed), record))
    return jobs, records, pending, seconds
