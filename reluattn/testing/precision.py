"""How far a backend's reduced-precision compute lands from its own float32 compute: the measure behind the
bfloat16 tolerances of the project's tests (tests/jax_backend/test_jax_model.py) and of the benchmark that
sets them (benchmarks/investigations/bfloat16_error.py).

    (logits, loss, grads), errors = compute_dtype_errors(module, cfg, seed, jnp.bfloat16)

`module` has the backends' functional API with a `compute_dtype` option (reluattn.backend("jax")). The model
is make_parameters(cfg, seed) on make_batch(cfg, seed + 1, batch=4), both float32, run once in float32 and
once with `compute_dtype`. errors: "logits" (relative_error: against the largest logit), "loss" (relative),
"gradients" (all leaves as one vector, norm-wise relative) and "gradient cosine". Bounds on them are the
caller's: they depend on the model family (see the test's comment for the measured worst cases).
"""

from __future__ import annotations

import numpy as np

from ..config import ViTConfig
from .report import relative_error
from .strategies import make_batch, make_parameters
from .reference import flatten


def _as_vector(tree) -> np.ndarray:
    """Every leaf of a tree (flatten's order) as one float64 vector."""
    return np.concatenate([np.ravel(np.asarray(leaf, np.float64)) for leaf in flatten(tree).values()])


def compute_dtype_errors(module, cfg: ViTConfig, seed: int, compute_dtype, *, batch: int = 4, **options):
    """((logits, loss, grads) with compute_dtype, errors against float32) for one drawn model (module
    docstring); `options` go to every call (e.g. fast=True)."""
    params = make_parameters(cfg, seed, np.float32)
    images, labels = make_batch(cfg, seed + 1, np.float32, batch=batch)
    logits = module.apply(params, images, cfg, **options)
    low_logits = module.apply(params, images, cfg, compute_dtype=compute_dtype, **options)
    loss, grads = module.loss_and_grad(params, images, labels, cfg, **options)
    low_loss, low_grads = module.loss_and_grad(params, images, labels, cfg, compute_dtype=compute_dtype, **options)
    vector, low_vector = _as_vector(grads), _as_vector(low_grads)
    norm, low_norm = np.linalg.norm(vector), np.linalg.norm(low_vector)
    errors = {"logits": relative_error(low_logits, logits), "loss": relative_error(low_loss, loss),
              "gradients": float(np.linalg.norm(low_vector - vector) / norm),
              "gradient cosine": float(low_vector @ vector / (low_norm * norm))}
    return (low_logits, low_loss, low_grads), errors
