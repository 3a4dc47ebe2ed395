"""Attention for long sequences, off the ViT path: causal masks, and blocked attention that never holds
the T x L weights (shapes: B batch, T queries, L keys, H heads, Dh head width; tokens-first q, k, v
(B, T, H, Dh) and (B, L, H, Dh), like the rest of this backend).

`multihead_attention.attention(..., causal=, impl="blocked")` calls in here (the causal weights go into
its dense core, heads_attention, through its weights_function argument), and the ViT does when
AttentionConfig.impl == "blocked".

Causal attention: query i reads keys j <= i only, and its L is its own i + 1 visible keys
(causal_length="per_query"; ReLUFormer's choice in a secondary reading of Shen et al.) or all L ("global"); softmax is just masked.

Blocked attention: the same output as the dense core, computed one (query block x key block) tile at a
time with a backward that recomputes each tile's scores; the algorithm is the NumPy twin's
(numpy_backend/long_sequences.py, forward only), the implementation the tuned tiled kernel of
fast/blocked_attention.py (a custom_vjp: reverse-mode autodiff only). Choosing impl="blocked" opts in.
"""

from __future__ import annotations

import jax.numpy as jnp

from .attention_weights import length_factor, pointwise
from .fast.blocked_attention import blocked_attention as tiled_blocked_attention
from .layers import softmax

DEFAULT_BLOCK_SIZE = 1024  # keys per block when neither the call nor AttentionConfig.block_size gives one


# ---------------------------------------------------------------------------------------------- causal

def causal_visible_keys(num_queries, num_keys, causal_length, dtype):
    """Query i's L, (T, 1) -- i + 1 ("per_query") or L ("global") -- and the mask (T, L) of keys j <= i."""
    visible = jnp.arange(num_keys)[None, :] <= jnp.arange(num_queries)[:, None]  # (T, L)
    if causal_length == "per_query":
        return jnp.arange(1, num_queries + 1, dtype=dtype)[:, None], visible  # (T, 1)
    return jnp.full((num_queries, 1), num_keys, dtype), visible  # (T, 1)


def causal_attention_weights(scores, attn_cfg, causal_length="per_query"):
    """Scores (..., T, L) -> causal weights (..., T, L): hidden keys (j > i) weigh 0."""
    counts, visible = causal_visible_keys(*scores.shape[-2:], causal_length, scores.dtype)  # (T, 1), (T, L)
    if attn_cfg.kind == "softmax":
        return softmax(jnp.where(visible, scores, -jnp.inf))  # (..., T, L); e^-inf = 0
    weights = length_factor(attn_cfg, counts) * pointwise(attn_cfg.kind, scores, counts)  # (..., T, L)
    return jnp.where(visible, weights, 0.0)


# --------------------------------------------------------------------------------------------- blocked

def blocked_attention(q, k, v, attn_cfg, *, block_size=None, query_block_size=None, causal=False,
                      causal_length="per_query", window=None, key_lengths=None, mask=None, bias=None,
                      compute_dtype=None, heads_per_step=None):
    """q (B, T, H, Dh), k and v (B, L, H, Dh) -> (B, T, H, Dh), the same values as dense attention, with
    O((T + L) Dh) memory in the forward and the backward. Traceable (call it under jit).

    block_size: keys per tile (default attn_cfg.block_size, else DEFAULT_BLOCK_SIZE); query_block_size,
    heads_per_step: the tiling (fast/blocked_attention.make_plan); causal: query i sees keys j <= i,
    n_i = i + 1 (causal_length="per_query") or L ("global"); window (left, right), key_lengths (B,), mask
    and bias (broadcastable to (B, H, T, L)): the other ways of hiding keys, as in jax.nn (a hidden key
    neither weighs nor counts in n_i); compute_dtype: e.g. jnp.bfloat16 matmul inputs."""
    if block_size is None:
        block_size = attn_cfg.block_size or DEFAULT_BLOCK_SIZE
    return tiled_blocked_attention(q, k, v, attn_cfg, block_size=block_size, query_block_size=query_block_size,
                                   causal=causal, causal_length=causal_length, window=window,
                                   key_lengths=key_lengths, mask=mask, bias=bias, compute_dtype=compute_dtype,
                                   heads_per_step=heads_per_step)
