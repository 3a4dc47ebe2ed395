"""A sweep's report, rebuilt from its run directories alone: results.csv / results.json, verdicts.md (the
verdicts as Markdown tables, tables.py) and one figure.

    reluattn sweep EXPERIMENT --report --out DIR      (also written at the end of every sweep)

One row per run (cell x seed): the cell's grid coordinates, seed, best and final validation accuracy,
few-shot accuracy (when measured), training FLOPs, wall time, machine, attention statistics and learned
alphas (when the run logged them), and the run's full config (JSON only). Figures show the mean over
seeds with error bars of one standard deviation; softmax is drawn as a reference line with its band.
Means, spreads and the tests behind the verdicts are in statistics.py; the comparisons each verdict
rests on (cells b minus cells a) are in verdicts.py and land in results.json under "comparisons", the
verdict on each claim under "claims".

A damaged run file (cell.json, summary.json, fewshot.json, config.json, a metrics.jsonl line) leaves that run
or value out with a one-line SweepWarning naming the file; NaN and infinities are written as null (strict
JSON). A finished run that is not the grid's current cell (another train command) is marked "stale" and left
out of the verdicts.
"""

from __future__ import annotations

import csv
import io
import json
import math
import warnings
from pathlib import Path

import numpy as np

from ..data.errors import DataWarning
from ..training.files import finite_or_none, write_atomically
from .experiments import EXPERIMENTS, cells_of
from .statistics import LABEL_COLUMNS, aggregate
from .tables import verdicts_markdown
from .sweep_folder import is_stale
from .verdicts import judge, planned_seeds

VALUE_COLUMNS = ("best_val_accuracy", "final_val_accuracy", "test_accuracy", "fewshot_accuracy", "train_flops", "wall_time_s",
                 "attention_entropy_ratio", "attention_zero_fraction", "attention_top_share",
                 "attention_row_sum_mean", "learned_alpha_mean", "learned_alpha_min", "learned_alpha_max")
COLUMNS = ("experiment", "cell", "seed", "status", *LABEL_COLUMNS, *VALUE_COLUMNS, "machine")
RUN_SPECIFIC_COLUMNS = ("wall_time_s", "machine")  # what may differ between two sweeps that computed the same
# A row's own keys, which a cell's labels may not replace.
RESERVED_KEYS = {*COLUMNS, "command", "config", "error"} - set(LABEL_COLUMNS)


class SweepWarning(DataWarning):
    """A run's log the report could not read, or read in part; the message is one line naming the file."""


def _warn(message: str) -> None:
    warnings.warn(message, SweepWarning, stacklevel=3)


def _read_json(path: Path):
    """The JSON object in `path`; None when there is none, and a warning when the file is there but is not
    one (the run is left out or read in part; a damaged file never stops the whole report)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as error:
        _warn(f"{path}: cannot be read ({error.strerror or error}); the report leaves it out")
        return None
    try:
        value = json.loads(text)
    except ValueError:
        _warn(f"{path}: not valid JSON; the report leaves it out")
        return None
    if not isinstance(value, dict):
        _warn(f"{path}: holds no JSON object; the report leaves it out")
        return None
    return value


def _number(record: dict, key: str, path: Path) -> float | None:
    """record[key] as a finite float; None (with a warning naming the file) for anything else."""
    value = record.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        _warn(f"{path}: {key} is {value!r}, not a finite number; the report writes null")
        return None
    return float(value)


def _finite_numbers(values, path: Path, key: str) -> list[float]:
    """The finite numbers of a list (None: a block of all-zero rows, skipped); a warning for anything else."""
    if not isinstance(values, list):
        values = [values]
    numbers = [float(v) for v in values
               if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
    if len(numbers) < sum(v is not None for v in values):
        _warn(f"{path}: attention {key} holds values that are not finite numbers; the report skips them")
    return numbers


def _latest_checkpoint(run_dir: Path) -> Path | None:
    try:
        return run_dir / "checkpoints" / (run_dir / "checkpoints" / "LATEST").read_text().strip()
    except (OSError, ValueError):
        return None


def _last_validation_attention(run_dir: Path) -> dict:
    """The "attention" entry of the last validation record of metrics.jsonl that has one ({} if none)."""
    try:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    except (OSError, ValueError):
        return {}
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("split") == "val" and isinstance(record.get("attention"), dict):
            return record["attention"]
    return {}


def _last_attention_statistics(run_dir: Path, attention: dict) -> dict:
    """The attention statistics of the last validation that logged them (means over blocks)."""
    statistics = {}
    for key in ("entropy_ratio", "zero_fraction", "top_share", "row_sum_mean"):
        values = _finite_numbers(attention.get(key) or [], run_dir / "metrics.jsonl", key)
        if values:
            statistics[f"attention_{key}"] = float(np.mean(values))
    return statistics


def _learned_alphas(run_dir: Path, attention: dict, checkpoint: Path | None) -> dict:
    """Mean, min and max of every learned alpha at the end of the run: from the last validation record of
    metrics.jsonl (what docs/run-logs/ keeps), else from the final checkpoint's blocks/*/attn/length/alpha."""
    logged, alphas = attention.get("alpha"), None
    if logged:
        try:
            alphas = [np.asarray(block, dtype=float).ravel() for block in logged]
        except (TypeError, ValueError):
            _warn(f"{run_dir / 'metrics.jsonl'}: attention alpha is not lists of numbers; the report skips it")
    if alphas is None and checkpoint is not None and (checkpoint / "params.npz").is_file():
        try:
            with np.load(checkpoint / "params.npz", allow_pickle=False) as arrays:
                alphas = [arrays[key].ravel() for key in arrays.files if key.endswith("length/alpha")] or None
        except (OSError, ValueError) as error:
            _warn(f"{checkpoint / 'params.npz'}: cannot be read ({error}); the report skips its alphas")
    if not alphas:
        return {}
    values = np.concatenate(alphas)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return {}
    return {"learned_alpha_mean": float(values.mean()), "learned_alpha_min": float(values.min()),
            "learned_alpha_max": float(values.max())}


def _train_flops(summary: dict, config: dict | None, run_dir: Path) -> float | None:
    flops = _number(summary, "train_flops", run_dir / "summary.json")
    if flops is not None or not config:
        return flops
    from ..config import ViTConfig
    try:
        model = ViTConfig.from_dict(config["model"])
        return model.train_flops(config["batch_size"], config["optimizer"]["total_steps"])
    except (KeyError, TypeError, ValueError):
        _warn(f"{run_dir / 'config.json'}: not a run's config; the report leaves its train_flops empty")
        return None


def _cell_record(path: Path) -> dict | None:
    """A sweep's cell.json, or None (with a warning) when it is not one."""
    record = _read_json(path)
    if record is None:
        return None
    if not (isinstance(record.get("cell"), str) and isinstance(record.get("seed"), int)
            and not isinstance(record.get("seed"), bool) and isinstance(record.get("labels", {}), dict)):
        _warn(f"{path}: not a sweep's cell record (it needs \"cell\", a whole-number \"seed\" and \"labels\"); "
              f"the report leaves the run out")
        return None
    return record


def _row(experiment: str, record: dict, run_dir: Path) -> dict:
    summary = _read_json(run_dir / "summary.json") or {}
    checkpoint = _latest_checkpoint(run_dir)
    # A finished cell keeps a copy of its config beside the logs (what docs/run-logs/ commits).
    config = _read_json(run_dir / "config.json") or (_read_json(checkpoint / "config.json") if checkpoint else None)
    fewshot = _read_json(run_dir / "fewshot.json") or {}
    attention = _last_validation_attention(run_dir)
    summary_path = run_dir / "summary.json"
    labels = {k: v for k, v in record.get("labels", {}).items() if k not in RESERVED_KEYS}
    row = {"experiment": experiment, "cell": record["cell"], "seed": record["seed"],
           "status": record.get("status") if isinstance(record.get("status"), str) else None, **labels,
           "best_val_accuracy": _number(summary, "best_val_accuracy", summary_path),
           "test_accuracy": _number(summary, "test_accuracy", summary_path),
           "final_val_accuracy": _number(summary, "final_val_accuracy", summary_path),
           "fewshot_accuracy": _number(fewshot, "fewshot_accuracy", run_dir / "fewshot.json"),
           "train_flops": _train_flops(summary, config, run_dir),
           "wall_time_s": _number(summary, "wall_time_s", summary_path),
           "machine": _machine(record, summary),
           **_last_attention_statistics(run_dir, attention), **_learned_alphas(run_dir, attention, checkpoint),
           "command": record.get("command"), "config": config}
    if record.get("status") == "failed":
        row["error"] = record.get("error")
    return row


def _machine(record: dict, summary: dict) -> str | None:
    """"AMD EPYC (family 25, model 1), 2 cores; 1 cpu device": the host the sweep ran the run on (its cell
    record) and the devices the run trained on (its summary), so that a GPU run names its host and a CPU run
    its CPU model; either part alone when the other is missing."""
    parts = [part for part in (record.get("machine"), summary.get("device")) if isinstance(part, str) and part]
    return "; ".join(parts) or None


def collect_rows(experiment: str, out, scale: str | None = None) -> list[dict]:
    """One row per run directory of the sweep in `out` that has a cell record. With `scale`, a finished run
    that is not the grid's current cell (another command, or a cell the grid no longer has) is marked
    "stale", so that no verdict rests on it."""
    out = Path(out)
    grid = {cell.name: cell for cell in cells_of(experiment, scale)} if scale else None
    rows, stale = [], []
    for record_path in sorted(out.glob("*/seed*/cell.json")):
        record = _cell_record(record_path)
        if record is None or record.get("experiment") != experiment:
            continue
        row = _row(experiment, record, record_path.parent)
        if grid is not None and row["status"] == "done" and (
                record["cell"] not in grid or is_stale(record, grid[record["cell"]], record["seed"])):
            row["status"] = "stale"
            stale.append(f"{record['cell']}/seed{record['seed']}")
        rows.append(row)
    if stale:
        _warn(f"{out}: {len(stale)} runs are not the {experiment} grid's at scale {scale} ("
              f"{', '.join(stale[:5])}{' ...' if len(stale) > 5 else ''}: another train command); the report "
              f"marks them \"stale\" and leaves them out of the verdicts")
    return rows


def write_report(experiment: str, out, *, scale: str) -> dict:
    """Write results.csv, results.json and <experiment>.png into `out`; their paths and the verdicts."""
    from .figures import FIGURES
    out = Path(out)
    rows = collect_rows(experiment, out, scale)
    expected = len(cells_of(experiment, scale))
    table = out / "results.csv"
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=COLUMNS, extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in COLUMNS})
    write_atomically(table, text.getvalue())
    verdicts = judge(experiment, rows, scale)
    if EXPERIMENTS[experiment].chooses_rates:  # what other grids use (LEARNING_RATES, SCALING_TUNED_RATES, ...)
        from .rate_choice import chosen_learning_rates, rates_waiting
        cells = aggregate(rows, "best_val_accuracy")
        waiting = rates_waiting(cells, cells_of(experiment, scale), planned_seeds(experiment, scale))
        verdicts["chosen_learning_rates"] = chosen_learning_rates(cells, waiting)
        verdicts["learning_rates_waiting"] = waiting
    summary = {"experiment": experiment, "summary": EXPERIMENTS[experiment].summary,
               "exploration": EXPERIMENTS[experiment].exploration, "scale": scale, "cells_expected": expected,
               "runs": len(rows), "runs_done": sum(r["status"] == "done" for r in rows),
               "runs_failed": [r["cell"] + f"/seed{r['seed']}" for r in rows if r["status"] == "failed"],
               "runs_stale": [r["cell"] + f"/seed{r['seed']}" for r in rows if r["status"] == "stale"],
               "cells": aggregate(rows, verdicts["value"]), **verdicts, "rows": rows}
    summary = finite_or_none(json.loads(json.dumps(summary, default=str)))
    write_atomically(out / "results.json", json.dumps(summary, indent=1, sort_keys=True, allow_nan=False) + "\n")
    write_atomically(out / "verdicts.md", verdicts_markdown(summary) + "\n")
    figure = FIGURES[EXPERIMENTS[experiment].figure](rows, out / f"{experiment}.png", experiment, verdicts["value"])
    return {"table": str(table), "json": str(out / "results.json"), "figure": str(figure) if figure else None,
            **verdicts}
