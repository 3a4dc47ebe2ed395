"""The `reluattn train | evaluate | plot | attention` tool, apart from the model it trains.

    from reluattn.training import PRESETS, TrainConfig, train
    result = train(PRESETS["cpu-small"].replace(epochs=1), "runs/x", data="cifar10-train.zip")

    config.py      TrainConfig (everything a run computes) and AugmentationConfig
    presets.py     the named TrainConfigs of `--preset`, each with its budget and measured result
    loop.py        train(): a new or resumed run's data, config and engine, handed to the step loop
    step_loop.py   the loop over steps: data order, logging, validation, checkpoints, stopping on a signal
    engine.py      the Engine protocol the loop calls, a NumPy and a JAX engine, and the one evaluation
    augment.py     host (NumPy) and device (JAX) augmentation side by side, and the one `normalize`
    run_data.py    which images a run trains and validates on, and their normalisation statistics
    run_dir.py     checkpoints (written atomically, read back, the newest kept), metrics.jsonl, summary.json
    run_folder.py  a run folder's layout and every name in it, its lock, what a new run may start in, and
                   what reluattn deletes
    npz_files.py   reading a checkpoint's .npz: declared shapes and dtypes checked before anything is unpacked
    files.py       writing files: new temporaries renamed into place, appends that follow no symlink
    resume.py      what --resume checks: saved configuration, data fingerprint, state.json, finite arrays
    evaluation.py  scoring a checkpoint (`evaluate`) and its attention maps (`attention`)
    attention_statistics.py  the attention statistics of every validation record (NumPy, from weights)
    fewshot.py     the few-shot ridge probe on the pre-logits (`evaluate --fewshot K`)
    plots.py       training curves and attention-map figures

The reproduction study (`reluattn sweep`) is its own package, reluattn.study, which drives this one only
through the `reluattn train` command and the files of its run folders.

Importing this package (or loop.py) does not import JAX; `train()` does, when it starts. The names below
are loaded on first use, so that a reader of run folders (reluattn.study) importing `files` or `run_folder`
does not load the whole trainer.
"""

import importlib

_HOMES = {"AugmentationConfig": "config", "TrainConfig": "config", "TrainResult": "loop", "train": "loop",
          "PRESETS": "presets", "get_preset": "presets"}


def __getattr__(name: str):
    if name in _HOMES:
        return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["AugmentationConfig", "TrainConfig", "PRESETS", "get_preset", "train", "TrainResult"]
