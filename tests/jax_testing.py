"""Shared pieces of the JAX backend's tests: hypothesis strategies for small configs, random inputs, and the
comparison used throughout.

Compile time is what these tests spend: every distinct config is a new XLA compilation, so the strategies
draw small models (depth 1-2, at most 17 tokens) and each property runs a bounded number of examples.
"""

from __future__ import annotations

import numpy as np
from hypothesis import Phase, settings
from hypothesis import strategies as st

from reluattn.config import (ATTENTION_KINDS, GATE_ACTIVATIONS, KINDS_WITH_SIGNED_WEIGHTS, KINDS_WITHOUT_LENGTH_FACTOR,
                             MLP_ACTIVATIONS, POOLS, AttentionConfig, OptimizerConfig, ViTConfig)
from reluattn.params import flatten, init_params, unflatten

# For properties that compile: no deadline (compilation is slow and uneven) and no shrinking (each shrink
# step is another compilation; the failing example is still printed as drawn).
compiling = settings(deadline=None, phases=(Phase.explicit, Phase.reuse, Phase.generate))


def relative_error(actual, expected) -> float:
    """max |actual - expected| / max(max |actual|, max |expected|): each array judged against its own scale
    (entry-wise ratios are noise where an entry is ~0); the same measure as tests/gradcheck.py."""
    actual = np.asarray(actual, dtype=np.float64).reshape(-1)
    expected = np.asarray(expected, dtype=np.float64).reshape(-1)
    assert actual.shape == expected.shape, f"shapes differ: {actual.shape} vs {expected.shape}"
    scale = max(np.max(np.abs(actual), initial=0.0), np.max(np.abs(expected), initial=0.0))
    return 0.0 if scale == 0.0 else float(np.max(np.abs(actual - expected)) / scale)


def assert_trees_close(actual, expected, tolerance, what="tree"):
    """Same leaves, and every leaf within `tolerance` relative error (as above)."""
    actual, expected = flatten(actual), flatten(expected)
    assert sorted(actual) == sorted(expected), f"{what}: leaves differ"
    errors = {path: relative_error(actual[path], expected[path]) for path in expected}
    bad = {path: error for path, error in errors.items() if not error <= tolerance}
    assert not bad, f"{what}: leaves beyond relative error {tolerance}: {bad}"


@st.composite
def attention_configs(draw, kinds=ATTENTION_KINDS, impls=("dense", "blocked")):
    """Every attention option; the learned length factor only where the kind has one, the regulariser
    only on non-negative weights with impl="dense" (what AttentionConfig accepts)."""
    impl = draw(st.sampled_from(impls))
    kind = draw(st.sampled_from(kinds))
    learnable = kind not in KINDS_WITHOUT_LENGTH_FACTOR
    regularisable = kind not in KINDS_WITH_SIGNED_WEIGHTS and impl == "dense"
    return AttentionConfig(
        kind=kind,
        alpha=draw(st.floats(0.0, 2.0)),
        scale=draw(st.sampled_from([1.0, 0.5, 2.0])),
        qk_norm=draw(st.booleans()),
        gated=draw(st.booleans()),
        impl=impl,
        block_size=draw(st.sampled_from([None, 2, 3, 5])) if impl == "blocked" else None,
        gate_activation=draw(st.sampled_from(GATE_ACTIVATIONS)),
        learn_alpha=draw(st.booleans()) if learnable else False,
        learn_scale=draw(st.booleans()) if learnable else False,
        reg_weight=draw(st.sampled_from([0.0, 0.5])) if regularisable else 0.0,
        entropy_margin=draw(st.sampled_from([0.7, 0.3])),
    )


@st.composite
def vit_configs(draw, head_dims=(3, 4), kinds=ATTENTION_KINDS, impls=("dense", "blocked")):
    """Small ViTs over every option of the SPEC: pools, MLP activations, attention kinds, alpha in [0, 2],
    qk-norm, gate, blocked attention; 1-3 heads, depth 1-2, patch 2 or 4, 1 or 3 channels.

    No width or head width of 2: a LayerNorm over two numbers outputs +-1 whatever they are, so its exact
    gradient vanishes and what either backend computes there is rounding noise, not a comparable value."""
    heads = draw(st.integers(1, 3))
    image_size, patch_size = draw(st.sampled_from([(4, 2), (8, 4), (8, 2)]))
    return ViTConfig(
        image_size=image_size, patch_size=patch_size, channels=draw(st.sampled_from([1, 3])),
        num_classes=draw(st.integers(2, 5)), dim=heads * draw(st.sampled_from(head_dims)),
        depth=draw(st.integers(1, 2)), heads=heads, mlp_dim=draw(st.sampled_from([4, 12])),
        pool=draw(st.sampled_from(POOLS)), mlp_activation=draw(st.sampled_from(MLP_ACTIVATIONS)),
        attention=draw(attention_configs(kinds, impls)),
    )


def optimizer_configs():
    """Hyperparameters over their useful ranges, clipping on and off, with and without warm-up."""
    @st.composite
    def draw_config(draw):
        total = draw(st.integers(1, 12))
        return OptimizerConfig(
            learning_rate=draw(st.floats(1e-4, 1e-1)),
            end_learning_rate=draw(st.sampled_from([0.0, 1e-5])),
            warmup_steps=draw(st.integers(0, total - 1)),
            total_steps=total,
            weight_decay=draw(st.sampled_from([0.0, 0.05, 0.3])),
            b1=draw(st.sampled_from([0.0, 0.8, 0.9])),
            b2=draw(st.sampled_from([0.95, 0.999])),
            eps=draw(st.sampled_from([1e-8, 1e-6, 1e-3])),
            clip_norm=draw(st.sampled_from([None, 0.1, 1.0, 100.0])),
        )
    return draw_config()


def random_params(cfg: ViTConfig, seed: int, dtype=np.float64) -> dict:
    """init_params with every leaf moved off its initial value (no zero biases, no unit scales), so every
    parameter carries a gradient of its own."""
    rng = np.random.default_rng(seed)
    flat = flatten(init_params(cfg, seed=seed, dtype=np.float64))
    return unflatten({path: (leaf + rng.normal(0.0, 0.2, leaf.shape)).astype(dtype) for path, leaf in flat.items()})


def random_batch(cfg: ViTConfig, seed: int, batch: int = 3, soft_labels: bool = False):
    """(images (B, S, S, C) float64, labels (B,) ints or (B, K) probabilities)."""
    rng = np.random.default_rng(seed)
    images = rng.normal(size=(batch, cfg.image_size, cfg.image_size, cfg.channels))
    if soft_labels:
        return images, rng.dirichlet(np.ones(cfg.num_classes), size=batch)
    return images, rng.integers(0, cfg.num_classes, size=batch)


def bfloat16_against_float32(cfg: ViTConfig, seed: int, fast: bool = True):
    """The JAX backend's logits, loss and gradients for random_params(cfg, seed) on a random batch of 4, in
    float32 and with `compute_dtype=jnp.bfloat16` (both with `fast`). Returns ((logits, loss, grads) of the bfloat16 run,
    errors): the logits' error relative to the largest logit, the loss's relative error, and the gradients'
    norm-wise relative error and cosine (all leaves as one vector) -- what tests/jax_backend/test_jax_model.py bounds
    and benchmarks/investigations/bfloat16_error.py reports."""
    import jax  # here: the rest of this module serves tests that need no JAX
    import jax.numpy as jnp

    import reluattn as ra
    jb = ra.backend("jax")
    params = random_params(cfg, seed, dtype=np.float32)
    images, labels = random_batch(cfg, seed + 1, batch=4)
    images = images.astype(np.float32)
    logits = jb.apply(params, images, cfg, fast=fast)
    low_logits = jb.apply(params, images, cfg, compute_dtype=jnp.bfloat16, fast=fast)
    loss, grads = jb.loss_and_grad(params, images, labels, cfg, fast=fast)
    low_loss, low_grads = jb.loss_and_grad(params, images, labels, cfg, compute_dtype=jnp.bfloat16, fast=fast)
    low_vector, vector = (np.concatenate([np.ravel(leaf) for leaf in jax.tree.leaves(tree)]).astype(np.float64)
                          for tree in (low_grads, grads))
    norm, low_norm = np.linalg.norm(vector), np.linalg.norm(low_vector)
    errors = {"logits": relative_error(low_logits, logits), "loss": relative_error(low_loss, loss),
              "gradients": float(np.linalg.norm(low_vector - vector) / norm),
              "gradient cosine": float(low_vector @ vector / (low_norm * norm))}
    return (low_logits, low_loss, low_grads), errors


# The model CI drew with seed 276 where float32 missed 1e-4 (issue 12): its first LayerNorm, over 3 features, sees
# a nearly constant row, so float32 rounding of the inputs alone moves the exact gradient by 1.2e-4 of its norm.
ILL_CONDITIONED_DRAW = ViTConfig(
    image_size=8, patch_size=4, channels=1, num_classes=5, dim=3, depth=1, heads=1, mlp_dim=12, pool="cls",
    mlp_activation="gelu",
    attention=AttentionConfig(kind="relu", alpha=1.0208128235722789, scale=0.5, qk_norm=True, gated=True,
                              impl="blocked", block_size=5, gate_activation="identity", entropy_margin=0.3,
                              learn_alpha=True))


def float32_against_exact(cfg: ViTConfig, seed: int, fast: bool = False, params: dict | None = None) -> dict:
    """The JAX backend's float32 loss and gradients for `params` (default random_params(cfg, seed)) on
    random_batch(cfg, seed + 1) against the exact ones (the NumPy backend in float64), and how far rounding the
    inputs alone moves those.

    Returns relative errors: "loss"; "gradients" (all leaves as one vector, norm-wise, as
    tests/parity/test_jax_vs_numpy.py bounds it); "sensitivity", the same measure between the exact gradients
    and the exact (float64) gradients of the parameters and images rounded to float32 -- the part of the
    float32 error that no float32 computation can avoid, large where the model is ill-conditioned (a width-3
    LayerNorm over a nearly constant row); and, when the config learns a length factor, "length" and
    "length sensitivity", the same two over the attn.length leaves only, relative to their own norm.
    Used by tests/perf/test_blocked_learned_factor.py and benchmarks/investigations/float32_gradient_error.py."""
    import jax  # here: the rest of this module serves tests that need no JAX

    import reluattn as ra
    params = random_params(cfg, seed) if params is None else params
    images, labels = random_batch(cfg, seed + 1)
    exact_loss, exact = ra.backend("numpy").loss_and_grad(params, images, labels, cfg)
    rounded = {path: leaf.astype(np.float32) for path, leaf in flatten(params).items()}
    _, from_rounded = ra.backend("numpy").loss_and_grad(
        unflatten({path: leaf.astype(np.float64) for path, leaf in rounded.items()}),
        images.astype(np.float32).astype(np.float64), labels, cfg)
    loss, grads = ra.backend("jax").loss_and_grad(unflatten(rounded), images.astype(np.float32), labels, cfg, fast=fast)
    assert loss.dtype == np.float32 and all(leaf.dtype == np.float32 for leaf in jax.tree.leaves(grads))
    exact, from_rounded, grads = (flatten(tree) for tree in (exact, from_rounded, grads))

    def distance(tree, other, paths):
        squares = (np.sum(np.square(np.asarray(tree[path], np.float64) - other[path])) for path in paths)
        return float(np.sqrt(sum(squares)))

    def relative(paths):
        norm = distance(exact, {path: 0.0 for path in paths}, paths)
        return distance(grads, exact, paths) / norm, distance(from_rounded, exact, paths) / norm

    errors = {"loss": relative_error(loss, exact_loss)}
    errors["gradients"], errors["sensitivity"] = relative(sorted(exact))
    length_paths = [path for path in sorted(exact) if "/length/" in path]
    if length_paths:
        errors["length"], errors["length sensitivity"] = relative(length_paths)
    return errors
