"""What `reluattn train --resume` checks before it continues a run from its latest checkpoint.

    saved_train_config(run_dir)     the run's TrainConfig (the base the command's flags apply to)
    check_resume(...)               the command computes what the saved run computed, on the same images
    resume_step(checkpoint, total)  the step to continue at, from a state.json that makes sense, with
                                    finite parameters and optimizer state
"""

from __future__ import annotations

import json
from pathlib import Path

from ..params import flatten
from .config import TrainConfig, config_differences, train_config_from_dict
from .run_dir import LATEST, CheckpointError, list_checkpoints, non_finite_arrays, resolve_checkpoint
from .run_folder import CONFIG, STATE


def saved_train_config(run_dir) -> TrainConfig:
    """The TrainConfig stored in a run's latest checkpoint (for --resume)."""
    run_dir = Path(run_dir)
    if not list_checkpoints(run_dir):
        raise CheckpointError(f"{run_dir} holds no checkpoint to resume; run without --resume to start it "
                              f"afresh, or check --out")
    path = resolve_checkpoint(run_dir) / CONFIG
    try:
        data = json.loads(path.read_text())
        return train_config_from_dict(data)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        reason = "nested too deeply" if isinstance(error, RecursionError) else error
        raise CheckpointError(f"{path} does not parse ({reason}); the checkpoint is corrupted — resume from an "
                              f"earlier one or start a new run") from None
    except ValueError as error:
        raise CheckpointError(f"{path} is not a valid training config ({error}); the checkpoint is corrupted "
                              f"or from another version") from None


def check_resume(saved_config: dict, resolved: TrainConfig, description: dict, run_dir,
                 allow_different_data: bool = False) -> None:
    # Through the config classes, so that fields added since the run was saved take their defaults (what the
    # older code did) instead of reading as differences.
    saved = train_config_from_dict(saved_config).to_dict()
    differences = config_differences(saved, resolved.to_dict())
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
    saved_print = saved_data.get("fingerprint")  # absent in checkpoints written before it was recorded
    if saved_print and saved_print != description["fingerprint"] and not allow_different_data:
        where = description["path"] or "the downloaded CIFAR archive"
        raise ValueError(f"cannot resume {run_dir}: the images in {where} are not the ones the run was trained on "
                         f"(fingerprint saved {saved_print[:19]}..., now {description['fingerprint'][:19]}...); "
                         f"point --data at the run's data, or pass --allow-different-data to continue on these "
                         f"images (with the run's normalisation)")


def resume_step(checkpoint: dict, total: int) -> int:
    """The step a loaded checkpoint resumes at, after checking its state and that its arrays are finite."""
    path = checkpoint["path"]
    step = checkpoint["state"].get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise CheckpointError(f"{path / STATE} holds no valid \"step\" (found {_short(step)}); the "
                              f"checkpoint is corrupted — resume from an earlier one or start a new run")
    if step > total:
        raise CheckpointError(f"{path / STATE} says step {step}, beyond this run's {total} steps; the "
                              f"checkpoint is corrupted — resume from an earlier one or start a new run")
    bad = non_finite_arrays(flatten(checkpoint["params"])) + non_finite_arrays(checkpoint["opt_state"])
    if bad:
        raise CheckpointError(f"{path} holds non-finite values ({', '.join(bad[:3])}), so it is not a good "
                              f"checkpoint; point {path.parent / LATEST} at an earlier step_* folder to resume "
                              f"from it, or start a new run")
    return step


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
