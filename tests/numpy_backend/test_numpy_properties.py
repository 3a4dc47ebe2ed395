"""Properties of the NumPy attention that hold for any shapes and seeds (Hypothesis draws them)."""

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from reluattn.config import ATTENTION_KINDS, KINDS_WITH_SIGNED_WEIGHTS, AttentionConfig, ViTConfig
from reluattn.numpy_backend.attention_weights import attention_weights_forward
from reluattn.numpy_backend.layers import softmax
from reluattn.numpy_backend.multihead_attention import self_attention_forward
from reluattn.params import init_params

NON_NEGATIVE_KINDS = [kind for kind in ATTENTION_KINDS if kind not in KINDS_WITH_SIGNED_WEIGHTS + ("softmax",)]
EXPECTED_RELU_OF_NORMAL = 1.0 / math.sqrt(2.0 * math.pi)  # E[relu(z)], z ~ N(0, 1): 0.3989...

seeds = st.integers(0, 2 ** 32 - 1)
small = st.integers(1, 6)


def random_scores(seed, shape, spread):
    return np.random.default_rng(seed).normal(0.0, spread, size=shape)


@settings(max_examples=40, deadline=None)
@given(seed=seeds, batch=small, heads=small, queries=small, keys=st.integers(1, 40),
       spread=st.sampled_from([0.1, 1.0, 30.0]))
def test_softmax_rows_sum_to_one(seed, batch, heads, queries, keys, spread):
    scores = random_scores(seed, (batch, heads, queries, keys), spread)
    for weights in (softmax(scores),
                    attention_weights_forward(scores, AttentionConfig(kind="softmax", alpha=2.0, scale=3.0))[0]):
        assert np.all(weights >= 0)
        np.testing.assert_allclose(weights.sum(axis=-1), 1.0, rtol=1e-12)


@settings(max_examples=60, deadline=None)
@given(seed=seeds, kind=st.sampled_from(NON_NEGATIVE_KINDS), keys=st.integers(1, 40),
       alpha=st.floats(0.0, 2.0), scale=st.floats(0.01, 10.0), spread=st.sampled_from([0.1, 1.0, 30.0]))
def test_point_wise_weights_of_non_negative_kinds_are_non_negative(seed, kind, keys, alpha, scale, spread):
    scores = random_scores(seed, (2, 3, 4, keys), spread)
    weights = attention_weights_forward(scores, AttentionConfig(kind=kind, alpha=alpha, scale=scale))[0]
    assert np.all(weights >= 0) and np.all(np.isfinite(weights))


@settings(max_examples=40, deadline=None)
@given(seed=seeds, kind=st.sampled_from(ATTENTION_KINDS), qk_norm=st.booleans(), gated=st.booleans(),
       batch=st.integers(1, 3), tokens=st.integers(2, 9), heads=st.integers(1, 3), head_dim=st.integers(1, 4))
def test_self_attention_is_permutation_equivariant(seed, kind, qk_norm, gated, batch, tokens, heads, head_dim):
    # Without position embeddings nothing tells tokens apart: permuting them permutes the output.
    attn_cfg = AttentionConfig(kind=kind, qk_norm=qk_norm, gated=gated)
    cfg = ViTConfig(dim=heads * head_dim, heads=heads, depth=1, attention=attn_cfg)
    params = init_params(cfg, seed=seed % 1000, dtype=np.float64)["blocks"][0]["attn"]
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, tokens, cfg.dim))
    order = rng.permutation(tokens)
    out, weights, _ = self_attention_forward(x, params, attn_cfg, heads)
    permuted_out, permuted_weights, _ = self_attention_forward(x[:, order], params, attn_cfg, heads)
    np.testing.assert_allclose(permuted_out, out[:, order], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(permuted_weights, weights[:, :, order][:, :, :, order], rtol=1e-9, atol=1e-12)


def mean_row_sum(alpha, length, seed):
    """Mean over rows of sum_j w_ij for relu weights at initialisation, qk-norm on, random input."""
    attn_cfg = AttentionConfig(kind="relu", alpha=alpha, qk_norm=True)
    cfg = ViTConfig(dim=128, heads=2, depth=1, attention=attn_cfg)  # Dh = 64, as in the paper's models
    params = init_params(cfg, seed=seed % 1000, dtype=np.float64)["blocks"][0]["attn"]
    batch = max(1, 4096 // (length * length))  # enough weights that the mean is steady at every L
    x = np.random.default_rng(seed).normal(size=(batch, length, cfg.dim))
    weights = self_attention_forward(x, params, attn_cfg, cfg.heads)[1]  # (B, H, L, L)
    return weights.sum(axis=-1).mean()


@settings(max_examples=15, deadline=None)
@given(seed=seeds, length=st.integers(8, 128))
def test_relu_over_length_keeps_row_sums_near_one_over_sqrt_two_pi(seed, length):
    # qk-norm makes the scores ~N(0, 1), so relu / L rows sum to E[relu(z)] whatever L is (Wortsman et al.),
    # while plain relu (alpha = 0) sums L of them: its rows grow in proportion to L.
    assert abs(mean_row_sum(1.0, length, seed) - EXPECTED_RELU_OF_NORMAL) < 0.05
    plain = mean_row_sum(0.0, length, seed)
    assert abs(plain / length - EXPECTED_RELU_OF_NORMAL) < 0.05
    assert plain > 0.3 * length
