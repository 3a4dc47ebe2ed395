"""Using a trained checkpoint: `reluattn evaluate` (accuracy and loss on a split) and `reluattn attention`
(the attention maps of one image).

A checkpoint's config.json holds the run's TrainConfig and a description of its data (classes,
normalisation statistics, how the validation images were held out), so a checkpoint alone says how to
score it again; everything in it is checked before use, and what does not fit is a CheckpointError.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .. import backend as get_backend
from ..params import check_params, flatten
from .config import train_config_from_dict
from .run_data import load_split
from .run_dir import CheckpointError, load_checkpoint, non_finite_arrays
from .run_folder import CONFIG, PARAMS


def load_trained(checkpoint) -> dict:
    """{"path", "config" (TrainConfig), "data" (description), "params", "state"} of a checkpoint or run."""
    loaded = load_checkpoint(checkpoint)
    path = loaded["path"]
    try:
        config = train_config_from_dict(loaded["config"])
    except ValueError as error:
        raise CheckpointError(f"{path / CONFIG} is not a training config ({error}); the checkpoint is "
                              f"corrupted or was not written by reluattn train") from None
    try:
        check_params(loaded["params"], config.model)
    except ValueError as error:
        raise CheckpointError(f"the arrays in {path / PARAMS} do not fit its config.json ({error}); the "
                              f"checkpoint is corrupted") from None
    description = loaded["config"].get("data")
    if not isinstance(description, dict) or not {"mean", "std", "class_names"} <= set(description):
        raise CheckpointError(f"{path / CONFIG} has no data description (classes, normalisation); the "
                              f"checkpoint is corrupted or was not written by reluattn train")
    return {"path": path, "config": config, "data": description, "params": loaded["params"],
            "state": loaded["state"]}


def _images_for(trained: dict, data, split, progress: bool):
    config = trained["config"]
    images, labels, split = load_split(config, trained["data"], data, split, progress=progress)
    model = config.model
    expected = (model.image_size, model.image_size, model.channels)
    if tuple(images.shape[1:]) != expected:
        raise ValueError(f"the {split!r} images are {images.shape[1:]}, but the checkpoint's model takes "
                         f"{expected}; point --data at the dataset the run was trained on")
    return images, labels, split


def with_attention_impl(config, impl=None, block_size=None):
    """`config` with its attention's impl / block size replaced where given (`evaluate --impl/--block-size`):
    how the weights are computed, not what they are, so any checkpoint can be scored either way."""
    changes = {name: value for name, value in (("impl", impl), ("block_size", block_size)) if value is not None}
    if not changes:
        return config
    model = config.model
    if block_size is not None and changes.get("impl", model.attention.impl) != "blocked":
        raise ValueError(f"--block-size applies only with --impl blocked (this checkpoint computes attention "
                         f"{model.attention.impl}); add --impl blocked or drop --block-size")
    if changes.get("impl") == "blocked":
        changes["reg_weight"] = 0.0  # the regulariser is a training loss term: scoring never computes it
    return config.replace(model=model.replace(attention=model.attention.replace(**changes)))


def evaluate_checkpoint(checkpoint, data=None, split=None, *, batch_size: int = 500, backend=None,
                        progress: bool = True, impl=None, block_size=None, fewshot=None, fewshot_seeds=5) -> dict:
    """{"accuracy", "loss" (mean cross-entropy, no label smoothing), "n", "split", "checkpoint", "error"}; with
    `fewshot=K`, also fewshot.py's K-shot probe on the same split ("fewshot_accuracy", "fewshot_std", ...).

    "error" is None, or says why the scores are None (non-finite parameters, or a non-finite loss)."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"--batch-size must be a positive whole number, got {batch_size!r}")
    if fewshot is not None:
        from .fewshot import check_fewshot_arguments
        check_fewshot_arguments(fewshot, fewshot_seeds)
    trained = load_trained(checkpoint)
    config = with_attention_impl(trained["config"], impl, block_size)
    chosen = backend or config.backend
    from . import engine  # imports JAX
    if chosen == "jax":
        engine.configure_jax_cpu()  # before loading the data, as the trainer does
    images, labels, split = _images_for(trained, data, split, progress)
    mean, std = trained["data"]["mean"], trained["data"]["std"]
    if chosen == "numpy":
        result = engine.evaluate_arrays(engine.numpy_scorer(config.model, mean, std), trained["params"], images,
                                        labels, batch_size)
    else:
        import jax
        from ..jax_backend import sharding
        mesh = engine.device_mesh()
        params = jax.device_put(trained["params"], sharding.replicated(mesh))
        result = engine.evaluate_arrays(engine.jax_scorer(config, mean, std, mesh), params, images, labels,
                                        batch_size, mesh.size)
    outcome = _non_finite_outcome(trained, result)
    if fewshot is not None and outcome["error"] is None:
        from .fewshot import fewshot_accuracy, pre_logits
        features = pre_logits(trained["params"], images, config.model, mean, std, chosen, batch_size)  # (N, D)
        result.update(fewshot_accuracy(features, labels, fewshot, fewshot_seeds,
                                       class_names=trained["data"]["class_names"]))
    elif fewshot is not None:  # a probe on non-finite features means nothing either
        from .fewshot import FEWSHOT_KEYS
        outcome.update(dict.fromkeys(FEWSHOT_KEYS))
    return dict(result, split=split, checkpoint=str(trained["path"]), **outcome)


def _non_finite_outcome(trained: dict, result: dict) -> dict:
    """{"error": None}, or None scores and an "error" saying why they mean nothing."""
    bad = non_finite_arrays(flatten(trained["params"]))
    if bad:
        error = f"non-finite parameters ({', '.join(bad[:3])}) in {trained['path']}"
    elif not math.isfinite(result["loss"]):
        error = f"the loss is {result['loss']}"
    else:
        return {"error": None}
    return {"accuracy": None, "loss": None, "error": error}


def attention_maps(trained: dict, image: np.ndarray, backend=None):
    """(logits (K,), list of per-block attention weights (H, T, T)) of one uint8 image (S, S, C)."""
    from .augment import normalize
    config = trained["config"]
    batch = normalize(image[None], trained["data"]["mean"], trained["data"]["std"])  # (1, S, S, C)
    chosen = get_backend(backend or config.backend)
    logits, attention = chosen.apply(trained["params"], batch, config.model, return_attention=True)
    return np.asarray(logits)[0], [np.asarray(weights, dtype=np.float64)[0] for weights in attention]


def attention_figure(checkpoint, data=None, *, index: int, split=None, output=None, backend=None) -> Path:
    """Write the attention-map PNG of image `index` of `split`; returns its path."""
    from .plots import plot_attention
    trained = load_trained(checkpoint)
    images, labels, split = _images_for(trained, data, split, progress=True)
    if not 0 <= index < len(labels):
        raise ValueError(f"--index must be between 0 and {len(labels) - 1} for the {len(labels)} {split!r} images; "
                         f"got {index}")
    logits, attention = attention_maps(trained, images[index], backend)
    names = trained["data"]["class_names"]
    config = trained["config"]
    attention_cfg = config.model.attention
    run_name = Path(trained["path"]).parent.parent.name
    title = (f"{run_name} — {attention_cfg.kind} attention (alpha {attention_cfg.alpha:g}) — {split} image "
             f"{index}: label {names[int(labels[index])]}, predicted {names[int(np.argmax(logits))]}")
    output = Path(output or f"attention-{split}-{index}.png")
    return plot_attention(images[index], attention, config.model.pool, output, title)
