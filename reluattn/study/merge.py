"""Merge sweep folders: the finished runs of sweeps of one experiment and scale made elsewhere (a GPU's folders,
one per cell, say) copied into one folder, which then holds the grid's logs and its report.

    reluattn sweep EXPERIMENT --scale SCALE --out DIR --merge SOURCE [SOURCE ...]

Only finished runs are copied, and of each only its logs (cell.json, config.json, metrics.jsonl, summary.json,
train.log, fewshot.json), never a checkpoint. A run that DIR has finished already is kept; a run DIR holds
unfinished (stopped, with its checkpoint) is replaced by the finished one. Each run lands whole or not at all
(copied beside its place, then renamed). A source that is not a sweep of this experiment and scale, or that holds
a finished run the current grid would not train (another train command, another experiment), is refused before
anything is copied. Each run's cell.json keeps the machine it ran on.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from ..training.files import TEMPORARY_MARK
from ..training.run_folder import CELL_RECORD, COMPANION_NAMES, METRICS, SUMMARY
from .experiments import cells_of
from .sweep_folder import (SweepFolderError, first_few, is_stale, read_cell_record, read_sweep_record, run_dir_of,
                           use_sweep_folder)

LOG_NAMES = tuple(sorted({METRICS, SUMMARY, *COMPANION_NAMES}))  # a run folder's files, less its checkpoints


def finished_runs(source: Path, experiment: str, scale: str) -> list[tuple[str, int, Path]]:
    """(cell, seed, run folder) of each finished run in the sweep folder `source`; refuses a folder that is not a
    sweep of `experiment` at `scale`, or that holds a finished run the current grid would not train."""
    saved = read_sweep_record(source) if source.is_dir() else None
    if saved is None:
        raise SweepFolderError(f"{source} is not a sweep folder (no sweep.json); pass the --out of a sweep")
    if saved != {"experiment": experiment, "scale": scale}:
        raise SweepFolderError(f"{source} holds the sweep {saved['experiment']} at scale {saved['scale']}, not "
                               f"{experiment} at scale {scale}; merge it into a folder of its own")
    cells = {cell.name: cell for cell in cells_of(experiment, scale)}
    found, refused = [], []
    for run_dir in sorted(path.parent for path in source.glob(f"*/seed*/{CELL_RECORD}")):
        record = read_cell_record(run_dir)
        if not record or record.get("status") != "done":
            continue
        cell, seed = cells.get(run_dir.parent.name), run_dir.name[len("seed"):]
        if (cell is None or not seed.isdigit() or record.get("experiment") != experiment
                or is_stale(record, cell, int(seed))):
            refused.append(f"{run_dir.parent.name}/{run_dir.name}")
        else:
            found.append((cell.name, int(seed), run_dir))
    if refused:
        shown = first_few(refused)
        raise SweepFolderError(f"{source}: {len(refused)} finished runs are not runs of the current {experiment} "
                               f"grid at scale {scale} ({shown}; compare their cell.json \"command\" with "
                               f"`reluattn sweep {experiment} --scale {scale} --list`); nothing was merged")
    return found


def merge_sweeps(out, sources, experiment: str, scale: str) -> dict:
    """Copy the finished runs of the sweep folders `sources` into the sweep folder `out` (made if new), holding
    its lock; {"copied", "replaced", "kept"}: runs new there, unfinished runs replaced, finished runs kept."""
    out = Path(out)
    runs = [run for source in sources for run in finished_runs(Path(source), experiment, scale)]  # refuse first
    counts = {"copied": 0, "replaced": 0, "kept": 0}
    with use_sweep_folder(out, experiment, scale):
        for cell, seed, source_dir in runs:
            target = run_dir_of(out, cell, seed)
            if (read_cell_record(target) or {}).get("status") == "done":
                counts["kept"] += 1
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=TEMPORARY_MARK, dir=target.parent))
            try:
                for name in LOG_NAMES:
                    if (source_dir / name).is_file():
                        shutil.copy2(source_dir / name, staging / name)
                replacing = os.path.lexists(target)
                if replacing:  # a stopped run of the same command: the finished one supersedes it
                    shutil.rmtree(target)
                os.replace(staging, target)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            counts["replaced" if replacing else "copied"] += 1
    return counts


__all__ = ["LOG_NAMES", "finished_runs", "merge_sweeps"]
