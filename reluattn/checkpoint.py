"""Checkpoints: a directory with the config as JSON and arrays as .npz — no pickle anywhere.

    <run>/checkpoints/step_00000100/
        config.json       the run's configuration (model, optimizer, training, data)
        params.npz        the parameter tree, flattened to "blocks/0/attn/qkv/w"-style keys
        opt_state.npz     the optimizer state, flattened the same way (its layout is the backend's)
        state.json        step, epoch, seeds: what a resumed run needs to continue exactly
    <run>/checkpoints/LATEST   the name of the newest complete checkpoint

Every write goes to a temporary directory that is renamed into place only when complete, and LATEST is
replaced atomically after that, so a crash at any instant leaves the previous checkpoint intact. Pure
NumPy and the standard library.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import zipfile
from pathlib import Path

import numpy as np

from .params import flatten, unflatten

CHECKPOINTS = "checkpoints"
LATEST = "LATEST"
FILES = ("config.json", "params.npz", "opt_state.npz", "state.json")


class CheckpointError(ValueError):
    """A checkpoint could not be written or read; the message says what to do."""


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


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


def save_checkpoint(run_dir, step: int, config: dict, params, opt_state: dict, state: dict,
                    keep: int = 3) -> Path:
    """Write checkpoint `step` under `run_dir` atomically and point LATEST at it; keep the newest `keep`.

    `params` is a parameter tree; `opt_state` a flat {name: array} dict; `config` and `state` JSON-able.
    On failure (a full disk, say) nothing already saved is touched and a CheckpointError says why.
    """
    root = Path(run_dir) / CHECKPOINTS
    name = f"step_{step:08d}"
    final = root / name
    temporary = root / f".tmp-{name}-{os.getpid()}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(temporary, ignore_errors=True)
        temporary.mkdir()
        _write_text(temporary / "config.json", json.dumps(config, indent=2, sort_keys=True))
        _write_npz(temporary / "params.npz", flatten(params))
        _write_npz(temporary / "opt_state.npz", opt_state)
        _write_text(temporary / "state.json", json.dumps(dict(state, step=step), indent=2, sort_keys=True))
        _fsync_dir(temporary)
        if final.exists():  # re-saving the same step (e.g. after a resume): swap the old one out first
            shutil.rmtree(final)
        os.rename(temporary, final)
        _fsync_dir(root)
        _write_text(root / f".{LATEST}.tmp", name)
        os.replace(root / f".{LATEST}.tmp", root / LATEST)
        _fsync_dir(root)
    except OSError as error:
        shutil.rmtree(temporary, ignore_errors=True)
        reason = "the disk is full" if error.errno == errno.ENOSPC else (error.strerror or str(error))
        raise CheckpointError(f"could not write checkpoint {final}: {reason}; free space or choose another "
                              f"--out (earlier checkpoints are intact)") from None
    for old in list_checkpoints(run_dir)[:-keep] if keep else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


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
    if (path / "params.npz").is_file():
        return path
    root = path / CHECKPOINTS
    latest = root / LATEST
    if latest.is_file():
        candidate = root / latest.read_text().strip()
        if candidate.is_dir() and all((candidate / f).is_file() for f in FILES):
            return candidate
    found = list_checkpoints(path)
    if not found:
        raise CheckpointError(f"{path} holds no checkpoint: pass a run directory (the --out of train) or one of "
                              f"its checkpoints/step_* directories")
    return found[-1]


def _read_npz(path: Path) -> dict:
    try:
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as error:
        raise CheckpointError(f"{path} is corrupted or not a checkpoint array file ({error}); "
                              f"resume from an earlier checkpoint or start a new run") from None


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path} does not parse as JSON ({error}); the checkpoint is corrupted") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} should hold a JSON object; the checkpoint is corrupted")
    return data


def load_checkpoint(path) -> dict:
    """{"path", "config", "params" (tree), "opt_state" (flat dict), "state"} of a checkpoint or run directory."""
    directory = resolve_checkpoint(path)
    return {
        "path": directory,
        "config": _read_json(directory / "config.json"),
        "params": unflatten(_read_npz(directory / "params.npz")),
        "opt_state": _read_npz(directory / "opt_state.npz"),
        "state": _read_json(directory / "state.json"),
    }
