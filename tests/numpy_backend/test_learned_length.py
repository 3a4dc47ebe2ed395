"""The learned length factor (AttentionConfig.learn_alpha / learn_scale): w = scale * exp(beta_h) *
L^(-alpha_h) * h(s) with per-block, per-head parameters attn.length.alpha and attn.length.log_scale.
Parameters and initialisation, the NumPy backward against finite differences in float64 (and a broken one
failing), the fixed one staying fixed, ReLUFormer's scaled ReLU at initialisation, and the refusals
(the JAX backend equal to the NumPy one: tests/parity/test_learned_length_and_gate.py)."""

import math

import jax
import numpy as np
import pytest

import reluattn as ra
from reluattn.config import AttentionConfig, ViTConfig
from reluattn.numpy_backend import attention_weights, multihead_attention
from reluattn.numpy_backend.attention_weights import learned_attention_weights_forward
from reluattn.params import decay_mask, init_params, learned_length, param_shapes
from reluattn.testing import make_batch, make_parameters
from test_numpy_model import check_model_gradients

nb, jb = ra.backend("numpy"), ra.backend("jax")


def tiny(kind="relu", **attention):
    return ViTConfig(image_size=8, patch_size=4, channels=3, num_classes=3, dim=8, depth=2, heads=2, mlp_dim=12,
                     attention=AttentionConfig(kind=kind, **attention))


@pytest.mark.parametrize("learn_alpha, learn_scale", [(True, False), (False, True), (True, True)])
def test_parameters_exist_start_at_the_fixed_factor_and_are_not_decayed(learn_alpha, learn_scale):
    cfg = tiny(alpha=0.75, learn_alpha=learn_alpha, learn_scale=learn_scale)
    assert param_shapes(cfg)["blocks"][1]["attn"]["length"] == {"alpha": (2,), "log_scale": (2,)}
    params = init_params(cfg, seed=0, dtype=np.float64)
    for block in params["blocks"]:
        np.testing.assert_array_equal(block["attn"]["length"]["alpha"], [0.75, 0.75])
        np.testing.assert_array_equal(block["attn"]["length"]["log_scale"], [0.0, 0.0])
    assert not decay_mask(params)["blocks"][0]["attn"]["length"]["alpha"]
    assert not decay_mask(params)["blocks"][0]["attn"]["length"]["log_scale"]
    # At initialisation the learned factor is the fixed one: the same logits as without learning.
    fixed = tiny(alpha=0.75)
    images = np.random.default_rng(0).normal(size=(2, 8, 8, 3))
    fixed_params = {**params, "blocks": [{**block, "attn": {key: value for key, value in block["attn"].items()
                                                           if key != "length"}} for block in params["blocks"]]}
    np.testing.assert_allclose(nb.apply(params, images, cfg), nb.apply(fixed_params, images, fixed), rtol=1e-12)
    assert "length" not in param_shapes(fixed)["blocks"][0]["attn"]
    assert learned_length(fixed_params) is None
    values = learned_length(params)
    np.testing.assert_array_equal(values["alpha"], np.full((2, 2), 0.75))
    np.testing.assert_array_equal(values["log_scale"], np.zeros((2, 2)))


@pytest.mark.parametrize("learn_alpha, learn_scale", [(True, False), (False, True), (True, True)])
@pytest.mark.parametrize("kind", ["relu", "gelu", "sigmoid"])
def test_model_gradient_matches_finite_differences(kind, learn_alpha, learn_scale):
    """check_model_gradients moves every leaf (alpha and log_scale too) off its initial value."""
    cfg = tiny(kind, learn_alpha=learn_alpha, learn_scale=learn_scale, gated=True)
    if learn_alpha and learn_scale:
        check_model_gradients(cfg, seed=3)
        return
    # The one not learned has gradient 0: finite differences see the true derivative, so compare the rest.
    from test_numpy_model import random_params as numpy_random_params
    params = numpy_random_params(cfg, 3)
    images = np.random.default_rng(4).normal(size=(2, 8, 8, 3))
    grads = nb.loss_and_grad(params, images, np.array([0, 2]), cfg)[1]
    fixed = "log_scale" if learn_alpha else "alpha"
    for block in grads["blocks"]:
        np.testing.assert_array_equal(block["attn"]["length"][fixed], 0.0)
        assert np.all(block["attn"]["length"]["alpha" if learn_alpha else "log_scale"] != 0.0)
    both = cfg.replace(attention=cfg.attention.replace(learn_alpha=True, learn_scale=True))
    check_model_gradients(both, seed=3)
    both_grads = nb.loss_and_grad(params, images, np.array([0, 2]), both)[1]
    learned = "alpha" if learn_alpha else "log_scale"
    for block, both_block in zip(grads["blocks"], both_grads["blocks"]):
        np.testing.assert_array_equal(block["attn"]["length"][learned], both_block["attn"]["length"][learned])


def test_model_gradient_check_fails_when_the_length_backward_is_broken(monkeypatch):
    original = attention_weights.learned_length_backward

    def broken(dweights, cache, attn_cfg):
        grads = original(dweights, cache, attn_cfg)
        return {"alpha": grads["alpha"] * 2.0, "log_scale": grads["log_scale"]}
    monkeypatch.setattr(multihead_attention, "learned_length_backward", broken)
    with pytest.raises(AssertionError, match="relative errors over"):
        check_model_gradients(tiny(learn_alpha=True, learn_scale=True), seed=3)


def test_alpha_gradient_is_minus_log_length_times_the_log_scale_gradient():
    cfg = tiny(learn_alpha=True, learn_scale=True)
    params = make_parameters(cfg, 1, np.float64)
    images, labels = make_batch(cfg, 2, np.float64)
    grads = nb.loss_and_grad(params, images, labels, cfg)[1]
    for block in grads["blocks"]:
        np.testing.assert_allclose(block["attn"]["length"]["alpha"],
                                   -math.log(cfg.num_tokens) * block["attn"]["length"]["log_scale"], rtol=1e-12)


@pytest.mark.parametrize("backend", ["numpy", "jax"])
def test_the_fixed_one_stays_at_its_initial_value_while_training(backend):
    module = ra.backend(backend)
    cfg = tiny(alpha=0.5, learn_scale=True)
    params = init_params(cfg, seed=0)
    images, labels = make_batch(cfg, 1, np.float64)
    opt_cfg = ra.OptimizerConfig(learning_rate=0.05, total_steps=3, warmup_steps=0, weight_decay=0.1)
    state = module.init_optimizer(params, opt_cfg)
    for _ in range(3):
        params, state, _ = module.train_step(params, state, images.astype(np.float32), labels, cfg, opt_cfg)
    for block in params["blocks"]:
        np.testing.assert_array_equal(np.asarray(block["attn"]["length"]["alpha"]), 0.5)
        assert np.all(np.abs(np.asarray(block["attn"]["length"]["log_scale"])) > 1e-3)


def test_relu_former_scaled_relu_at_initialisation():
    """alpha 1/2, scale sqrt(2), learn_scale: at beta = 0 the weights are relu(s) / sqrt(L / 2), i.e.
    relu(s) / (gamma sqrt(L / 2)) with gamma = exp(-beta) = 1 (a secondary reading of Shen et al. 2023)."""
    attn_cfg = AttentionConfig(kind="relu", alpha=0.5, scale=math.sqrt(2), learn_scale=True)
    cfg = tiny(alpha=0.5, scale=math.sqrt(2), learn_scale=True)
    length = init_params(cfg, seed=0, dtype=np.float64)["blocks"][0]["attn"]["length"]
    scores = np.random.default_rng(0).normal(size=(2, 2, 5, 7))
    weights = learned_attention_weights_forward(scores, attn_cfg, length)[0]
    np.testing.assert_allclose(weights, np.maximum(scores, 0.0) / np.sqrt(7 / 2), rtol=1e-12)
    # A learned beta_h is -log gamma_h, head by head.
    gammas = np.array([0.5, 3.0])
    learned = {"alpha": length["alpha"], "log_scale": -np.log(gammas)}
    weights = learned_attention_weights_forward(scores, attn_cfg, learned)[0]
    expected = np.maximum(scores, 0.0) / (gammas[None, :, None, None] * np.sqrt(7 / 2))
    np.testing.assert_allclose(weights, expected, rtol=1e-12)
    with jax.enable_x64(True):
        jax_weights = jb.attention_weights.attention_weights(scores, attn_cfg, length=learned)
    np.testing.assert_allclose(np.asarray(jax_weights), expected, rtol=1e-10)


def test_refusals_name_the_option():
    for kind in ("softmax", "sigmoid_bias"):
        with pytest.raises(ValueError, match="learn_alpha / learn_scale need a kind that uses alpha and scale"):
            AttentionConfig(kind=kind, learn_alpha=True)
    q = np.zeros((1, 4, 2, 16))
    learned = AttentionConfig(learn_alpha=True)
    for backend in (nb, jb):
        with pytest.raises(ValueError, match="learned length factor"):
            backend.attention(q, q, q, learned)
    from reluattn.jax_backend.fast.pallas_attention import pallas_attention
    with pytest.raises(ValueError, match="learned length factor"):
        pallas_attention(q, q, q, learned, interpret=True)
