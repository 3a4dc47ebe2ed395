"""The optional Pallas kernel (jax_backend/fast/pallas_attention.py), run in Pallas's interpret mode on the CPU:
output and gradients equal the dense path, for every kind it supports; bad calls are refused."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import reluattn.jax_backend as jb
from reluattn.config import AttentionConfig
from reluattn.jax_backend.fast.pallas_attention import KINDS, pallas_attention


def relative_error(a, b):
    return float(jnp.linalg.norm(a - b) / jnp.linalg.norm(b))


def check_equals_dense(kind, alpha, scale, blocks, seed):
    rng = np.random.default_rng(seed)
    q, k, v, out_grad = (jnp.asarray(rng.normal(size=(2, 32, 2, 16)), jnp.float32) for _ in range(4))
    cfg = AttentionConfig(kind=kind, alpha=alpha, scale=scale)
    fast, fast_pullback = jax.vjp(
        lambda q, k, v: pallas_attention(q, k, v, cfg, block_q=blocks[0], block_k=blocks[1], interpret=True),
        q, k, v)
    dense, dense_pullback = jax.vjp(lambda q, k, v: jb.attention(q, k, v, cfg, impl="dense"), q, k, v)
    assert relative_error(fast, dense) < 1e-5
    for name, got, expected in zip("qkv", fast_pullback(out_grad), dense_pullback(out_grad)):
        assert relative_error(got, expected) < 1e-5, name


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_pallas_equals_dense_for_every_kind(kind):
    check_equals_dense(kind, alpha=1.0, scale=1.0, blocks=(16, 32), seed=0)


# Shrinking would re-run the interpreted kernels many times over; a failing draw is reported as drawn.
@settings(deadline=None, max_examples=6, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(kind=st.sampled_from(sorted(KINDS)), alpha=st.floats(0.0, 2.0), scale=st.floats(0.5, 2.0),
       blocks=st.sampled_from([(16, 16), (16, 32), (32, 16)]), seed=st.integers(0, 2**16))
def test_pallas_equals_dense_over_drawn_options(kind, alpha, scale, blocks, seed):
    check_equals_dense(kind, alpha, scale, blocks, seed)


@pytest.mark.parametrize("call, message", [
    (dict(cfg=AttentionConfig(kind="softmax")), "supports the kinds"),
    (dict(shape=(1, 32, 2, 12)), "power of two"),
    (dict(block_q=24), "multiple of block_q"),
    (dict(k_shape=(1, 16, 2, 16)), "share one"),
])
def test_pallas_refuses_what_it_does_not_support(call, message):
    shape = call.get("shape", (1, 32, 2, 16))
    q = v = jnp.zeros(shape, jnp.float32)
    k = jnp.zeros(call.get("k_shape", shape), jnp.float32)
    with pytest.raises(ValueError, match=message):
        pallas_attention(q, k, v, call.get("cfg", AttentionConfig(kind="relu")), block_q=call.get("block_q", 16),
                         block_k=16, interpret=True)
