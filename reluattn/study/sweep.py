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
Each cell runs in its own process (`python -m reluattn train`), so a crash cannot take the sweep down, and
that process dies with the sweep. The logs (cell.json, summary.json, metrics.jsonl, config.json,
fewshot.json) are all the report needs: docs/run-logs/<experiment>/ keeps them without the checkpoints.
"""

from __future__ import annotations

import fnmatch
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..machine import machine_description
from ..training.files import write_atomically
from ..training.run_folder import CELL_RECORD, CONFIG_COPY, FEWSHOT, TRAIN_LOG, remove_our_files
from .experiments import EXPERIMENTS, FEWSHOT_SHOTS, cells_of, train_arguments

# What a run directory may hold before its first checkpoint; a cell restarted from scratch removes only these.
RESTARTABLE_FILES = ("metrics.jsonl", "summary.json", TRAIN_LOG, CELL_RECORD, FEWSHOT, CONFIG_COPY)


def write_json_atomically(path: Path, data) -> None:
    write_atomically(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def read_cell_record(run_dir: Path) -> dict | None:
    try:
        return json.loads((run_dir / CELL_RECORD).read_text())
    except (OSError, ValueError):
        return None


def _has_checkpoint(run_dir: Path) -> bool:
    return (run_dir / "checkpoints" / "LATEST").is_file()


def _clear_partial_run(run_dir: Path) -> None:
    """A run killed before its first checkpoint: remove what the sweep and the trainer wrote, nothing else."""
    if not run_dir.exists():
        return
    foreign = [p.name for p in run_dir.iterdir()
               if p.name not in RESTARTABLE_FILES and p.name != "checkpoints" and not p.name.startswith(".")]
    if foreign:
        raise RuntimeError(f"{run_dir} holds files the sweep did not write ({', '.join(sorted(foreign))}); "
                           f"move them away or pass another --out")
    for name in RESTARTABLE_FILES:
        (run_dir / name).unlink(missing_ok=True)


def _die_with_parent() -> None:
    """In the child: be killed when the sweep dies (even by SIGKILL), so no orphan trains on unwatched."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: an orphan finishes its run, and the lock keeps it alone
        pass


def _child_environment() -> dict:
    """The cells share JAX's persistent compilation cache: a cell's second seed compiles nothing."""
    from ..data.cache import cache_dir
    environment = dict(os.environ)
    environment.setdefault("JAX_COMPILATION_CACHE_DIR", str(cache_dir() / "xla"))
    environment.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    return environment


class _Child:
    """The running `reluattn` subprocess, so that a signal to the sweep reaches it too."""
    process = None


def _run_logged(arguments: list[str], log_path: Path) -> int:
    """Run `python -m reluattn ARGUMENTS`, appending its output to log_path; its exit code."""
    with open(log_path, "a") as log:
        log.write(f"$ reluattn {' '.join(arguments)}\n")
        log.flush()
        _Child.process = subprocess.Popen([sys.executable, "-m", "reluattn", *arguments], stdout=log, env=_child_environment(),
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          preexec_fn=_die_with_parent)
        try:
            return _Child.process.wait()
        finally:
            _Child.process = None


def _forward_signal(signum, frame):
    """Ctrl-C / SIGTERM: let the running cell save a checkpoint and stop, then stop the sweep."""
    if _Child.process is not None:
        _Child.process.send_signal(signum)
    raise KeyboardInterrupt


def run_cell(experiment: str, cell, seed: int, run_dir: Path, data: str | None) -> dict:
    """Train one cell for one seed (resuming a killed run), then its few-shot probe; its cell record."""
    run_dir.mkdir(parents=True, exist_ok=True)
    record = {"experiment": experiment, "cell": cell.name, "labels": cell.labels, "seed": seed,
              "machine": machine_description(), "status": "running"}
    data_flags = ["--data", data] if data else []
    if _has_checkpoint(run_dir):
        arguments = ["train", "--out", str(run_dir), "--resume", "--no-progress", *data_flags]
    else:
        _clear_partial_run(run_dir)
        arguments = ["train", "--out", str(run_dir), *data_flags, *train_arguments(cell, seed)]
    record["command"] = "reluattn " + " ".join(["train", "--out", str(run_dir), *data_flags,
                                                 *train_arguments(cell, seed)])
    write_json_atomically(run_dir / CELL_RECORD, record)
    started = time.time()
    code = _run_logged(arguments, run_dir / TRAIN_LOG)
    if code == 0 and EXPERIMENTS[experiment].fewshot:
        code = _fewshot(run_dir, data)
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


def _fewshot(run_dir: Path, data: str | None) -> int:
    output = run_dir / f".{FEWSHOT}.out"
    arguments = ["evaluate", "--checkpoint", str(run_dir), "--fewshot", str(FEWSHOT_SHOTS), "--json"]
    if data:
        arguments += ["--data", data]
    with open(output, "w") as out, open(run_dir / TRAIN_LOG, "a") as log:
        code = subprocess.call([sys.executable, "-m", "reluattn", *arguments], stdout=out, stderr=log, env=_child_environment(),
                               stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
    if code == 0:
        write_json_atomically(run_dir / FEWSHOT, json.loads(output.read_text()))
    output.unlink(missing_ok=True)
    return code


def _last_error_line(log_path: Path) -> str:
    try:
        lines = [line for line in log_path.read_text().splitlines() if line.strip()]
    except OSError:
        return "no log"
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or ["no output"])[-1][-300:]


def run_dir_of(out: Path, cell_name: str, seed: int) -> Path:
    return Path(out) / cell_name / f"seed{seed}"


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
              cells=None, progress: bool = True, stdout=None) -> dict:
    """Run (or continue) the sweep; then write its report. Returns {"done", "failed", "skipped", "report"}.
    `cells`: glob patterns of the cells to run (default: all)."""
    from .report import write_report
    stdout = stdout or sys.stdout
    out = Path(out)
    cells = select_cells(experiment, scale, cells)
    if seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {seeds}")
    out.mkdir(parents=True, exist_ok=True)
    _check_sweep_folder(out, experiment, scale)
    # Seed-major: a sweep cut short still has the whole grid at its first seeds. A headline cell (relu / L
    # against softmax) runs at least its own number of seeds.
    jobs = [(cell, seed) for seed in range(max([seeds] + [cell.seeds or 0 for cell in cells]))
            for cell in cells if seed < max(seeds, cell.seeds or 0)]
    pending = [(c, s) for c, s in jobs if (read_cell_record(run_dir_of(out, c.name, s)) or {}).get("status") != "done"]
    counts = {"done": 0, "failed": 0, "skipped": len(jobs) - len(pending)}
    print(f"reluattn sweep {experiment} --scale {scale}: {len(jobs)} runs ({len(cells)} cells x {seeds}+ seeds), "
          f"{counts['skipped']} already done, {len(pending)} to run; folder {out}", file=stdout, flush=True)
    bar = _progress_bar(len(jobs), counts["skipped"], progress)
    previous = {s: signal.signal(s, _forward_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    started = time.time()
    try:
        for index, (cell, seed) in enumerate(pending):
            record = run_cell(experiment, cell, seed, run_dir_of(out, cell.name, seed), data)
            counts[record["status"]] += 1
            elapsed = time.time() - started
            left = elapsed / (index + 1) * (len(pending) - index - 1)
            line = (f"[{counts['skipped'] + index + 1}/{len(jobs)}] {cell.name} seed {seed}: {record['status']}"
                    f" in {record['sweep_seconds']:.0f} s; about {_duration(left)} left")
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
    counts["report"] = write_report(experiment, out, scale=scale)
    print(f"reluattn sweep {experiment}: {counts['done']} run, {counts['skipped']} skipped, {counts['failed']} "
          f"failed; report {counts['report']['table']}", file=stdout, flush=True)
    return counts


def _check_sweep_folder(out: Path, experiment: str, scale: str) -> None:
    """One folder holds one experiment at one scale: refuse to mix them (their cells share names)."""
    marker = out / "sweep.json"
    wanted = {"experiment": experiment, "scale": scale}
    if marker.exists():
        saved = json.loads(marker.read_text())
        if {k: saved.get(k) for k in wanted} != wanted:
            raise ValueError(f"{out} holds the sweep {saved.get('experiment')} at scale {saved.get('scale')}; "
                             f"choose another --out for {experiment} at scale {scale}")
    else:
        write_json_atomically(marker, wanted)


def _progress_bar(total: int, initial: int, progress: bool):
    if not (progress and sys.stderr.isatty()):
        return None
    from ..progress import tqdm
    return tqdm(total=total, initial=initial, unit="run", dynamic_ncols=True, file=sys.stderr)


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {seconds:02d} s"
