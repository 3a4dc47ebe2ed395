"""Property-test an independent relu attention, 15 lines of plain jax.numpy, against reluattn's reference.

Run it with `pytest docs/examples/test_relu_attention_properties.py` (needs `pip install "reluattn[testing]"`).
"""

import math

import jax
import jax.numpy as jnp

import reluattn.testing as rt


def relu_attention(q, k, v, attn_cfg, causal=False, causal_length="per_query"):
    """scale * n^-alpha * relu(q.k / sqrt(Dh)) @ v; q (B, T, H, Dh), k and v (B, L, H, Dh)."""
    num_queries, num_keys = q.shape[1], k.shape[1]
    scores = jnp.einsum("bthd,blhd->bhtl", q, k) / math.sqrt(q.shape[-1])  # (B, H, T, L)
    weights = jax.nn.relu(scores)  # jax.nn.relu: relu'(0) = 0, as the reference (jnp.maximum gives 1/2)
    counts = jnp.full((num_queries, 1), num_keys, scores.dtype)  # n: the keys each query sees
    if causal:  # query i sees keys j <= i
        visible = jnp.arange(num_keys)[None, :] <= jnp.arange(num_queries)[:, None]  # (T, L)
        weights = jnp.where(visible, weights, 0.0)
        if causal_length == "per_query":
            counts = jnp.arange(1, num_queries + 1, dtype=scores.dtype)[:, None]
    weights = attn_cfg.scale * counts ** -attn_cfg.alpha * weights  # (B, H, T, L)
    return jnp.einsum("bhtl,blhd->bthd", weights, v)  # (B, T, H, Dh)


# The whole property suite, one line per property.
test_forward = rt.attention_property_test(relu_attention, kinds=["relu"], causal=True, max_examples=10)
test_cross_attention = rt.attention_property_test(relu_attention, kinds=["relu"], max_examples=10,
                                                  shapes=rt.attention_shapes(cross_attention=True))
test_gradients = rt.attention_grad_property_test(relu_attention, kinds=["relu"], causal=True, max_examples=10)
test_bfloat16 = rt.attention_property_test(relu_attention, kinds=["relu"], dtype="bfloat16", max_examples=10)
