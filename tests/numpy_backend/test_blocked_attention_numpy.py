"""NumPy blocked attention equals the dense core (through the testing kit, reluattn.testing), and causal
masks mean what they say."""

import numpy as np
import pytest

import reluattn.testing as rt
from gradcheck import check_layer
from reluattn.config import ATTENTION_KINDS, AttentionConfig, ViTConfig
from reluattn.numpy_backend import apply, loss_and_grad
from reluattn.numpy_backend.long_sequences import (blocked_attention_forward, causal_attention_weights_backward,
                                                   causal_attention_weights_forward)
from reluattn.numpy_backend.multihead_attention import attention, heads_attention_backward, heads_attention_forward
from reluattn.params import flatten, init_params

POINT_WISE_KINDS = [kind for kind in ATTENTION_KINDS if kind != "softmax"]


def causal_attention_forward(q, k, v, attn_cfg, causal_length):
    """The dense core with causal weights."""
    def weights_forward(scores, attn_cfg):
        return causal_attention_weights_forward(scores, attn_cfg, causal_length)
    return heads_attention_forward(q, k, v, attn_cfg, weights_forward)


def causal_attention_backward(dout, cache, attn_cfg):
    return heads_attention_backward(dout, cache, attn_cfg, causal_attention_weights_backward)


def qkv(seed, batch, length, heads, head_dim, spread=1.5, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return tuple((spread * rng.normal(size=(batch, length, heads, head_dim))).astype(dtype) for _ in range(3))


def numpy_blocked(q, k, v, attn_cfg, **options):
    return attention(q, k, v, attn_cfg, impl="blocked", **options)


def test_blocked_equals_dense_in_float64():
    # The kit's check_blocked against the dense core: block sizes above, below and not dividing the length
    # (the last block is shorter), causal masks of both lengths. The float64 tolerance is named, so a result
    # that is not float64 fails it.
    rt.check_blocked(numpy_blocked, dtype=np.float64, tolerance="float64", max_examples=60)


# float32 inputs, float32 results within the float32 rounding bound of the exact (float64) answer.
test_blocked_equals_dense_in_float32 = rt.blocked_property_test(numpy_blocked, max_examples=40)


def test_blocked_follows_the_input_dtype_and_config_block_size():
    q, k, v = qkv(0, 2, 9, 2, 4, dtype=np.float32)
    for kind in ("relu", "softmax", "sigmoid_bias"):
        attn_cfg = AttentionConfig(kind=kind, impl="blocked", block_size=4)
        for causal in (False, True):
            out = attention(q, k, v, attn_cfg, causal=causal)  # impl and block size from the config
            assert out.dtype == np.float32
            np.testing.assert_allclose(out, attention(q, k, v, attn_cfg, impl="dense", causal=causal), rtol=2e-5,
                                       atol=1e-6)


def test_softmax_online_update_survives_large_scores():
    # exp(1000) overflows; the running maximum keeps every exponent <= 0.
    q, k, v = qkv(1, 1, 12, 1, 2, spread=30.0)
    blocked = attention(q, k, v, AttentionConfig(kind="softmax"), impl="blocked", block_size=5)
    assert np.all(np.isfinite(blocked))
    np.testing.assert_allclose(blocked, attention(q, k, v, AttentionConfig(kind="softmax")), rtol=1e-10)


@pytest.mark.parametrize("kind", ATTENTION_KINDS)
@pytest.mark.parametrize("impl", ["dense", "blocked"])
def test_causal_per_query_is_attention_over_the_prefix(kind, impl):
    # Query i with causal_length="per_query" is exactly non-causal attention over keys 0..i (L = i + 1).
    attn_cfg = AttentionConfig(kind=kind, alpha=0.8, scale=1.3)
    q, k, v = qkv(2, 2, 7, 2, 3)
    causal = attention(q, k, v, attn_cfg, impl=impl, block_size=3, causal=True, causal_length="per_query")
    for i in range(7):
        prefix = attention(q[:, :i + 1], k[:, :i + 1], v[:, :i + 1], attn_cfg)
        np.testing.assert_allclose(causal[:, i], prefix[:, i], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("kind", ATTENTION_KINDS)
@pytest.mark.parametrize("impl", ["dense", "blocked"])
def test_causal_global_keeps_the_full_length(kind, impl):
    # "global": the future keys' values are dropped, but L stays the full length (softmax: just masked).
    attn_cfg = AttentionConfig(kind=kind, alpha=0.8, scale=1.3)
    q, k, v = qkv(3, 2, 7, 2, 3)
    causal = attention(q, k, v, attn_cfg, impl=impl, block_size=3, causal=True, causal_length="global")
    for i in range(7):
        if kind == "softmax":
            expected = attention(q[:, :i + 1], k[:, :i + 1], v[:, :i + 1], attn_cfg)[:, i]
        else:
            # A point-wise read with zero future values is the causal read with the global L.
            expected = attention(q, k, np.where(np.arange(7)[None, :, None, None] <= i, v, 0.0), attn_cfg)[:, i]
        np.testing.assert_allclose(causal[:, i], expected, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("kind", ["softmax", "gelu", "relu2", "sigmoid_bias"])
@pytest.mark.parametrize("causal_length", ["per_query", "global"])
def test_causal_dense_backward_matches_finite_differences(kind, causal_length):
    # Smooth kinds (relu2 is C1), so central differences need no care about kinks.
    attn_cfg = AttentionConfig(kind=kind, alpha=0.7, scale=1.2)
    q, k, v = (x.transpose(0, 2, 1, 3).copy() for x in qkv(4, 2, 5, 2, 3))  # heads first, contiguous
    cache = causal_attention_forward(q, k, v, attn_cfg, causal_length)[2]

    def backward(dout):
        dq, dk, dv = causal_attention_backward(dout, cache, attn_cfg)
        return {"q": dq, "k": dk, "v": dv}, None

    check_layer(lambda i, p: causal_attention_forward(i["q"], i["k"], i["v"], attn_cfg, causal_length)[0], backward,
                {"q": q, "k": k, "v": v})


def test_causal_weights_hide_the_future_and_rows_use_their_own_length():
    q, k, v = qkv(5, 1, 6, 1, 2)
    heads_first = [x.transpose(0, 2, 1, 3) for x in (q, k, v)]
    _, weights, _ = causal_attention_forward(*heads_first, AttentionConfig(kind="identity", alpha=1.0),
                                             "per_query")
    scores = heads_first[0] @ heads_first[1].swapaxes(-1, -2) / np.sqrt(2.0)  # (1, 1, 6, 6)
    expected = np.tril(scores) / np.arange(1, 7)[:, None]  # row i divided by its i + 1 visible keys
    np.testing.assert_allclose(weights, expected, rtol=1e-13, atol=1e-15)


def test_blocked_reference_walks_blocks_of_the_given_size():
    # One block holding every key, and blocks of one key, give the same output.
    q, k, v = (x.transpose(0, 2, 1, 3) for x in qkv(6, 1, 10, 2, 3))
    attn_cfg = AttentionConfig(kind="softmax")
    whole = blocked_attention_forward(q, k, v, attn_cfg, block_size=10)
    single = blocked_attention_forward(q, k, v, attn_cfg, block_size=1)
    np.testing.assert_allclose(whole, single, rtol=1e-12)


@pytest.mark.parametrize("bad, message", [
    (dict(impl="sparse"), "impl must be one of"),
    (dict(block_size=0), "block_size must be a positive int"),
    (dict(block_size=2.5), "block_size must be a positive int"),
    (dict(causal="yes"), "causal must be True or False"),
    (dict(causal=True, causal_length="local"), "causal_length must be one of"),
])
def test_bad_options_are_clear_errors(bad, message):
    q, k, v = qkv(7, 1, 4, 1, 2)
    with pytest.raises(ValueError, match=message):
        attention(q, k, v, AttentionConfig(), **bad)


# ---------------------------------------------------------------------------------------------- the model

def tiny(kind, impl, block_size=None, qk_norm=False, gated=False):
    return ViTConfig(image_size=8, patch_size=2, dim=12, depth=2, heads=3, mlp_dim=16, num_classes=4,
                     attention=AttentionConfig(kind=kind, impl=impl, block_size=block_size, qk_norm=qk_norm,
                                               gated=gated))


@pytest.mark.parametrize("kind, qk_norm, gated", [("relu", False, False), ("softmax", True, False),
                                                  ("sigmoid_bias", False, True), ("gelu", True, True)])
def test_model_with_blocked_attention_equals_dense(kind, qk_norm, gated):
    # The NumPy model runs the dense core whatever the impl (a memory strategy of the JAX backend): a config
    # made for the JAX blocked kernel gives the same values here.
    dense_cfg = tiny(kind, "dense", qk_norm=qk_norm, gated=gated)
    blocked_cfg = tiny(kind, "blocked", block_size=5, qk_norm=qk_norm, gated=gated)  # 17 tokens: 4 blocks
    params = init_params(dense_cfg, seed=1, dtype=np.float64)
    rng = np.random.default_rng(0)
    images, labels = rng.normal(size=(3, 8, 8, 3)), np.array([0, 3, 1])
    np.testing.assert_allclose(apply(params, images, blocked_cfg), apply(params, images, dense_cfg), rtol=1e-11)
    dense_loss, dense_grads = loss_and_grad(params, images, labels, dense_cfg)
    blocked_loss, blocked_grads = loss_and_grad(params, images, labels, blocked_cfg)
    assert blocked_loss == pytest.approx(dense_loss, rel=1e-12)
    for name, grad in flatten(dense_grads).items():
        np.testing.assert_allclose(flatten(blocked_grads)[name], grad, rtol=1e-9, atol=1e-13, err_msg=name)


def test_model_with_blocked_attention_still_returns_the_weights():
    cfg = tiny("relu", "blocked", block_size=4)
    params = init_params(cfg, seed=2, dtype=np.float64)
    images = np.random.default_rng(1).normal(size=(2, 8, 8, 3))
    logits, weights = apply(params, images, cfg, return_attention=True)
    dense_logits, dense_weights = apply(params, images, tiny("relu", "dense"), return_attention=True)
    np.testing.assert_allclose(logits, dense_logits, rtol=1e-12)
    assert len(weights) == 2 and all(w.shape == (2, 3, 17, 17) for w in weights)
    for w, expected in zip(weights, dense_weights):
        np.testing.assert_allclose(w, expected, rtol=1e-12)
