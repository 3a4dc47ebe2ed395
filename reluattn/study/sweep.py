"""`reluattn sweep EXPERIMENT`: train every cell of an experiment's grid, once per seed, then report.

    <out>/<cell>/seed<S>/        one `reluattn train --out` run directory per cell and seed, plus
        cell.json                the sweep's record of it: labels, command, status, exit code, machine
        train.log                what the training printed
        fewshot.json             `reluattn evaluate --fewshot` of the final checkpoint (when the experiment asks)
        config.json              a copy of the run's config; of the checkpoints only the final one is kept
    <out>/results.csv, results.json, <experiment>.png     the report (report.py), rebuilt from the folders alone

Resumable and idempotent: a cell whose cell.json says "done" is skipped; a cell killed mid-run has a
checkpoint and continues with `reluattn train --resume` (bit-exact, so the table is the same as an
uninterrupted sweep's); a cell that fails is recorded as "failed" and the others go on (a rerun retries it).
Each cell runs in its own process (`python -m reluattn train`, cell_process.py), so a crash cannot take the
sweep down, and that process dies with the sweep; Ctrl-C lets the running cell save its checkpoint, marks it
"interrupted" and stops (a rerun continues it). The sweep holds the folder's lock throughout and admits only
an empty folder or a sweep of the same experiment and scale (sweep_folder.py); a finished run whose recorded
command is not the grid's is refused, never counted as done. The logs (cell.json, summary.json,
metrics.jsonl, config.json, fewshot.json) are all the report needs: docs/run-logs/<experiment>/ keeps them
without the checkpoints.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..machine import machine_description
from ..progress import time_left, time_to_go
from ..training.files import TEMPORARY_MARK, write_atomically
from ..training.run_folder import (CELL_RECORD, CONFIG_COPY, FEWSHOT, TRAIN_LOG, RunFolderError,
                                   RunFolderLock, remove_our_files)
from .cell_process import STOP_SIGNALS, Child, open_log, run_child, stop_requested
from .experiments import EXPERIMENTS, FEWSHOT_SHOTS, cells_of, seeds_of, train_arguments
from .sweep_folder import (has_checkpoint, plan_sweep, read_cell_record, refuse_stale_runs, run_dir_of,
                           seconds_spent, use_sweep_folder)

# What a run directory may hold before its first checkpoint; a cell restarted from scratch removes only these.
RESTARTABLE_FILES = ("metrics.jsonl", "summary.json", TRAIN_LOG, CELL_RECORD, FEWSHOT, CONFIG_COPY)
# Shots per class of the few-shot probe where a scale needs fewer than FEWSHOT_SHOTS: the smoke scale's
# 128 validation images hold as few as 7 of a class on the shipped CIFAR-10 copy (data_seed 0), and the
# probe needs more images of every class than its shots.
FEWSHOT_SHOTS_AT_SCALE = {"smoke": 5}


def fewshot_shots(scale: str) -> int:
    return FEWSHOT_SHOTS_AT_SCALE.get(scale, FEWSHOT_SHOTS)


def write_json_atomically(path: Path, data) -> None:
    write_atomically(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def _clear_partial_run(run_dir: Path) -> None:
    """A run killed before its first checkpoint: remove what the sweep and the trainer wrote, nothing else.
    Call it holding the run folder's lock (run_cell does), so no running trainer loses its files."""
    if not run_dir.exists():
        return
    foreign = [p.name for p in run_dir.iterdir()
               if p.name not in RESTARTABLE_FILES and p.name != "checkpoints" and not p.name.startswith(".")]
    if foreign:
        raise RunFolderError(f"{run_dir} holds files the sweep did not write ({', '.join(sorted(foreign))}); "
                             f"move them away or pass another --out")
    for name in RESTARTABLE_FILES:
        (run_dir / name).unlink(missing_ok=True)


def _clean_cell_temporaries(run_dir: Path) -> None:
    """The temporaries a killed sweep left beside a run (".cell.json.<random>.tmp" and the like)."""
    for entry in run_dir.iterdir():
        if (entry.name.endswith(TEMPORARY_MARK) and (entry.is_symlink() or entry.is_file())
                and any(entry.name.startswith(f".{name}.") for name in (CELL_RECORD, FEWSHOT, CONFIG_COPY))):
            entry.unlink()


def _run_logged(arguments: list[str], log_path: Path) -> int | None:
    """Run `python -m reluattn ARGUMENTS`, appending its output to log_path; its exit code (None: not run)."""
    with open_log(log_path) as log:
        log.write(f"$ {shlex.join(['reluattn', *arguments])}\n")
        log.flush()
        return run_child(arguments, stdout=log, stderr=subprocess.STDOUT)


def run_cell(experiment: str, cell, seed: int, run_dir: Path, data: str | None, scale: str = "cpu") -> dict:
    """Train one cell for one seed (resuming a killed run), then its few-shot probe; its cell record
    (status "done", "failed", or "interrupted" when the sweep was asked to stop)."""
    record = {"experiment": experiment, "cell": cell.name, "labels": cell.labels, "seed": seed,
              "machine": machine_description(), "status": "running"}
    data_flags = ["--data", data] if data else []
    try:
        with RunFolderLock(run_dir):  # no trainer of this cell may be running while the sweep clears it
            _clean_cell_temporaries(run_dir)
            resume = has_checkpoint(run_dir)
            if not resume:
                _clear_partial_run(run_dir)
    except RunFolderError as error:  # someone else's run, or files not ours: leave the folder as it is
        return {**record, "status": "failed", "error": str(error), "sweep_seconds": 0.0}
    if resume:
        arguments = ["train", "--out", str(run_dir), "--resume", "--no-progress", *data_flags]
    else:
        arguments = ["train", "--out", str(run_dir), *data_flags, *train_arguments(cell, seed)]
    record["command"] = shlex.join(["reluattn", "train", "--out", str(run_dir), *data_flags,
                                    *train_arguments(cell, seed)])
    if resume:  # keep the command that started the run: this sweep may have been given another (or no) --data
        record["command"] = (read_cell_record(run_dir) or {}).get("command", record["command"])
    write_json_atomically(run_dir / CELL_RECORD, record)
    started = time.time()
    try:
        code = _run_logged(arguments, run_dir / TRAIN_LOG)
        if code == 0 and Child.stop is None and EXPERIMENTS[experiment].fewshot:
            code = _fewshot(run_dir, data, fewshot_shots(scale))
    except KeyboardInterrupt:  # a second stop signal
        record.update(status="interrupted", sweep_seconds=round(time.time() - started, 1))
        write_json_atomically(run_dir / CELL_RECORD, record)
        raise
    if Child.stop is not None:  # stopped (the trainer saved its checkpoint): the next run goes on from there
        record.update(status="interrupted", exit_code=code, sweep_seconds=round(time.time() - started, 1))
        write_json_atomically(run_dir / CELL_RECORD, record)
        return record
    if code == 0:
        _keep_only_the_final_checkpoint(run_dir)
    record.update(status="done" if code == 0 else "failed", exit_code=code,
                  sweep_seconds=round(time.time() - started, 1))
    if code != 0:
        record["error"] = _last_error_line(run_dir / TRAIN_LOG)
    write_json_atomically(run_dir / CELL_RECORD, record)
    return record


def _keep_only_the_final_checkpoint(run_dir: Path) -> None:
    """A finished cell needs only its final checkpoint (the report reads its config and parameters)."""
    checkpoints = run_dir / "checkpoints"
    latest = (checkpoints / "LATEST").read_text().strip()
    for folder in checkpoints.glob("step_*"):
        if folder.name != latest:
            remove_our_files(folder)  # the checkpoint files reluattn wrote, nothing else
    write_atomically(run_dir / CONFIG_COPY, (checkpoints / latest / "config.json").read_bytes())


def _fewshot(run_dir: Path, data: str | None, shots: int) -> int | None:
    """`reluattn evaluate --fewshot` of the run's final checkpoint into fewshot.json; its exit code. Its
    output goes to a private temporary (mkstemp: a name planted in the folder is never written through)."""
    arguments = ["evaluate", "--checkpoint", str(run_dir), "--fewshot", str(shots), "--json"]
    if data:
        arguments += ["--data", data]
    fd, temporary = tempfile.mkstemp(prefix=f".{FEWSHOT}.", suffix=TEMPORARY_MARK, dir=run_dir)
    try:
        with os.fdopen(fd, "w") as out, open_log(run_dir / TRAIN_LOG) as log:
            code = run_child(arguments, stdout=out, stderr=log)
        if code == 0:
            try:
                result = json.loads(Path(temporary).read_text())
            except ValueError:
                with open_log(run_dir / TRAIN_LOG) as log:
                    log.write("error: `reluattn evaluate --fewshot --json` printed no JSON\n")
                return 1
            write_json_atomically(run_dir / FEWSHOT, result)
        return code
    finally:
        os.unlink(temporary)


def _last_error_line(log_path: Path) -> str:
    try:
        lines = [line for line in log_path.read_text().splitlines() if line.strip()]
    except OSError:
        return "no log"
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or ["no output"])[-1][-300:]


def select_cells(experiment: str, scale: str, patterns=None) -> list:
    """The experiment's cells, or those whose name matches one of the glob `patterns` (e.g. "t17-*")."""
    cells = cells_of(experiment, scale)
    if not patterns:
        return cells
    chosen = [cell for cell in cells if any(fnmatch.fnmatchcase(cell.name, p) for p in patterns)]
    if not chosen:
        raise ValueError(f"no cell of {experiment} matches {' '.join(patterns)}; `reluattn sweep {experiment} "
                         f"--list` shows them")
    return chosen


def run_sweep(experiment: str, *, scale: str = "cpu", seeds: int = 2, out, data: str | None = None,
              cells=None, shard: tuple[int, int] | None = None, progress: bool = True, stdout=None) -> dict:
    """Run (or continue) the sweep; then write its report. Returns {"done", "failed", "skipped", "report"}.
    `cells`: glob patterns of the cells to run (default: all); `shard` (K, N): only the K-th of N shares of
    their runs (sweep_folder.plan_sweep), for N processes in folders of their own, merged after (merge.py).
    Holds the sweep folder's lock throughout; a folder that is not empty and not a sweep of `experiment` at
    `scale` is refused, and so is one whose finished runs were trained with other flags than the grid now
    gives (their results would be mixed)."""
    stdout = stdout or sys.stdout
    out = Path(out)
    cells = select_cells(experiment, scale, cells)
    if seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {seeds}")
    with use_sweep_folder(out, experiment, scale):
        jobs, records, pending, seconds = plan_sweep(out, cells, seeds, shard)
        refuse_stale_runs(out, experiment, scale, jobs, records)
        counts = {"done": 0, "failed": 0, "skipped": len(jobs) - len(pending)}
        share = f", shard {shard[0]} of {shard[1]}" if shard else ""
        print(f"reluattn sweep {experiment} --scale {scale}: {len(jobs)} runs ({grid_size(cells, seeds)}{share}), "
              f"{counts['skipped']} already done, {len(pending)} to run{time_to_go(pending, seconds)}; folder {out}",
              file=stdout, flush=True)
        _run_pending(experiment, scale, out, data, pending, len(jobs), counts, progress, stdout, seconds)
        from .report import write_report
        counts["report"] = write_report(experiment, out, scale=scale)
    print(f"reluattn sweep {experiment}: {counts['done']} run, {counts['skipped']} skipped, {counts['failed']} "
          f"failed; report {counts['report']['table']}", file=stdout, flush=True)
    return counts


def grid_size(cells, seeds: int) -> str:
    """'2 cells x 20 seeds', or '9 cells, 3 to 20 seeds a cell' where cells ask for more seeds than the sweep."""
    counts = [seeds_of(cell, seeds) for cell in cells]
    if min(counts) == max(counts):
        return f"{len(cells)} cell{'s' * (len(cells) != 1)} x {counts[0]} seed{'s' * (counts[0] != 1)}"
    return f"{len(cells)} cells, {min(counts)} to {max(counts)} seeds a cell"


def _run_pending(experiment, scale, out, data, pending, total, counts, progress, stdout, seconds) -> None:
    """Run the pending (cell, seed)s one after the other, a line each; stop (KeyboardInterrupt) when asked."""
    bar = _progress_bar(total, counts["skipped"], progress)
    Child.stop = None
    previous = {s: signal.signal(s, stop_requested) for s in STOP_SIGNALS}
    try:
        for index, (cell, seed) in enumerate(pending):
            record = run_cell(experiment, cell, seed, run_dir_of(out, cell.name, seed), data, scale)
            if record["status"] == "interrupted" or Child.stop is not None:
                name = signal.Signals(Child.stop).name if Child.stop else "a signal"
                raise KeyboardInterrupt(f"interrupted by {name}: {cell.name} seed {seed} is marked "
                                        f"{record['status']} (a stopped cell keeps its checkpoint); rerun the "
                                        f"same command to continue")
            counts[record["status"]] += 1
            if record["status"] == "done":
                seconds.setdefault(cell.name, []).append(seconds_spent(run_dir_of(out, cell.name, seed), record))
            line = (f"[{counts['skipped'] + index + 1}/{total}] {cell.name} seed {seed}: {record['status']}"
                    f" in {record['sweep_seconds']:.0f} s; {time_left(pending[index + 1:], seconds)}")
            if record["status"] == "failed":
                line += f" ({record['error']})"
            if bar is not None:
                bar.update(1)
                bar.write(line, file=stdout)
            else:
                print(line, file=stdout, flush=True)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if bar is not None:
            bar.close()


def report_sweep(out, experiment: str | None = None, scale: str | None = None) -> dict:
    """Rebuild the report of the sweep in `out` from its run directories, holding the folder's lock; the
    experiment and scale are its sweep.json's (`experiment`, `scale`: refused when they differ)."""
    from .report import write_report
    with use_sweep_folder(out, experiment, scale, report=True) as saved:
        return write_report(saved["experiment"], out, scale=saved["scale"])


def _progress_bar(total: int, initial: int, progress: bool):
    if not (progress and sys.stderr.isatty()):
        return None
    from ..progress import tqdm
    return tqdm(total=total, initial=initial, unit="run", dynamic_ncols=True, file=sys.stderr)
