"""The JAX backend equals the NumPy backend: logits, attention weights, loss, every gradient leaf and a whole
training step, over drawn configs (every attention kind, alpha in [0, 2], qk-norm, gate, pools, MLP
activations, dense and blocked attention).

float64 (x64 switched on only inside each test, with `jax.enable_x64`, so it does not leak into other tests):
relative error <= 1e-8 (reluattn.testing.relative_error; trees leaf by leaf, rt.assert_trees_close). float32:
logits within 1e-4; loss and the whole gradient within 1e-4 of the exact (float64) ones. Configs, parameters,
batches and optimizer settings are the testing kit's strategies (reluattn.testing), the regulariser included.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import reluattn as ra
from reluattn.config import ATTENTION_KINDS, AttentionConfig, ViTConfig
from reluattn.numpy_backend.attention_weights import attention_weights_forward
from reluattn.testing import (FLOAT32_CONDITION_FACTOR, assert_trees_close, compiling, float32_against_exact,
                              make_batch, make_parameters, optimizer_configs, relative_error, vit_configs)

jb, nb = ra.backend("jax"), ra.backend("numpy")
FLOAT64_TOLERANCE = 1e-8
FLOAT32_LOGITS_TOLERANCE = 1e-4
FLOAT32_GRADIENT_TOLERANCE = 1e-4  # norm-wise over all leaves; float32 rounding is 6e-8 relative
CONFIGS = vit_configs(reg_weights=(0.0, 0.5))  # every option, ReLUFormer's regulariser too
# A draw hypothesis found on a clean clone (seed 65536): relu6 gives the class token's query row no weight in
# either block, so with pool "cls" no attention output reaches the loss and every attention gradient, the
# learned length factor's too, is exactly 0 (float32_against_exact's length errors were once 0 / 0).
CLS_ROW_EMPTY_DRAW = ViTConfig(
    image_size=8, patch_size=4, channels=3, num_classes=4, dim=3, depth=2, heads=1, mlp_dim=4, pool="cls",
    mlp_activation="relu", attention=AttentionConfig(kind="relu6", alpha=0.25, scale=0.5, gated=True,
                                                     gate_activation="silu", learn_alpha=True))


@settings(compiling, max_examples=14)
@given(cfg=CONFIGS, seed=st.integers(0, 2**16), soft_labels=st.booleans(),
       label_smoothing=st.sampled_from([0.0, 0.1]))
def test_float64_logits_attention_loss_and_gradients_equal_numpy(cfg, seed, soft_labels, label_smoothing):
    params = make_parameters(cfg, seed, np.float64)
    images, labels = make_batch(cfg, seed + 1, np.float64, soft_labels=soft_labels)
    with jax.enable_x64(True):
        logits, maps = jb.apply(params, images, cfg, return_attention=True)
        loss, grads = jb.loss_and_grad(params, images, labels, cfg, label_smoothing=label_smoothing)
        assert logits.dtype == jnp.float64 and loss.dtype == jnp.float64
    expected_logits, expected_maps = nb.apply(params, images, cfg, return_attention=True)
    expected_loss, expected_grads = nb.loss_and_grad(params, images, labels, cfg, label_smoothing=label_smoothing)

    assert relative_error(logits, expected_logits) <= FLOAT64_TOLERANCE
    assert len(maps) == len(expected_maps) == cfg.depth
    for got, expected in zip(maps, expected_maps):
        assert got.shape == expected.shape == (3, cfg.heads, cfg.num_tokens, cfg.num_tokens)
        assert relative_error(got, expected) <= FLOAT64_TOLERANCE
    assert relative_error(loss, expected_loss) <= FLOAT64_TOLERANCE
    assert_trees_close(grads, expected_grads, FLOAT64_TOLERANCE, "gradients")


@settings(compiling, max_examples=10)
@given(cfg=CONFIGS, seed=st.integers(0, 2**16))
def test_float32_logits_equal_numpy(cfg, seed):
    params = make_parameters(cfg, seed, np.float32)
    images, _ = make_batch(cfg, seed + 1, np.float32)
    logits = jb.apply(params, images, cfg)
    assert logits.dtype == jnp.float32
    expected = nb.apply(params, images, cfg)
    assert expected.dtype == np.float32
    # Compare against the exact (float64) answer too: float32 NumPy is itself only an approximation.
    exact = nb.apply(make_parameters(cfg, seed, np.float64), images.astype(np.float64), cfg)
    assert relative_error(logits, expected) <= FLOAT32_LOGITS_TOLERANCE
    assert relative_error(logits, exact) <= FLOAT32_LOGITS_TOLERANCE


@pytest.mark.parametrize("fast", [False, True])
@settings(compiling, max_examples=6)
@given(cfg=CONFIGS, seed=st.integers(0, 2**16))
@example(cfg=CLS_ROW_EMPTY_DRAW, seed=65536)
def test_float32_loss_and_gradients_close_to_exact(cfg, seed, fast):
    """float32, plain and with fast=True (its own code paths: matmul layouts, the LayerNorm and GELU
    derivative rules), against the exact float64 answer of the NumPy backend."""
    # On an ill-conditioned draw, rounding the inputs to float32 alone moves the exact gradient by more than the
    # bound ("sensitivity"); there the float32 result may be FLOAT32_CONDITION_FACTOR times that away (see
    # reluattn/testing/precision.py; a CI draw of a width-3 LayerNorm, ILL_CONDITIONED_DRAW, needed it).
    errors = float32_against_exact(cfg, seed, fast=fast)
    assert errors["loss"] <= FLOAT32_GRADIENT_TOLERANCE, errors
    allowed = max(FLOAT32_GRADIENT_TOLERANCE, FLOAT32_CONDITION_FACTOR * errors["sensitivity"])
    assert errors["gradients"] <= allowed, errors


def test_a_draw_whose_class_row_is_empty_has_length_errors_of_zero():
    """The pinned draw is what its comment says, and its length errors are 0, not a division by zero."""
    params = make_parameters(CLS_ROW_EMPTY_DRAW, 65536, np.float64)
    images, labels = make_batch(CLS_ROW_EMPTY_DRAW, 65537, np.float64)
    _, maps = nb.apply(params, images, CLS_ROW_EMPTY_DRAW, return_attention=True)
    assert all(np.all(weights[:, :, 0] == 0) and np.any(weights > 0) for weights in maps)
    _, grads = nb.loss_and_grad(params, images, labels, CLS_ROW_EMPTY_DRAW)
    assert all(np.all(block["attn"]["length"]["alpha"] == 0) for block in grads["blocks"])
    errors = float32_against_exact(CLS_ROW_EMPTY_DRAW, 65536, fast=True)
    assert errors["length"] == errors["length sensitivity"] == 0.0, errors
    assert errors["gradients"] <= FLOAT32_GRADIENT_TOLERANCE, errors


@settings(compiling, max_examples=6)
@given(cfg=CONFIGS, opt_cfg=optimizer_configs(), seed=st.integers(0, 2**16),
       label_smoothing=st.sampled_from([0.0, 0.1]))
def test_two_training_steps_equal_numpy(cfg, opt_cfg, seed, label_smoothing):
    """Gradients and optimizer update together: two steps (so the second uses non-zero moments)."""
    params = make_parameters(cfg, seed, np.float64)
    images, labels = make_batch(cfg, seed + 1, np.float64)
    expected_params, expected_state = params, nb.init_optimizer(params, opt_cfg)
    expected_metrics = []
    for _ in range(2):
        expected_params, expected_state, metrics = nb.train_step(
            expected_params, expected_state, images, labels, cfg, opt_cfg, label_smoothing=label_smoothing)
        expected_metrics.append(metrics)
    with jax.enable_x64(True):
        new_params, state = params, jb.init_optimizer(params, opt_cfg)
        for step in range(2):
            new_params, state, metrics = jb.train_step(
                new_params, state, images, labels, cfg, opt_cfg, label_smoothing=label_smoothing)
            for name, value in expected_metrics[step].items():
                assert relative_error(metrics[name], value) <= FLOAT64_TOLERANCE, name
        new_params = jax.tree.map(np.asarray, new_params)
        state = jax.tree.map(np.asarray, state)
    # The update itself (new - old), not just the new values, which the old ones dominate.
    updates = jax.tree.map(lambda new, old: new - old, new_params, params)
    expected_updates = jax.tree.map(lambda new, old: new - old, expected_params, params)
    assert_trees_close(updates, expected_updates, FLOAT64_TOLERANCE, "updates")
    assert int(state["step"]) == int(expected_state["step"]) == 2
    assert_trees_close(state["mu"], expected_state["mu"], FLOAT64_TOLERANCE, "first moments")
    assert_trees_close(state["nu"], expected_state["nu"], FLOAT64_TOLERANCE, "second moments")


@pytest.mark.parametrize("kind", ATTENTION_KINDS)
def test_attention_core_and_weights_equal_numpy(kind):
    """The public multi-head core, and its weights, at scores that cross the kinks (0 and 6)."""
    rng = np.random.default_rng(ATTENTION_KINDS.index(kind))
    q, k, v = (rng.normal(0.0, 3.0, size=(2, 5, 2, 4)) for _ in range(3))
    for attn_cfg in (AttentionConfig(kind=kind, alpha=0.7, scale=1.5),
                     AttentionConfig(kind=kind, alpha=1.3, impl="blocked", block_size=2)):
        with jax.enable_x64(True):
            out, weights = jb.attention(q, k, v, attn_cfg, return_weights=True)
            assert out.dtype == jnp.float64
        assert relative_error(out, nb.attention(q, k, v, attn_cfg)) <= FLOAT64_TOLERANCE
        scores = np.einsum("bqhd,bkhd->bhqk", q, k) / 2.0  # sqrt(Dh) = 2
        assert relative_error(weights, attention_weights_forward(scores, attn_cfg)[0]) <= FLOAT64_TOLERANCE
