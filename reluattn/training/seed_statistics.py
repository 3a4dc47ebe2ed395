"""Statistics over the seeds of a sweep: each cell's mean and spread, and the test behind the verdicts.

`compare` is the test docs/reproduction.md uses: a difference counts when it exceeds twice its standard
error (Welch: sqrt(s1^2/n1 + s2^2/n2), s the seed-to-seed standard deviation); with one seed, never.
"""

from __future__ import annotations

import math

import numpy as np

# The grid coordinates a cell can have (experiments.py's labels), in the results table's column order.
LABEL_COLUMNS = ("tokens", "kind", "alpha", "method", "dim", "depth", "qk_norm", "gated", "activation",
                 "mlp_dim", "alpha_start")


def aggregate(rows: list[dict], value: str = "best_val_accuracy") -> dict:
    """{cell: {"mean", "std", "n", "labels"}} over the seeds of each cell (finished runs only)."""
    groups = {}
    for row in rows:
        if row.get("status") == "done" and row.get(value) is not None:
            groups.setdefault(row["cell"], {"values": [], "labels": {k: row.get(k) for k in LABEL_COLUMNS}})
            groups[row["cell"]]["values"].append(float(row[value]))
    return {cell: {"mean": float(np.mean(g["values"])),
                   "std": float(np.std(g["values"], ddof=1)) if len(g["values"]) > 1 else 0.0,
                   "n": len(g["values"]), "labels": g["labels"]} for cell, g in groups.items()}


def compare(a: dict, b: dict) -> dict:
    """a - b with its Welch standard error; "resolved" when |difference| > 2 standard errors."""
    difference = a["mean"] - b["mean"]
    error = math.sqrt(a["std"] ** 2 / max(a["n"], 1) + b["std"] ** 2 / max(b["n"], 1))
    return {"difference": difference, "standard_error": error,
            "resolved": bool(abs(difference) > 2 * error and min(a["n"], b["n"]) > 1)}
