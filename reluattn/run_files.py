"""What a run directory holds besides checkpoints: `metrics.jsonl`, and the flat form of optimizer states.

    <out>/metrics.jsonl    one JSON object per line:
        {"step", "epoch", "split": "train" | "val" | "test", "loss", "accuracy", "learning_rate",
         "images_per_s", "time"}
    "step" counts the optimizer steps done; "time" is seconds of training since the run began (resumes
    included). Train lines average the steps since the previous line; "learning_rate" is the last one used.

Checkpoints hold the optimizer state as a flat {name: array} dict (an .npz); `flatten_opt_state` and
`restore_opt_state` convert, restoring against a fresh state from the backend's `init_optimizer`, so a
saved state that does not fit the run is refused rather than half-loaded.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

from .checkpoint import CheckpointError
from .params import flatten, unflatten

METRICS = "metrics.jsonl"


# ------------------------------------------------------------------------------------------ metrics.jsonl

def read_metrics(path) -> list[dict]:
    """The records of a metrics.jsonl (a run directory or the file); lines cut off by a crash are skipped."""
    path = Path(path)
    if path.is_dir():
        path = path / METRICS
    records = []
    with open(path) as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and isinstance(record.get("step"), int):
                records.append(record)
    return records


class MetricsLog:
    """Appends records to `<run>/metrics.jsonl`, one flushed line each."""

    def __init__(self, run_dir):
        self.path = Path(run_dir) / METRICS

    def truncate_after(self, step: int) -> None:
        """Keep only records up to `step` (those a resumed run will not write again); atomic rewrite."""
        if not self.path.exists():
            return
        kept = [record for record in read_metrics(self.path) if record["step"] <= step]
        temporary = self.path.with_name(f".{METRICS}.tmp")
        with open(temporary, "w") as handle:
            handle.writelines(json.dumps(record) + "\n" for record in kept)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.path)

    def append(self, record: dict) -> None:
        clean = {key: (None if isinstance(value, float) and not math.isfinite(value) else value)
                 for key, value in record.items()}
        with open(self.path, "a") as handle:
            handle.write(json.dumps(clean) + "\n")
            handle.flush()


# ------------------------------------------------------------------------------------- optimizer states

def flatten_opt_state(opt_state) -> dict:
    """A flat {"a/b/0/c": np.ndarray} view of an optimizer state: the NumPy backend's dict tree, or an
    optax state (tuples/named tuples of dicts), whose paths come from jax.tree_util."""
    if isinstance(opt_state, dict):
        return {key: np.asarray(value) for key, value in flatten(opt_state).items()}
    import jax
    leaves = jax.tree_util.tree_flatten_with_path(opt_state)[0]
    return {_path_name(path): np.asarray(jax.device_get(leaf)) for path, leaf in leaves}


def _path_name(path) -> str:
    import jax
    parts = []
    for entry in path:
        if isinstance(entry, jax.tree_util.DictKey):
            parts.append(str(entry.key))
        elif isinstance(entry, jax.tree_util.SequenceKey):
            parts.append(str(entry.idx))
        elif isinstance(entry, jax.tree_util.GetAttrKey):
            parts.append(entry.name)
        elif isinstance(entry, jax.tree_util.FlattenedIndexKey):
            parts.append(str(entry.key))
        else:
            parts.append(str(entry))
    return "/".join(parts)


def restore_opt_state(saved: dict, template, source="the checkpoint"):
    """`template` (a fresh state from init_optimizer) with its leaves replaced by the arrays in `saved`.

    Every leaf must be present with the template's shape; dtypes are cast to the template's."""
    expected = flatten_opt_state(template)
    missing = sorted(set(expected) - set(saved))
    extra = sorted(set(saved) - set(expected))
    wrong = [f"{key} has shape {saved[key].shape}, expected {expected[key].shape}"
             for key in expected if key in saved and saved[key].shape != expected[key].shape]
    if missing or extra or wrong:
        detail = "; ".join(([f"missing {', '.join(missing[:3])}"] if missing else [])
                           + ([f"unexpected {', '.join(extra[:3])}"] if extra else []) + wrong[:3])
        raise CheckpointError(f"the optimizer state in {source} does not fit this run's model and optimizer "
                              f"({detail}); it was written by another configuration or backend")
    arrays = {key: np.asarray(saved[key]).astype(expected[key].dtype, copy=False) for key in expected}
    if isinstance(template, dict):
        return unflatten(arrays)
    import jax
    leaves_with_paths, treedef = jax.tree_util.tree_flatten_with_path(template)
    return jax.tree_util.tree_unflatten(treedef, [arrays[_path_name(path)] for path, _ in leaves_with_paths])
