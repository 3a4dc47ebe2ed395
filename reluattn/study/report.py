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
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np

from ..training.files import write_atomically
from .experiments import EXPERIMENTS, cells_of
from .statistics import LABEL_COLUMNS, aggregate
from .tables import verdicts_markdown
from .verdicts import judge

VALUE_COLUMNS = ("best_val_accuracy", "final_val_accuracy", "test_accuracy", "fewshot_accuracy", "train_flops", "wall_time_s",
                 "attention_entropy_ratio", "attention_zero_fraction", "attention_top_share",
                 "attention_row_sum_mean", "learned_alpha_mean", "learned_alpha_min", "learned_alpha_max")
COLUMNS = ("experiment", "cell", "seed", "status", *LABEL_COLUMNS, *VALUE_COLUMNS, "machine")
RUN_SPECIFIC_COLUMNS = ("wall_time_s", "machine")  # what may differ between two sweeps that computed the same


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _latest_checkpoint(run_dir: Path) -> Path | None:
    try:
        return run_dir / "checkpoints" / (run_dir / "checkpoints" / "LATEST").read_text().strip()
    except OSError:
        return None


def _last_validation_attention(run_dir: Path) -> dict:
    """The "attention" entry of the last validation record of metrics.jsonl that has one ({} if none)."""
    try:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return {}
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("split") == "val" and isinstance(record.get("attention"), dict):
            return record["attention"]
    return {}


def _last_attention_statistics(run_dir: Path) -> dict:
    """The attention statistics of the last validation that logged them (means over blocks)."""
    stats, statistics = _last_validation_attention(run_dir), {}
    for key in ("entropy_ratio", "zero_fraction", "top_share", "row_sum_mean"):
        values = [v for v in stats.get(key) or [] if v is not None]  # None: a block of all-zero rows
        if values:
            statistics[f"attention_{key}"] = float(np.mean(values))
    return statistics


def _learned_alphas(run_dir: Path, checkpoint: Path | None) -> dict:
    """Mean, min and max of every learned alpha at the end of the run: from the last validation record of
    metrics.jsonl (what docs/run-logs/ keeps), else from the final checkpoint's blocks/*/attn/length/alpha."""
    logged = _last_validation_attention(run_dir).get("alpha")
    alphas = [np.asarray(block, dtype=float) for block in logged] if logged else None
    if alphas is None and checkpoint is not None and (checkpoint / "params.npz").is_file():
        with np.load(checkpoint / "params.npz", allow_pickle=False) as arrays:
            alphas = [arrays[key].ravel() for key in arrays.files if key.endswith("length/alpha")] or None
    if alphas is None:
        return {}
    values = np.concatenate([np.ravel(a) for a in alphas])
    return {"learned_alpha_mean": float(values.mean()), "learned_alpha_min": float(values.min()),
            "learned_alpha_max": float(values.max())}


def _train_flops(summary: dict, config: dict | None) -> float | None:
    if summary.get("train_flops") is not None:
        return float(summary["train_flops"])
    if not config:
        return None
    from ..config import ViTConfig
    model = ViTConfig.from_dict(config["model"])
    return model.flops_per_image() * config["batch_size"] * config["optimizer"]["total_steps"]


def collect_rows(experiment: str, out) -> list[dict]:
    """One row per run directory of the sweep in `out` that has a cell record."""
    out = Path(out)
    rows = []
    for record_path in sorted(out.glob("*/seed*/cell.json")):
        record = _read_json(record_path)
        if not record or record.get("experiment") != experiment:
            continue
        run_dir = record_path.parent
        summary = _read_json(run_dir / "summary.json") or {}
        checkpoint = _latest_checkpoint(run_dir)
        # A finished cell keeps a copy of its config beside the logs (what docs/run-logs/ commits).
        config = _read_json(run_dir / "config.json") or (_read_json(checkpoint / "config.json") if checkpoint else None)
        fewshot = _read_json(run_dir / "fewshot.json") or {}
        row = {"experiment": experiment, "cell": record["cell"], "seed": record["seed"],
               "status": record.get("status"), **record.get("labels", {}),
               "best_val_accuracy": summary.get("best_val_accuracy"),
               "test_accuracy": summary.get("test_accuracy"),
               "final_val_accuracy": summary.get("final_val_accuracy"),
               "fewshot_accuracy": fewshot.get("fewshot_accuracy"),
               "train_flops": _train_flops(summary, config), "wall_time_s": summary.get("wall_time_s"),
               "machine": summary.get("device") or record.get("machine"),
               **_last_attention_statistics(run_dir), **_learned_alphas(run_dir, checkpoint),
               "command": record.get("command"), "config": config}
        if record.get("status") == "failed":
            row["error"] = record.get("error")
        rows.append(row)
    return rows


def write_report(experiment: str, out, *, scale: str) -> dict:
    """Write results.csv, results.json and <experiment>.png into `out`; their paths and the verdicts."""
    from .figures import FIGURES
    out = Path(out)
    rows = collect_rows(experiment, out)
    expected = len(cells_of(experiment, scale))
    table = out / "results.csv"
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=COLUMNS, extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in COLUMNS})
    write_atomically(table, text.getvalue())
    verdicts = judge(experiment, rows, scale)
    if experiment == "lr-grid":  # what the other grids of the scale will use (LEARNING_RATES)
        from .grids import chosen_learning_rates
        verdicts["chosen_learning_rates"] = chosen_learning_rates(aggregate(rows, "best_val_accuracy"))
    summary = {"experiment": experiment, "summary": EXPERIMENTS[experiment].summary,
               "exploration": EXPERIMENTS[experiment].exploration, "scale": scale, "cells_expected": expected,
               "runs": len(rows), "runs_done": sum(r["status"] == "done" for r in rows),
               "runs_failed": [r["cell"] + f"/seed{r['seed']}" for r in rows if r["status"] == "failed"],
               "cells": aggregate(rows, verdicts["value"]), **verdicts, "rows": rows}
    write_atomically(out / "results.json", json.dumps(summary, indent=1, sort_keys=True, default=str) + "\n")
    write_atomically(out / "verdicts.md", verdicts_markdown(summary) + "\n")
    figure = FIGURES[EXPERIMENTS[experiment].figure](rows, out / f"{experiment}.png", experiment, verdicts["value"])
    return {"table": str(table), "json": str(out / "results.json"), "figure": str(figure) if figure else None,
            **verdicts}
