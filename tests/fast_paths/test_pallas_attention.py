"""The optional Pallas kernel (jax_backend/fast/pallas_attention.py), run in Pallas's interpret mode on the CPU:
output and gradients (jax.vjp) equal the float64 NumPy reference and its hand-written backward, through the
testing kit (reluattn.testing), for every kind it supports; bad calls are refused."""

import jax.numpy as jnp
import pytest
from hypothesis import strategies as st

import reluattn.testing as rt
from reluattn.config import AttentionConfig
from reluattn.jax_backend.fast.pallas_attention import KINDS, pallas_attention

SHAPES = rt.attention_shapes(batch=2, heads=2, lengths=32, head_dims=16)  # what the kernel supports: L = 32, Dh 16


def kernel(q, k, v, attn_cfg, *, block_q=16, block_k=32):
    """pallas_attention in interpret mode, in the testing kit's signature."""
    return pallas_attention(q, k, v, attn_cfg, block_q=block_q, block_k=block_k, interpret=True)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_pallas_equals_the_reference_for_every_kind(kind):
    inputs = rt.make_inputs(rt.AttentionShape(batch=2, queries=32, keys=32, heads=2, head_dim=16), "normal", seed=0)
    case = rt.AttentionCase(inputs, AttentionConfig(kind=kind), extra=(("block_q", 16), ("block_k", 32)))
    rt.compare_attention(kernel, case, grad=True, tolerance="float32")


def test_pallas_equals_the_reference_over_drawn_options():
    # The kit's drawn inputs (large scores, scores on the kink, all-negative rows too), alpha in [0, 2],
    # scales in [0.5, 2], tiles of 16 or 32 queries and keys; few examples: interpreted kernels are slow.
    configs = rt.attention_configs(sorted(KINDS), scales=st.floats(0.5, 2.0))
    rt.check_attention_grad(kernel, configs=configs, shapes=SHAPES, options={"block_q": [16, 32], "block_k": [16, 32]},
                            tolerance="float32", max_examples=6)


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
