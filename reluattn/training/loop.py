"""The training loop behind `reluattn train`.

    result = train(config, "runs/x", data="cifar10-train.zip")          # or resume=True

`train` prepares a run (its data, its config completed for that data, the engine with fresh or restored
parameters) and hands it to the loop over its steps (step_loop.py), which owns the schedule: data order,
when to log, validate and checkpoint, stopping. The Engine (engine.py) owns the backend, the parameters and
the optimizer state; the run directory's files are run_dir.py's. A step goes loop -> engine -> the
backend's train step, nothing else.

A run holds its folder's lock from start to end; a new run starts only in a new or empty folder or one
of its own that stopped before it logged or saved anything (and reads its data before it makes the
folder), and a resumed one reads the data its checkpoint recorded unless given other data
(run_folder.py, resume.py).
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

from ..params import check_params, init_params
from .config import TrainConfig, check_fits_in_memory
from .run_data import load_run_data
from .resume import check_resume, resume_step, saved_train_config
from .run_dir import CheckpointError, MetricsLog, load_checkpoint
from .run_folder import LOCK, check_fresh_run_folder, refuse_if_in_use, use_run_folder
from .step_loop import StepLoop, TrainResult, best_and_final, print_status, summary_line


def train(config: TrainConfig, out, *, data=None, resume: bool = False, progress: bool = True,
          stdout=None, allow_different_data: bool = False) -> TrainResult:
    """Train (or, with resume=True, continue) the run in directory `out`: the folder and data rules are this
    module's docstring, the data order, logging, checkpoints and signals step_loop.py's.

    Without `data`, a resumed run reads the data source its checkpoint recorded; `allow_different_data`
    lets it continue on images whose fingerprint differs from the recorded one."""
    run_dir = Path(out)
    stdout = stdout or sys.stdout
    refuse_if_in_use(run_dir)  # "in use by PID n" before anything that other run is changing
    if resume:
        saved_train_config(run_dir)  # a clear error when there is nothing (readable) to resume
        with use_run_folder(run_dir, new_run=False):  # one run per folder; the lock dies with the process
            checkpoint = load_checkpoint(run_dir)
            if data is None:
                data = checkpoint["config"].get("data", {}).get("path")  # the run's own data source
            prepared = _prepare(config, data, checkpoint, run_dir, progress, allow_different_data, stdout)
            return _train(prepared, run_dir, checkpoint, progress, stdout)
    if run_dir.exists():  # a folder that is not ours is refused before the data is read (and again, locked)
        check_fresh_run_folder(run_dir, os.path.lexists(run_dir / LOCK))
    # The data, the schedule and the memory check come before the folder is made: a refused start leaves nothing.
    prepared = _prepare(config, data, None, run_dir, progress, False, stdout)
    with use_run_folder(run_dir, new_run=True):
        return _train(prepared, run_dir, None, progress, stdout)


def _prepare(config, data, checkpoint, run_dir, progress, allow_different_data, stdout) -> tuple:
    """(resolved config, RunData): the run's images, its config completed for them, and the checks of both."""
    if config.backend == "jax":
        from .engine import configure_jax_cpu  # imports JAX
        # Before loading the data: decoding starts threads, and malloc settings made after that no longer
        # reach every thread.
        configure_jax_cpu()
    if config.compute_dtype == "auto" and checkpoint is not None:  # what the run picked when it started
        config = config.replace(compute_dtype=checkpoint["config"].get("compute_dtype", "float32"))
    if config.compute_dtype == "auto":  # measured once, then fixed in the run's config
        from .dtype_probe import probe_compute_dtype
        picked, timings = probe_compute_dtype(config.batch_size, config.model.num_tokens, config.model.dim)
        config = config.replace(compute_dtype=picked)
        print_status(stdout, "compute dtype auto: " + picked + (" (probe: " + ", ".join(
            f"{name} {1e3 * seconds:.1f} ms" for name, seconds in timings.items()) + ")" if timings else ""))
    run_data = load_run_data(config, data, progress=progress)
    description = run_data.description
    resolved = config.resolve(description["num_train"], description["image_size"], description["channels"],
                              len(description["class_names"]))
    if checkpoint is not None:
        check_resume(checkpoint["config"], resolved, description, run_dir, allow_different_data)
        if allow_different_data:  # keep the run's normalisation: the model was trained on it
            saved = checkpoint["config"]["data"]
            run_data = replace(run_data, description=dict(description, mean=saved["mean"], std=saved["std"]))
    check_fits_in_memory(resolved.model)
    return resolved, run_data


def _train(prepared, run_dir, checkpoint, progress, stdout) -> TrainResult:
    from .engine import make_engine  # imports JAX
    resolved, run_data = prepared
    description = run_data.description
    total = resolved.optimizer.total_steps
    steps_per_epoch = resolved.steps_per_epoch(description["num_train"])
    start = resume_step(checkpoint, total) if checkpoint else 0
    state = dict(checkpoint["state"]) if checkpoint else {}
    history = list(state.get("validation", []))
    if start >= total:
        line = summary_line(resolved, run_dir, start, total, history, state.get("elapsed", 0.0), None,
                        "already complete")
        print_status(stdout, line)
        return TrainResult(0, start, total, *best_and_final(history), checkpoint["path"], line)

    engine = make_engine(resolved, run_data.train.images, run_data.train.labels, description["mean"],
                         description["std"])
    if checkpoint is not None:
        params = checkpoint["params"]
        try:
            check_params(params, resolved.model)
        except ValueError as error:
            raise CheckpointError(f"the parameters in {checkpoint['path']} do not fit its config ({error}); the "
                                  f"checkpoint is corrupted") from None
        engine.restore(params, checkpoint["opt_state"], str(checkpoint["path"]))
        print_status(stdout, f"resuming {run_dir} at step {start} of {total}")
    else:
        engine.start(init_params(resolved.model, seed=resolved.seed))
    model = resolved.model
    print_status(stdout, f"training {model.attention.kind} attention ViT {model.dim}x{model.depth} on "
                    f"{description['num_train']} images ({description['kind']}), steps {start}-{total} of batch "
                    f"{resolved.batch_size}, {resolved.backend} backend on {engine.device_description}")
    log = MetricsLog(run_dir)
    log.truncate_after(start)
    loop = StepLoop(resolved, engine, run_data, run_dir, log, history, state.get("elapsed", 0.0), stdout, progress)
    loop.last_checkpoint = checkpoint["path"] if checkpoint else None
    return loop.run(start, total, steps_per_epoch)


