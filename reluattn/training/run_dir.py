"""A run directory's checkpoints and metrics.jsonl, and what resuming reads back. No pickle anywhere.
The folder's layout, and every name in it, is in run_folder.py.

    <run>/metrics.jsonl    one JSON object per line:
        {"step", "epoch", "split": "train" | "val" | "test", "loss", "accuracy", "learning_rate",
         "images_per_s", "time"}

Every checkpoint write goes to a new temporary directory (mkdtemp) that is renamed into place only when
complete, and LATEST is replaced atomically after that (files.py), so a crash at any instant leaves the
previous checkpoint intact; the next run removes what the crash left (run_folder.clean_leftovers). A
checkpoint with a NaN or infinity in it is never written, and one found on resume is refused.
Deleting an old checkpoint deletes only the four files reluattn wrote, then the folder if it is empty.
The optimizer state is saved flat ({name: array}, `flatten_opt_state`) and restored against a fresh state
from the backend's `init_optimizer` (`restore_opt_state`), so a saved state that does not fit the run is
refused rather than half-loaded. In metrics.jsonl "step" counts the optimizer steps done and "time" is
seconds of training since the run began (resumes included); train lines average the steps since the
previous line, and "learning_rate" is the last one used.

What resuming checks before it uses a checkpoint is in resume.py.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import zipfile
from pathlib import Path

import numpy as np

from ..params import flatten, unflatten
from .files import append_line, finite_or_none, fsync_dir, make_temporary_dir, write_atomically
from .npz_files import DoesNotFit, Vanished, expected_param_shapes, opt_state_fits, params_fit, read_npz
from .run_folder import (CHECKPOINT_FILES as FILES, CHECKPOINTS, CONFIG, LATEST, METRICS, OPT_STATE, PARAMS, STATE,
                         SUMMARY, remove_our_files)


# ------------------------------------------------------------------------------------------- checkpoints

class CheckpointError(ValueError):
    """A checkpoint could not be written or read; the message says what to do."""


def _write_npz(path: Path, arrays: dict) -> None:
    with open(path, "wb") as handle:
        np.savez(handle, **{key: np.asarray(value) for key, value in arrays.items()})
        handle.flush()
        os.fsync(handle.fileno())


def _write_text(path: Path, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def non_finite_arrays(arrays: dict) -> list[str]:
    """The names of the arrays in a flat {name: array} dict that hold a NaN or an infinity."""
    return [name for name, array in arrays.items()
            if np.issubdtype(np.asarray(array).dtype, np.inexact) and not np.all(np.isfinite(array))]


def save_checkpoint(run_dir, step: int, config: dict, params, opt_state: dict, state: dict,
                    keep: int = 3) -> Path:
    """Write checkpoint `step` under `run_dir` atomically and point LATEST at it; keep the newest `keep`.

    `params` is a parameter tree; `opt_state` a flat {name: array} dict; `config` and `state` JSON-able.
    On failure (a full disk, say) nothing already saved is touched and a CheckpointError says why.
    """
    root = Path(run_dir) / CHECKPOINTS
    name = f"step_{step:08d}"
    final = root / name
    flat_params = flatten(params)
    bad = non_finite_arrays(flat_params) + non_finite_arrays(opt_state)
    if bad:  # never let a NaN checkpoint become "the last good one"
        raise CheckpointError(f"refusing to save checkpoint {final}: {', '.join(bad[:3])} hold non-finite values")
    temporary = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        temporary = make_temporary_dir(root, f"tmp-{name}")
        config_text = json.dumps(config, indent=2, sort_keys=True)
        _write_text(temporary / CONFIG, config_text)
        _write_npz(temporary / PARAMS, flat_params)
        _write_npz(temporary / OPT_STATE, opt_state)
        state = dict(state, step=step, config_sha256=config_digest(config_text))  # binds config.json to the arrays
        _write_text(temporary / STATE, json.dumps(state, indent=2, sort_keys=True))
        fsync_dir(temporary)
        # Re-saving the same step (e.g. after a resume): swap the old one out first, deleting only our files.
        if (final.exists() or final.is_symlink()) and not remove_our_files(final):
            raise CheckpointError(f"{final} holds files reluattn did not write "
                                  f"({', '.join(sorted(p.name for p in final.iterdir())[:3])}); move them away")
        os.rename(temporary, final)
        fsync_dir(root)
        write_atomically(root / LATEST, name)
    except OSError as error:
        if temporary is not None:
            remove_our_files(temporary)
        reason = "the disk is full" if error.errno == errno.ENOSPC else (error.strerror or str(error))
        raise CheckpointError(f"could not write checkpoint {final}: {reason}; free space or choose another "
                              f"--out (earlier checkpoints are intact)") from None
    if keep:
        _prune(root, {path.name for path in list_checkpoints(run_dir)[-keep:]}, name)
    return final


def _prune(root: Path, kept: set, newest: str) -> None:
    """Delete the checkpoints older than `newest` that are not `kept`, complete or not (a kill during an
    earlier pruning leaves a checkpoint with some of its files gone)."""
    for path in root.glob("step_*"):
        if path.name not in kept and path.name < newest:
            remove_our_files(path)


def list_checkpoints(run_dir) -> list[Path]:
    """Complete checkpoint directories of a run, oldest first."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = [path for path in root.glob("step_*") if path.is_dir() and all((path / f).is_file() for f in FILES)]
    return sorted(found, key=lambda path: path.name)


def resolve_checkpoint(path) -> Path:
    """A checkpoint directory itself, or a run directory meaning its latest checkpoint."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"no checkpoint at {path}: pass a run directory (the --out of train) or one of "
                              f"its checkpoints/step_* directories")
    if (path / PARAMS).is_file():
        return path
    root = path / CHECKPOINTS
    latest = root / LATEST
    if latest.is_file():
        name = latest.read_text(errors="replace").strip()
        if not re.fullmatch(r"step_\d+", name):  # a path elsewhere would score another run's checkpoint
            raise CheckpointError(f"{latest} names {name[:60]!r}, not one of this run's step_* folders; write the "
                                  f"name of one of {root}'s step_* folders into it, or delete it to use the newest")
        candidate = root / name
        if candidate.is_dir() and all((candidate / f).is_file() for f in FILES):
            return candidate
    found = list_checkpoints(path)
    if not found:
        raise CheckpointError(f"{path} holds no checkpoint: pass a run directory (the --out of train) or one of "
                              f"its checkpoints/step_* directories")
    return found[-1]


def _read_npz(path: Path, check=None) -> dict:
    try:
        return read_npz(path, check)
    except Vanished:
        raise
    except DoesNotFit as error:
        raise CheckpointError(f"the arrays in {path} do not fit its config.json ({error}); the checkpoint is "
                              f"corrupted — resume from an earlier checkpoint or start a new run") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as error:
        raise CheckpointError(f"{path} is corrupted or not a checkpoint array file ({error}); "
                              f"resume from an earlier checkpoint or start a new run") from None


def _read_json(path: Path) -> dict:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise Vanished(f"{path} is gone") from None
    except (OSError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path} cannot be read ({error}); the checkpoint is corrupted") from None
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as error:
        reason = "nested too deeply" if isinstance(error, RecursionError) else str(error)
        raise CheckpointError(f"{path} does not parse as JSON ({reason}); the checkpoint is corrupted") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} should hold a JSON object; the checkpoint is corrupted")
    return data


def config_digest(text: str) -> str:
    """What state.json records of config.json, binding the two (and so the parameters) together."""
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _load_directory(directory: Path) -> dict:
    config_path = directory / CONFIG
    config = _read_json(config_path)
    state = _read_json(directory / STATE)
    recorded = state.get("config_sha256")
    if recorded is not None and recorded != config_digest(config_path.read_text()):
        raise CheckpointError(f"{config_path} was changed after the checkpoint was written (its SHA-256 is not the "
                              f"one state.json records), so it no longer describes params.npz; restore the original "
                              f"config.json, or use another checkpoint")
    try:
        expected = expected_param_shapes(config)
    except ValueError as error:
        raise CheckpointError(f"{config_path}'s model is not a valid ViTConfig ({error}); the checkpoint is "
                              f"corrupted or from another version") from None
    params = _read_npz(directory / PARAMS, params_fit(expected))
    opt_state = _read_npz(directory / OPT_STATE, opt_state_fits(expected))
    return {"path": directory, "config": config, "params": unflatten(params), "opt_state": opt_state,
            "state": state}


def load_checkpoint(path, attempts: int = 5) -> dict:
    """{"path", "config", "params" (tree), "opt_state" (flat dict), "state"} of a checkpoint or run directory.

    The arrays are checked against config.json's model before they are unpacked (npz_files.py), and
    config.json against the digest state.json records. A run directory's latest checkpoint pruned by a
    running train while it is read is not corruption: the newest one is read again."""
    path = Path(path)
    for attempt in range(attempts):
        directory = resolve_checkpoint(path)
        try:
            return _load_directory(directory)
        except Vanished as error:
            if directory == path or attempt == attempts - 1:  # a checkpoint named itself: nothing newer to read
                raise CheckpointError(f"{error} (deleted while it was read: pruned by a running reluattn train?); "
                                      f"pass the run folder to read its newest checkpoint") from None
    raise AssertionError("unreachable")


# ------------------------------------------------------------------------------------------ metrics.jsonl

def read_metrics(path) -> list[dict]:
    """The records of a metrics.jsonl (a run directory or the file); lines cut off by a crash (or that are
    not JSON text at all) are skipped."""
    path = Path(path)
    if path.is_dir():
        path = path / METRICS
    records = []
    with open(path, "rb") as handle:
        for line in handle:
            try:
                record = json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):  # damaged, not a record
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
        write_atomically(self.path, "".join(json.dumps(record) + "\n" for record in kept))

    def append(self, record: dict) -> None:
        append_line(self.path, json.dumps(finite_or_none(record), allow_nan=False))


def write_summary(run_dir, summary: dict) -> Path:
    """Write `<run>/summary.json` atomically (a temporary file in the run directory, then a rename)."""
    return write_atomically(Path(run_dir) / SUMMARY, json.dumps(finite_or_none(summary), indent=2, sort_keys=True,
                                                                   allow_nan=False) + "\n")


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
