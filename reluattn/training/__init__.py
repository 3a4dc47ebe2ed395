"""The `reluattn train | evaluate | plot | attention` tool, apart from the model it trains.

    from reluattn.training import PRESETS, TrainConfig, train
    result = train(PRESETS["cpu-small"].replace(epochs=1), "runs/x", data="cifar10-train.zip")

    config.py      TrainConfig (everything a run computes) and AugmentationConfig
    presets.py     the named TrainConfigs of `--preset`, each with its budget and measured result
    loop.py        train(): data order, logging, validation, checkpoints, stopping and resuming
    engine.py      the Engine protocol the loop calls, a NumPy and a JAX engine, and the one evaluation
    augment.py     host (NumPy) and device (JAX) augmentation side by side, and the one `normalize`
    run_data.py    which images a run trains and validates on, and their normalisation statistics
    run_dir.py     what a run directory holds: checkpoints, metrics.jsonl, summary.json
    npz_files.py   reading a checkpoint's .npz: declared shapes and dtypes checked before anything is unpacked
    run_folder.py  who may use a run folder (its lock), what a new run may start in, what reluattn deletes
    files.py       writing files: new temporaries renamed into place, appends that follow no symlink
    resume.py      what --resume checks: saved configuration, data fingerprint, state.json, finite arrays
    evaluation.py  scoring a checkpoint (`evaluate`) and its attention maps (`attention`)
    attention_statistics.py  the attention statistics of every validation record (NumPy, from weights)
    fewshot.py     the few-shot ridge probe on the pre-logits (`evaluate --fewshot K`)
    plots.py       training curves and attention-map figures
    experiments.py the reproduction study's named grids of runs (`reluattn sweep EXPERIMENT`)
    sweep.py       running a grid, resumably, one `reluattn train` process per cell and seed
    report.py      a sweep's table (CSV, JSON) from its run directories; report_figures.py its figures;
                   seed_statistics.py means and spreads over seeds, and the test behind the verdicts

Importing this package (or loop.py) does not import JAX; `train()` does, when it starts.
"""

from .config import AugmentationConfig, TrainConfig
from .loop import TrainResult, train
from .presets import PRESETS, get_preset

__all__ = ["AugmentationConfig", "TrainConfig", "PRESETS", "get_preset", "train", "TrainResult"]
