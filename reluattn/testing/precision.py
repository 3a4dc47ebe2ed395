"""How far a backend's reduced-precision compute lands from its own float32 compute: the measure behind the
bfloat16 tolerances of the project's tests (tests/jax_backend/test_jax_model.py) and of the benchmark that
sets them (benchmarks/investigations/bfloat16_error.py).

    (logits, loss, grads), errors = compute_dtype_errors(module, cfg, seed, jnp.bfloat16)

`module` has the backends' functional API with a `compute_dtype` option (reluattn.backend("jax")). The model
is make_parameters(cfg, seed) on make_batch(cfg, seed + 1, batch=4), both float32, run once in float32 and
once with `compute_dtype`. errors: "logits" (relative_error: against the largest logit), "loss" (relative),
"gradients" (all leaves as one vector, norm-wise relative), "gradient cosine", "sensitivity" (the same
measure between the float32 gradients and the float32 gradients of the parameters and images rounded to
`compute_dtype`: how ill-conditioned the draw is, which no reduced-precision computation can beat; the
regulariser's 1/S gradient on nearly empty rows makes some draws so), and "rows across the floor":
how many attention rows are all zero (sum below ROW_SUM_FLOOR) in one run and not in the other, counted when
the loss holds ReLUFormer's regulariser (reg_weight > 0; else 0). On such a row the regulariser is
discontinuous -- |log S| jumps from |log 1e-6| = 13.8 to |log S| and its gradient from 0 to 1/S -- so a
score that rounding moves across 0 changes the gradient by any amount: no tolerance bounds such a draw.
Bounds on the errors are the caller's: they depend on the model family (see the test's comment for the
measured worst cases).

    errors = float32_against_exact(cfg, seed, fast=True)

measures a float32 run of the JAX backend against the exact (float64 NumPy) answer, beside how far rounding
the inputs alone to float32 moves that answer ("sensitivity"): what no float32 computation can avoid on an
ill-conditioned draw. FLOAT32_CONDITION_FACTOR bounds the ratio (see its comment).
"""

from __future__ import annotations

import numpy as np

from ..config import AttentionConfig, ViTConfig
from ..numpy_backend.regulariser import ROW_SUM_FLOOR
from .report import relative_error
from .strategies import make_batch, make_parameters
from ..params import flatten, unflatten

# float32 error / input-rounding sensitivity: measured at most 9.9 over whole gradients and 28 over the learned
# length leaves (benchmarks/investigations/float32_gradient_error.py, 75 + 62 drawn models), so 60 leaves twice
# the largest. It matters only on ill-conditioned draws: a width-3 LayerNorm over a nearly constant row moved
# the exact gradient by 1.2e-4 of its norm from input rounding alone (CI, issue 12), past a 1e-4 bound.
FLOAT32_CONDITION_FACTOR = 60

# A model CI drew where float32 missed 1e-4 (with seed 276: float32_against_exact(ILL_CONDITIONED_DRAW, 276,
# fast=True)). Its first LayerNorm, over 3 features, sees
# a nearly constant row, so float32 rounding of the inputs alone moves the exact gradient by 1.2e-4 of its norm.
ILL_CONDITIONED_DRAW = ViTConfig(
    image_size=8, patch_size=4, channels=1, num_classes=5, dim=3, depth=1, heads=1, mlp_dim=12, pool="cls",
    mlp_activation="gelu",
    attention=AttentionConfig(kind="relu", alpha=1.0208128235722789, scale=0.5, qk_norm=True, gated=True,
                              impl="blocked", block_size=5, gate_activation="identity", entropy_margin=0.3,
                              learn_alpha=True))




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
    _, rounded_grads = module.loss_and_grad(*_rounded(params, images, compute_dtype), labels, cfg, **options)
    vector, low_vector, rounded = _as_vector(grads), _as_vector(low_grads), _as_vector(rounded_grads)
    norm, low_norm = np.linalg.norm(vector), np.linalg.norm(low_vector)
    errors = {"logits": relative_error(low_logits, logits), "loss": relative_error(low_loss, loss),
              "gradients": float(np.linalg.norm(low_vector - vector) / norm),
              "gradient cosine": float(low_vector @ vector / (low_norm * norm)),
              "sensitivity": float(np.linalg.norm(rounded - vector) / norm),
              "rows across the floor": _rows_across_the_floor(module, params, images, cfg, compute_dtype, options)}
    return (low_logits, low_loss, low_grads), errors


def _rounded(params, images, dtype):
    """The parameters and images rounded to `dtype` and back to float32 (NumPy arrays)."""
    round_trip = lambda leaf: np.asarray(leaf).astype(dtype).astype(np.float32)
    return unflatten({path: round_trip(leaf) for path, leaf in flatten(params).items()}), round_trip(images)


def _rows_across_the_floor(module, params, images, cfg, compute_dtype, options) -> int:
    """Attention rows (over blocks, batch, heads, queries) all zero in exactly one of the two runs; 0 when
    the loss has no regulariser (the only term that is discontinuous there)."""
    if cfg.attention.reg_weight == 0:
        return 0
    _, weights = module.apply(params, images, cfg, return_attention=True, **options)
    _, low_weights = module.apply(params, images, cfg, return_attention=True, compute_dtype=compute_dtype, **options)
    return int(sum(np.sum((np.asarray(w, np.float64).sum(-1) > ROW_SUM_FLOOR)
                          != (np.asarray(low, np.float64).sum(-1) > ROW_SUM_FLOOR))
                   for w, low in zip(weights, low_weights)))


def float32_against_exact(cfg: ViTConfig, seed: int, fast: bool = False, params: dict | None = None) -> dict:
    """The JAX backend's float32 loss and gradients for `params` (default make_parameters(cfg, seed)) on
    make_batch(cfg, seed + 1) against the exact ones (the NumPy backend in float64), and how far rounding the
    inputs alone moves those.

    Returns relative errors: "loss"; "gradients" (all leaves as one vector, norm-wise); "sensitivity", the
    same measure between the exact gradients and the exact (float64) gradients of the parameters and images
    rounded to float32; and, when the config learns a length factor, "length" and "length sensitivity", the
    same two over the attn.length leaves only, relative to their own norm (0 where the exact and the
    compared leaves are all exactly 0)."""
    import jax

    from .. import backend
    params = make_parameters(cfg, seed, np.float64) if params is None else params
    images, labels = make_batch(cfg, seed + 1, np.float64)
    exact_loss, exact = backend("numpy").loss_and_grad(params, images, labels, cfg)
    rounded = {path: np.asarray(leaf).astype(np.float32) for path, leaf in flatten(params).items()}
    _, from_rounded = backend("numpy").loss_and_grad(
        unflatten({path: leaf.astype(np.float64) for path, leaf in rounded.items()}),
        images.astype(np.float32).astype(np.float64), labels, cfg)
    loss, grads = backend("jax").loss_and_grad(unflatten(rounded), images.astype(np.float32), labels, cfg, fast=fast)
    assert loss.dtype == np.float32 and all(leaf.dtype == np.float32 for leaf in jax.tree.leaves(grads))
    exact, from_rounded, grads = (flatten(tree) for tree in (exact, from_rounded, grads))

    def distance(tree, other, paths):
        squares = (np.sum(np.square(np.asarray(tree[path], np.float64) - other[path])) for path in paths)
        return float(np.sqrt(sum(squares)))

    def relative(paths):
        """Each tree's distance from the exact leaves over the exact leaves' norm. Where that norm is 0 (a draw
        can cut every path from the loss to these leaves), over the tree's own norm, and 0 when both are 0."""
        zero = {path: 0.0 for path in paths}
        norm = distance(exact, zero, paths)

        def ratio(tree):
            scale = norm or distance(tree, zero, paths)
            return 0.0 if scale == 0.0 else distance(tree, exact, paths) / scale
        return ratio(grads), ratio(from_rounded)

    errors = {"loss": relative_error(loss, exact_loss)}
    errors["gradients"], errors["sensitivity"] = relative(sorted(exact))
    length_paths = [path for path in sorted(exact) if "/length/" in path]
    if length_paths:
        errors["length"], errors["length sensitivity"] = relative(length_paths)
    return errors
