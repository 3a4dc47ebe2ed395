"""ReLUFormer's attention regulariser R (a secondary reading; AttentionConfig.reg_weight, entropy_margin):
its value against a plain loop, its NumPy backward against finite differences in float64 (and a broken
backward failing that check), finite loss and gradient at all-zero rows, the model's loss = cross-entropy +
reg_weight * R in both backends, and the JAX backend equal to the NumPy one over drawn configs."""

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reluattn as ra
from gradcheck import check_gradients
from reluattn.config import (ATTENTION_KINDS, KINDS_WITH_SIGNED_WEIGHTS, KINDS_WITHOUT_LENGTH_FACTOR, AttentionConfig,
                             ViTConfig)
from reluattn.jax_backend.regulariser import attention_regulariser as jax_regulariser
from reluattn.numpy_backend import model, regulariser
from reluattn.numpy_backend.layers import cross_entropy_forward, targets_from_labels
from reluattn.numpy_backend.regulariser import (ROW_SUM_FLOOR, attention_regulariser_backward,
                                                attention_regulariser_forward)
from reluattn.params import flatten
from reluattn.testing import compiling, make_batch, make_parameters, relative_error

nb, jb = ra.backend("numpy"), ra.backend("jax")
REGULARISED_KINDS = [kind for kind in ATTENTION_KINDS if kind not in KINDS_WITH_SIGNED_WEIGHTS]  # R needs w >= 0


def plain_regulariser(weights, margin):
    """R written as a loop over rows, from the formula."""
    total, rows = 0.0, weights.reshape(-1, weights.shape[-1])
    for row in rows:
        row_sum = max(row.sum(), ROW_SUM_FLOOR)
        p = row / row_sum
        entropy = -sum(x * np.log(x) for x in p if x > 0)
        total += abs(np.log(row_sum)) + max(0.0, entropy - margin * np.log(len(row)))
    return total / len(rows)


def relu_weights(seed, shape=(2, 2, 3, 6), zero_row=False):
    """relu/L-like weights: a mix of zeros and positive entries kept away from 0 (no kink in between),
    row sums away from 1 (the kink of |log S|); optionally one all-zero row."""
    rng = np.random.default_rng(seed)
    weights = rng.uniform(0.05, 1.0, shape) * (rng.random(shape) < 0.7)
    weights[..., 0] += 0.1  # no accidental all-zero row
    if zero_row:
        weights[0, 1, 2] = 0.0
    return weights


@pytest.mark.parametrize("margin", [0.7, 0.2, 0.0])
def test_value_matches_the_formula(margin):
    weights = relu_weights(0, zero_row=True)
    value, _ = attention_regulariser_forward(weights, AttentionConfig(entropy_margin=margin))
    assert value == pytest.approx(plain_regulariser(weights, margin), rel=1e-12)


@pytest.mark.parametrize("margin", [0.7, 0.2, 0.0])
@pytest.mark.parametrize("zero_row", [False, True])
def test_backward_matches_finite_differences(margin, zero_row):
    """margin 0 puts every row's entropy term on; 0.7 leaves some off: both branches are checked."""
    attn_cfg = AttentionConfig(entropy_margin=margin)
    weights = relu_weights(1, zero_row=zero_row)
    # Finite differences would cross the kinks at zero weights: perturb the positive ones only.
    positive = weights > 0
    _, cache = attention_regulariser_forward(weights, attn_cfg)
    dweights = attention_regulariser_backward(1.0, cache)
    assert np.all(np.isfinite(dweights))
    values = weights[positive]

    def value():
        full = np.zeros_like(weights)
        full[positive] = values
        return attention_regulariser_forward(full, attn_cfg)[0]

    check_gradients(value, {"w": values}, {"w": dweights[positive]})


def test_a_broken_backward_fails_the_check():
    weights = relu_weights(2)
    attn_cfg = AttentionConfig(entropy_margin=0.0)
    cache = attention_regulariser_forward(weights, attn_cfg)[1]
    broken = cache._replace(excess=-cache.excess)  # drops the entropy term's gradient

    def value():
        return attention_regulariser_forward(weights, attn_cfg)[0]

    with pytest.raises(AssertionError, match="relative errors over"):
        check_gradients(value, {"w": weights}, {"w": attention_regulariser_backward(1.0, broken)})


def test_an_all_zero_row_gives_a_finite_value_and_gradient_in_both_backends():
    weights = np.zeros((1, 1, 2, 4))
    weights[0, 0, 1] = [0.5, 0.0, 0.25, 0.25]
    value, cache = attention_regulariser_forward(weights, AttentionConfig())
    dweights = attention_regulariser_backward(1.0, cache)
    assert np.isfinite(value) and np.all(np.isfinite(dweights))
    assert value == pytest.approx(plain_regulariser(weights, 0.7), rel=1e-12)
    np.testing.assert_array_equal(dweights[0, 0, 0], 0.0)  # the clamp: no gradient on the dead row
    with jax.enable_x64(True):
        jax_value, jax_dweights = jax.value_and_grad(jax_regulariser)(weights, AttentionConfig())
    assert float(jax_value) == pytest.approx(value, rel=1e-12)
    np.testing.assert_allclose(np.asarray(jax_dweights), dweights, rtol=1e-10, atol=1e-14)


# Parity margins are > 0: with c = 0 a row with one non-zero weight has H = c log n = 0, on the kink of
# max(0, .), where rounding (p = 1 or 1 - ulp) decides the side; the NumPy checks above cover c = 0.
@settings(deadline=None, max_examples=25)
@given(seed=st.integers(0, 2 ** 16), margin=st.sampled_from([0.3, 0.7]),
       kind=st.sampled_from(REGULARISED_KINDS), zero_rows=st.booleans())
def test_jax_regulariser_and_its_gradient_equal_numpy(seed, margin, kind, zero_rows):
    rng = np.random.default_rng(seed)
    scores = rng.normal(0.0, 2.0, (2, 2, 4, 5))
    if zero_rows:
        scores[:, :, 0] = -np.abs(scores[:, :, 0]) - 0.1  # all-negative rows: relu rows of zeros
    attn_cfg = AttentionConfig(kind=kind, entropy_margin=margin)
    weights = nb.attention_weights.attention_weights_forward(scores, attn_cfg)[0]
    value, cache = attention_regulariser_forward(weights, attn_cfg)
    dweights = attention_regulariser_backward(1.0, cache)
    with jax.enable_x64(True):
        jax_value, jax_dweights = jax.value_and_grad(jax_regulariser)(weights, attn_cfg)
    assert relative_error(jax_value, value) <= 1e-12
    assert relative_error(jax_dweights, dweights) <= 1e-10


# ------------------------------------------------------------------------------------------ the model

def tiny(kind="relu", **attention):
    return ViTConfig(image_size=8, patch_size=4, channels=3, num_classes=3, dim=8, depth=2, heads=2, mlp_dim=12,
                     attention=AttentionConfig(kind=kind, **attention))


def regularised_loss(params, images, labels, cfg):
    """cross-entropy + reg_weight * R, from the forward alone (the reference for the gradient)."""
    logits, weights, _ = model.forward(params, images, cfg)
    loss = cross_entropy_forward(logits, targets_from_labels(labels, cfg.num_classes))[0]
    return loss + cfg.attention.reg_weight * np.mean([plain_regulariser(w, cfg.attention.entropy_margin)
                                                      for w in weights])


def check_model(cfg, seed=0):
    params = make_parameters(cfg, seed, np.float64)
    images, labels = make_batch(cfg, seed + 1, np.float64, batch=2)
    loss, grads = nb.loss_and_grad(params, images, labels, cfg)
    assert loss == pytest.approx(regularised_loss(params, images, labels, cfg), rel=1e-12)
    check_gradients(lambda: regularised_loss(params, images, labels, cfg), flatten(params), flatten(grads),
                    samples=3, seed=seed)


# Seeds whose relu scores stay further from the kink than the finite-difference step (seed 0 has one
# within it: relu's gradient check then misses by 1.1e-6 with or without the regulariser).
@pytest.mark.parametrize("kind, seed", [("relu", 1), ("softmax", 0), ("softplus", 0), ("relu2", 2)])
@pytest.mark.parametrize("margin", [0.3, 0.9])
def test_model_loss_and_gradient_with_the_regulariser_match_finite_differences(kind, seed, margin):
    check_model(tiny(kind, reg_weight=0.7, entropy_margin=margin, qk_norm=True), seed)


def test_model_gradient_check_fails_when_the_regulariser_backward_is_broken(monkeypatch):
    original = regulariser.attention_regulariser_backward
    monkeypatch.setattr(model, "attention_regulariser_backward", lambda *args: -original(*args))
    with pytest.raises(AssertionError, match="relative errors over"):
        check_model(tiny("relu", reg_weight=2.0, entropy_margin=0.0), seed=1)


def test_loss_is_cross_entropy_plus_weighted_regulariser_in_both_backends():
    cfg = tiny("relu", reg_weight=0.25)
    plain = cfg.replace(attention=cfg.attention.replace(reg_weight=0.0))
    params = make_parameters(cfg, 3, np.float64)
    images, labels = make_batch(cfg, 4, np.float64)
    regulariser_value = nb.attention_regulariser(params, images, cfg)
    cross_entropy = nb.loss_and_grad(params, images, labels, plain)[0]
    assert nb.loss_and_grad(params, images, labels, cfg)[0] == pytest.approx(
        cross_entropy + 0.25 * regulariser_value, rel=1e-12)
    assert regulariser_value > 0
    with jax.enable_x64(True):
        assert float(jb.loss_and_grad(params, images, labels, cfg)[0]) == pytest.approx(
            cross_entropy + 0.25 * regulariser_value, rel=1e-10)
        assert float(jb.attention_regulariser(params, images, cfg)) == pytest.approx(regulariser_value, rel=1e-10)
        terms = jb.loss_terms(params, images, labels, cfg)[1][1]
        assert float(terms["attention_regulariser"]) == pytest.approx(regulariser_value, rel=1e-10)
        assert float(terms["cross_entropy"]) == pytest.approx(cross_entropy, rel=1e-10)


def test_training_metrics_carry_the_loss_terms():
    cfg = tiny("relu", reg_weight=0.5)
    params = make_parameters(cfg, 5, np.float64)
    images, labels = make_batch(cfg, 6, np.float64)
    opt_cfg = ra.OptimizerConfig(total_steps=2)
    metrics = nb.train_step(params, nb.init_optimizer(params, opt_cfg), images, labels, cfg, opt_cfg)[2]
    assert metrics["loss"] == pytest.approx(metrics["cross_entropy"] + 0.5 * metrics["attention_regulariser"])
    jax_metrics = jb.train_step(params, jb.init_optimizer(params, opt_cfg), images, labels, cfg, opt_cfg)[2]
    assert set(jax_metrics) == set(metrics)
    assert float(jax_metrics["attention_regulariser"]) == pytest.approx(metrics["attention_regulariser"], rel=1e-4)


def test_an_all_zero_relu_row_keeps_the_model_loss_and_gradient_finite():
    """Queries whose every score is negative: the relu rows are exact zeros, R's log is clamped."""
    cfg = tiny("relu", reg_weight=1.0)
    params = make_parameters(cfg, 7, np.float64)
    params["blocks"][0]["attn"]["qkv"]["w"][:, :8] = 0.0  # q = the bias ...
    params["blocks"][0]["attn"]["qkv"]["b"][:8] = -5.0  # ... negative, and
    params["blocks"][0]["attn"]["qkv"]["w"][:, 8:16] = 0.0  # k = the bias, positive: every score < 0
    params["blocks"][0]["attn"]["qkv"]["b"][8:16] = 5.0
    images, labels = make_batch(cfg, 8, np.float64)
    weights = nb.apply(params, images, cfg, return_attention=True)[1][0]
    assert np.all(weights == 0.0)
    loss, grads = nb.loss_and_grad(params, images, labels, cfg)
    assert np.isfinite(loss) and all(np.all(np.isfinite(leaf)) for leaf in flatten(grads).values())
    with jax.enable_x64(True):
        jax_loss, jax_grads = jb.loss_and_grad(params, images, labels, cfg)
        assert all(np.all(np.isfinite(np.asarray(leaf))) for leaf in jax.tree.leaves(jax_grads))
    assert float(jax_loss) == pytest.approx(loss, rel=1e-10)


def test_configs_refuse_what_the_regulariser_cannot_read():
    for kind in ("gelu", "identity"):
        with pytest.raises(ValueError, match="reg_weight > 0 needs non-negative weights"):
            AttentionConfig(kind=kind, reg_weight=0.1)
        with pytest.raises(ValueError, match="needs non-negative weights"):
            nb.attention_regulariser(None, None, tiny(kind))
    with pytest.raises(ValueError, match="reg_weight > 0 needs impl='dense'"):
        AttentionConfig(reg_weight=0.1, impl="blocked")
    with pytest.raises(ValueError, match="reg_weight must be >= 0"):
        AttentionConfig(reg_weight=-1.0)


@settings(compiling, max_examples=8)
@given(kind=st.sampled_from(REGULARISED_KINDS), seed=st.integers(0, 2 ** 16),
       margin=st.sampled_from([0.3, 0.7]), learn=st.booleans())
def test_jax_model_with_the_regulariser_equals_numpy(kind, seed, margin, learn):
    learn = learn and kind not in KINDS_WITHOUT_LENGTH_FACTOR
    cfg = tiny(kind, reg_weight=0.5, entropy_margin=margin, learn_alpha=learn, gated=True)
    params = make_parameters(cfg, seed, np.float64)
    images, labels = make_batch(cfg, seed + 1, np.float64)
    loss, grads = nb.loss_and_grad(params, images, labels, cfg)
    with jax.enable_x64(True):
        jax_loss, jax_grads = jb.loss_and_grad(params, images, labels, cfg)
        jax_grads = flatten(jax.tree.map(np.asarray, jax_grads))
    assert relative_error(jax_loss, loss) <= 1e-10
    for path, leaf in flatten(grads).items():
        assert relative_error(jax_grads[path], leaf) <= 1e-8, path
