"""Sweep folders made by hand for the tests: a folder's sweep.json, and a finished run of the current grid."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from reluattn.study.experiments import train_arguments


def _sweep_folder(out: Path, experiment: str = "kv-memory", scale: str = "smoke") -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps({"experiment": experiment, "scale": scale}))
    return out


def _done_cell(out: Path, cell, seed: int = 0, command: str | None = None) -> Path:
    run_dir = out / cell.name / f"seed{seed}"
    run_dir.mkdir(parents=True)
    command = command or shlex.join(["reluattn", "train", "--out", str(run_dir), *train_arguments(cell, seed)])
    record = {"experiment": "kv-memory", "cell": cell.name, "labels": cell.labels, "seed": seed,
              "status": "done", "command": command}
    (run_dir / "cell.json").write_text(json.dumps(record))
    (run_dir / "summary.json").write_text(json.dumps({"best_val_accuracy": 0.5}))
    return run_dir
