"""Every NumPy layer's backward against central finite differences in float64 (relative error <= 1e-6),
plus the exact values the math conventions fix (GELU's formula, relu's derivative at 0, patch order)."""

import numpy as np
import pytest

from gradcheck import check_layer, relative_error
from reluattn.config import ATTENTION_KINDS, AttentionConfig
from reluattn.numpy_backend import layers
from reluattn.numpy_backend.attention_weights import (KINKS, POINTWISE, attention_weights_backward,
                                                      attention_weights_forward, pointwise_derivative)
from reluattn.numpy_backend.mlp import mlp_backward, mlp_forward
from reluattn.numpy_backend.model import patchify
from reluattn.numpy_backend.multihead_attention import (attention, heads_attention_backward, heads_attention_forward,
                                                        self_attention_backward, self_attention_forward)


def normal(seed, *shape, scale=1.0):
    return scale * np.random.default_rng(seed).normal(size=shape)


def away_from_kinks(seed, *shape, kinks=(0.0,), margin=0.05, low=-3.0, high=3.0):
    """Uniform values in [low, high] at least `margin` from every kink, so finite differences never
    straddle one."""
    values = np.random.default_rng(seed).uniform(low, high, size=shape)
    for kink in kinks:
        near = np.abs(values - kink) < margin
        values[near] = kink + np.where(values[near] >= kink, margin, -margin) * 2
    return values


def dense_params(seed, n_in, n_out):
    return {"w": normal(seed, n_in, n_out), "b": normal(seed + 1, n_out)}


# ------------------------------------------------------------------------------------------ layers

def test_dense_backward():
    x = normal(0, 2, 3, 5)
    params = dense_params(1, 5, 4)
    cache = layers.dense_forward(x, params)[1]

    def backward(dout):
        dx, grads = layers.dense_backward(dout, cache)
        return {"x": dx}, grads

    check_layer(lambda i, p: layers.dense_forward(i["x"], p)[0], backward, {"x": x}, params)


@pytest.mark.parametrize("with_bias", [True, False])
def test_layernorm_backward(with_bias):
    x = normal(0, 2, 3, 6, scale=2.0) + 0.5
    params = {"scale": 1 + normal(1, 6, scale=0.3)}
    if with_bias:
        params["bias"] = normal(2, 6)

    def backward(dout):
        dx, grads = layers.layernorm_backward(dout, layers.layernorm_forward(x, params)[1])
        return {"x": dx}, grads if with_bias else {"scale": grads["scale"]}

    check_layer(lambda i, p: layers.layernorm_forward(i["x"], p)[0], backward, {"x": x}, params)


def test_layernorm_normalises_with_biased_variance_and_eps():
    x = normal(0, 4, 7, scale=3.0)
    out, _ = layers.layernorm_forward(x, {"scale": np.ones(7), "bias": np.zeros(7)})
    expected = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-6)  # np.var is biased
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name, kinks", [("gelu", ()), ("relu", (0.0,)), ("silu", ()), ("softmax", ())])
def test_activation_backward(name, kinks):
    forward, backward = getattr(layers, f"{name}_forward"), getattr(layers, f"{name}_backward")
    x = away_from_kinks(3, 2, 3, 5, kinks=kinks)
    check_layer(lambda i, p: forward(i["x"])[0], lambda d: ({"x": backward(d, forward(x)[1])}, None), {"x": x})


def test_gelu_is_the_tanh_approximation_and_relu_has_zero_derivative_at_zero():
    x = np.array([-2.0, -0.5, 0.0, 0.7, 3.0])
    expected = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(layers.gelu(x), expected, rtol=1e-15)
    assert layers.relu_backward(np.ones(3), layers.relu_forward(np.array([-1.0, 0.0, 1.0]))[1]).tolist() == [0, 0, 1]


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("soft", [False, True])
def test_cross_entropy_backward(smoothing, soft):
    logits = normal(0, 4, 5, scale=2.0)
    labels = np.random.default_rng(1).dirichlet(np.ones(5), size=4) if soft else np.array([0, 4, 2, 2])
    targets = layers.targets_from_labels(labels, 5, smoothing)
    cache = layers.cross_entropy_forward(logits, targets)[1]
    check_layer(lambda i, p: np.array(layers.cross_entropy_forward(i["z"], targets)[0]),
                lambda d: ({"z": layers.cross_entropy_backward(float(d), cache)}, None), {"z": logits})


def test_cross_entropy_value_with_label_smoothing():
    logits = normal(0, 3, 4)
    labels = np.array([1, 0, 3])
    targets = (1 - 0.2) * np.eye(4)[labels] + 0.2 / 4
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    loss, _ = layers.cross_entropy_forward(logits, layers.targets_from_labels(labels, 4, 0.2))
    assert isinstance(loss, float)
    assert loss == pytest.approx(-(targets * log_probs).sum(-1).mean(), rel=1e-12)


def test_patches_are_row_major_and_flattened_row_col_channel():
    images = np.arange(2 * 8 * 8 * 3, dtype=np.float64).reshape(2, 8, 8, 3)
    patches = patchify(images, 4)  # (2, 4, 48)
    for index, (row, col) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
        expected = images[1, 4 * row:4 * row + 4, 4 * col:4 * col + 4, :].reshape(-1)
        np.testing.assert_array_equal(patches[1, index], expected)


# ------------------------------------------------------------------------------- attention weights

def scores_for(kind, seed, shape=(2, 2, 3, 5)):
    # Keep finite differences off the kinks, with scores on both sides of each (relu6: above 6 as well).
    kinks = KINKS.get(kind, ())
    if not kinks:
        return away_from_kinks(seed, *shape, kinks=())
    return away_from_kinks(seed, *shape, kinks=kinks, low=min(kinks) - 2.0, high=max(kinks) + 2.0)


def test_the_kinks_are_where_h_is_not_smooth():
    # KINKS is complete: on a fine grid, h' of every point-wise kind jumps or bends only at its listed kinks.
    step = 1e-3
    grid = np.linspace(-10.0, 10.0, 20001)  # (G,), spacing `step`
    for kind in POINTWISE:
        second = np.diff(pointwise_derivative(kind, grid)) / step  # (G - 1,), ~h'' between grid points
        rough = grid[1:-1][np.abs(np.diff(second)) > 0.5]  # h'' changes by far more than a smooth h allows
        listed = np.asarray(KINKS.get(kind, ()))
        near = [x for x in rough if not (listed.size and np.min(np.abs(listed - x)) < 2 * step)]
        assert not near, f"{kind}: h is not smooth near {sorted(set(np.round(near, 2)))}; add it to KINKS"
        missed = [kink for kink in listed if not (rough.size and np.min(np.abs(rough - kink)) < 2 * step)]
        assert not missed, f"{kind}: KINKS lists {missed}, where h is smooth"


@pytest.mark.parametrize("kind", ATTENTION_KINDS)
@pytest.mark.parametrize("alpha, scale", [(1.0, 1.0), (0.5, 1.7)])
def test_attention_weights_backward(kind, alpha, scale):
    cfg = AttentionConfig(kind=kind, alpha=alpha, scale=scale)
    scores = scores_for(kind, 4)
    cache = attention_weights_forward(scores, cfg)[1]
    check_layer(lambda i, p: attention_weights_forward(i["s"], cfg)[0],
                lambda d: ({"s": attention_weights_backward(d, cache, cfg)}, None), {"s": scores})


def test_relu_kinks_have_zero_derivative():
    at_kinks = np.array([0.0, 6.0])
    assert pointwise_derivative("relu", at_kinks).tolist() == [0.0, 1.0]
    assert pointwise_derivative("relu6", at_kinks).tolist() == [0.0, 0.0]
    assert pointwise_derivative("relu6", np.array([3.0, 7.0])).tolist() == [1.0, 0.0]


def test_weight_formulas():
    scores = normal(0, 1, 2, 3, 8)
    length = 8
    relu = attention_weights_forward(scores, AttentionConfig(kind="relu", alpha=1.0, scale=2.0))[0]
    np.testing.assert_allclose(relu, 2.0 * np.maximum(scores, 0) / length, rtol=1e-15)
    bias = attention_weights_forward(scores, AttentionConfig(kind="sigmoid_bias", alpha=0.3, scale=1.5))[0]
    np.testing.assert_allclose(bias, 1.5 / (1 + np.exp(-(scores - np.log(length)))), rtol=1e-13)
    soft = attention_weights_forward(scores, AttentionConfig(kind="softmax", alpha=2.0, scale=3.0))[0]
    np.testing.assert_allclose(soft, np.exp(scores) / np.exp(scores).sum(-1, keepdims=True), rtol=1e-13)


# ------------------------------------------------------------------------------------ attention layers

@pytest.mark.parametrize("kind", ["softmax", "relu", "sigmoid_bias"])
def test_core_attention_backward(kind):
    cfg = AttentionConfig(kind=kind)
    q, k, v = (normal(seed, 2, 2, 5, 3, scale=1.5) for seed in (5, 6, 7))  # (B, H, L, Dh)
    cache = heads_attention_forward(q, k, v, cfg)[2]

    def backward(dout):
        dq, dk, dv = heads_attention_backward(dout, cache, cfg)
        return {"q": dq, "k": dk, "v": dv}, None

    check_layer(lambda i, p: heads_attention_forward(i["q"], i["k"], i["v"], cfg)[0], backward,
                {"q": q, "k": k, "v": v})


def test_core_attention_matches_a_loop_over_heads():
    q, k, v = (normal(seed, 2, 5, 3, 4) for seed in (1, 2, 3))
    cfg = AttentionConfig(kind="relu", alpha=1.0)
    out = attention(q, k, v, cfg)
    for h in range(3):
        scores = q[:, :, h] @ k[:, :, h].transpose(0, 2, 1) / 2.0  # sqrt(Dh) = 2
        np.testing.assert_allclose(out[:, :, h], np.maximum(scores, 0) / 5 @ v[:, :, h], rtol=1e-12)


def attention_params(seed, dim, head_dim, qk_norm, gated):
    params = {"qkv": dense_params(seed, dim, 3 * dim), "proj": dense_params(seed + 2, dim, dim)}
    if qk_norm:
        params["q_norm"] = {"scale": 1 + normal(seed + 4, head_dim, scale=0.3)}
        params["k_norm"] = {"scale": 1 + normal(seed + 5, head_dim, scale=0.3)}
    if gated:
        params["gate"] = dense_params(seed + 6, dim, dim)
    return params


@pytest.mark.parametrize("qk_norm", [False, True])
@pytest.mark.parametrize("gate", [None, "silu", "identity"])  # no gate, or its activation (gate_activation)
@pytest.mark.parametrize("kind", ["softmax", "relu", "gelu"])
def test_self_attention_backward(kind, qk_norm, gate):
    gated = gate is not None
    cfg = AttentionConfig(kind=kind, qk_norm=qk_norm, gated=gated, gate_activation=gate or "silu")
    heads, dim = 2, 6
    x = normal(0, 2, 4, dim)
    params = attention_params(1, dim, dim // heads, qk_norm, gated)
    cache = self_attention_forward(x, params, cfg, heads)[2]

    def backward(dout):
        dx, grads = self_attention_backward(dout, cache, cfg, heads)
        return {"x": dx}, grads

    check_layer(lambda i, p: self_attention_forward(i["x"], p, cfg, heads)[0], backward, {"x": x}, params)


def test_self_attention_heads_use_their_column_blocks():
    # Head h reads columns h*Dh:(h+1)*Dh of each of q, k and v; the core on those slices must match.
    heads, dim, head_dim = 2, 6, 3
    cfg = AttentionConfig(kind="relu")
    x = normal(0, 2, 4, dim)
    params = attention_params(1, dim, head_dim, False, False)
    params["proj"] = {"w": np.eye(dim), "b": np.zeros(dim)}  # so the output is the concatenated heads
    out = self_attention_forward(x, params, cfg, heads)[0]
    qkv = x @ params["qkv"]["w"] + params["qkv"]["b"]
    q, k, v = (qkv[..., part * dim:(part + 1) * dim].reshape(2, 4, heads, head_dim) for part in range(3))
    np.testing.assert_allclose(out, attention(q, k, v, cfg).reshape(2, 4, dim), rtol=1e-12)


@pytest.mark.parametrize("activation", ["gelu", "relu", "softmax", "softmax_ln"])
def test_mlp_backward(activation):
    dim, hidden = 4, 6
    x = normal(0, 2, 3, dim)
    params = {"fc1": dense_params(1, dim, hidden), "fc2": dense_params(3, hidden, dim)}
    if activation == "softmax_ln":
        params["ln"] = {"scale": 1 + normal(5, dim, scale=0.3), "bias": normal(6, dim)}
    cache = mlp_forward(x, params, activation)[1]

    def backward(dout):
        dx, grads = mlp_backward(dout, cache, activation)
        return {"x": dx}, grads

    check_layer(lambda i, p: mlp_forward(i["x"], p, activation)[0], backward, {"x": x}, params)


def test_relative_error_is_scale_free_and_catches_a_flipped_sign():
    g = normal(0, 10)
    assert relative_error(g, g * (1 + 1e-9)) < 1e-8
    flipped = g.copy()
    flipped[3] *= -1
    assert relative_error(g, flipped) > 1e-2
