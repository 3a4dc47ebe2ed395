"""Stopping and resuming a run: reading the saved config, refusing a resume that would change what the
run computes, and turning SIGINT / SIGTERM into a request the loop honours after the current step."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path

from .checkpoint import CheckpointError, list_checkpoints, resolve_checkpoint
from .presets import TrainConfig, config_differences, train_config_from_dict


def saved_train_config(run_dir) -> TrainConfig:
    """The TrainConfig stored in a run's latest checkpoint (for --resume)."""
    run_dir = Path(run_dir)
    if not list_checkpoints(run_dir):
        raise CheckpointError(f"{run_dir} holds no checkpoint to resume; run without --resume to start it "
                              f"afresh, or check --out")
    path = resolve_checkpoint(run_dir) / "config.json"
    try:
        data = json.loads(path.read_text())
        return train_config_from_dict(data)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path} does not parse ({error}); the checkpoint is corrupted — resume from an "
                              f"earlier one or start a new run") from None
    except ValueError as error:
        raise CheckpointError(f"{path} is not a valid training config ({error}); the checkpoint is corrupted "
                              f"or from another version") from None


def check_resume(saved_config: dict, resolved: TrainConfig, description: dict, run_dir) -> None:
    differences = config_differences({k: v for k, v in saved_config.items() if k != "data"}, resolved.to_dict())
    saved_data = saved_config.get("data", {})
    for name in ("class_names", "image_size", "channels", "num_train", "num_validation", "validation_split"):
        if name in saved_data and saved_data[name] != description[name]:
            differences.append(f"data.{name}: saved {_short(saved_data[name])}, now {_short(description[name])}")
    if differences:
        shown = "; ".join(differences[:5]) + (f"; and {len(differences) - 5} more" if len(differences) > 5 else "")
        lengthened = any(d.split(":")[0] in ("steps", "epochs", "optimizer.total_steps") for d in differences)
        why = (" (the learning-rate schedule is fixed by the run's length, so a run cannot be lengthened when "
               "resumed)" if lengthened else "")
        raise ValueError(f"cannot resume {run_dir}: this command differs from the saved run ({shown}){why}; drop "
                         f"those flags to continue it, or start a new run with another --out")


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class StopRequests:
    """Turns SIGINT / SIGTERM into a request the loop honours after the current step. A second signal
    stops at once (KeyboardInterrupt); saved checkpoints are atomic, so nothing already saved is lost."""

    def __init__(self):
        self.signal = None
        self._previous = {}

    def _handle(self, signum, frame):
        if self.signal is not None:
            raise KeyboardInterrupt
        self.signal = signum

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
