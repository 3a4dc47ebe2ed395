"""Attention weights of every kind and the multi-head attention core, dense or blocked over keys.

Scores s = q.k / sqrt(Dh) become weights w = scale * L^-alpha * h(s) (Wortsman et al. 2023), with L the
number of keys; softmax ignores alpha and scale; sigmoid_bias is scale * sigmoid(s - log L), alpha ignored.
The derivative of relu at exactly 0 is 0, and relu6's is 0 at 0 and at 6 (jax.nn.relu / jax.nn.relu6
define these custom derivatives; jnp.maximum would give 1/2 at the tie).

Causal attention (causal=True): query i sees keys j <= i, and its L is its i + 1 visible keys
(causal_length="per_query", ReLUFormer's choice) or all L ("global"); softmax is just masked.
impl="blocked" is the tiled, memory-efficient forward and backward of blocked_attention.py.

Shapes: B batch, T queries, L keys (= T in self-attention), H heads, Dh head width.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from ..checks import check_attention_options
from ..config import AttentionConfig
from .layers import canonical_compute_dtype, matmul

# h(s) for the point-wise kinds; each is applied element-wise to the (B, H, T, L) scores.
POINTWISE = {
    "relu": jax.nn.relu,
    "relu2": lambda s: jnp.square(jax.nn.relu(s)),
    "gelu": lambda s: jax.nn.gelu(s, approximate=True),
    "softplus": jax.nn.softplus,
    "sigmoid": jax.nn.sigmoid,
    "relu6": jax.nn.relu6,
    "identity": lambda s: s,
}


def attention_weights(scores, attn_cfg: AttentionConfig, num_keys: int | None = None):
    """(B, H, T, L) scores -> (B, H, T, L) weights. L, the number of keys, is the last axis unless
    `num_keys` says otherwise (a block of keys out of num_keys, for the point-wise kinds)."""
    num_keys = scores.shape[-1] if num_keys is None else num_keys
    if attn_cfg.kind == "softmax":
        return jax.nn.softmax(scores, axis=-1)  # (B, H, T, L)
    if attn_cfg.kind == "sigmoid_bias":
        return attn_cfg.scale * jax.nn.sigmoid(scores - math.log(num_keys))  # (B, H, T, L)
    return (attn_cfg.scale * num_keys ** -attn_cfg.alpha) * POINTWISE[attn_cfg.kind](scores)  # (B, H, T, L)


def causal_attention_weights(scores, attn_cfg: AttentionConfig, causal_length="per_query"):
    """(B, H, T, L) scores -> causal weights: query i reads keys j <= i, with L = i + 1 ("per_query") or
    the full L ("global") in the length factor; hidden keys weigh 0."""
    num_queries, num_keys = scores.shape[-2:]
    visible = jnp.arange(num_keys)[None, :] <= jnp.arange(num_queries)[:, None]  # (T, L)
    if attn_cfg.kind == "softmax":
        return jax.nn.softmax(jnp.where(visible, scores, -jnp.inf), axis=-1)  # (B, H, T, L)
    if causal_length == "per_query":
        counts = jnp.arange(1, num_queries + 1, dtype=scores.dtype)[:, None]  # (T, 1)
    else:
        counts = jnp.full((num_queries, 1), num_keys, scores.dtype)  # (T, 1)
    if attn_cfg.kind == "sigmoid_bias":
        weights = attn_cfg.scale * jax.nn.sigmoid(scores - jnp.log(counts))  # (B, H, T, L)
    else:
        weights = attn_cfg.scale * counts ** -attn_cfg.alpha * POINTWISE[attn_cfg.kind](scores)  # (B, H, T, L)
    return jnp.where(visible, weights, 0.0)


def _weights(scores, attn_cfg, causal, causal_length):
    return causal_attention_weights(scores, attn_cfg, causal_length) if causal else attention_weights(scores, attn_cfg)


def _scores(q, k, compute_dtype):
    """s = q.k / sqrt(Dh): (B, T, H, Dh), (B, L, H, Dh) -> (B, H, T, L)."""
    q = q * (1.0 / math.sqrt(q.shape[-1]))  # scale the smaller tensor, not the T x L scores
    return matmul("bqhd,bkhd->bhqk", q, k, compute_dtype)  # (B, H, T, L)


def dense_attention(q, k, v, attn_cfg: AttentionConfig, compute_dtype=None, causal=False,
                    causal_length="per_query"):
    """Holds the whole T x L weight matrix. Returns ((B, T, H, Dh) output, (B, H, T, L) weights)."""
    weights = _weights(_scores(q, k, compute_dtype), attn_cfg, causal, causal_length)  # (B, H, T, L)
    out = matmul("bhqk,bkhd->bqhd", weights, v, compute_dtype)  # (B, T, H, Dh)
    return out, weights


def blocked_attention(q, k, v, attn_cfg: AttentionConfig, compute_dtype=None, *, block_size=None, causal=False,
                      causal_length="per_query"):
    """The same output as `dense_attention` without ever holding the T x L weights, in the forward or
    the backward: tiles of queries x keys, and a custom VJP that recomputes each tile's scores
    (blocked_attention.py). block_size: keys per tile (default attn_cfg.block_size, else 1024)."""
    from .blocked_attention import blocked_attention as tiled_attention  # here: that module uses POINTWISE
    return tiled_attention(q, k, v, attn_cfg, block_size=block_size, causal=causal, causal_length=causal_length,
                           compute_dtype=compute_dtype)


def multi_head_attention(q, k, v, attn_cfg: AttentionConfig, compute_dtype=None, return_weights=False, *,
                         impl=None, block_size=None, causal=False, causal_length="per_query"):
    """Dispatch on impl (default attn_cfg.impl). Returns (output, weights or None); with impl="blocked"
    the weights are only computed (densely, for plots and tests) when asked for."""
    if (attn_cfg.impl if impl is None else impl) == "dense":
        out, weights = dense_attention(q, k, v, attn_cfg, compute_dtype, causal, causal_length)
        return out, (weights if return_weights else None)
    out = blocked_attention(q, k, v, attn_cfg, compute_dtype, block_size=block_size, causal=causal,
                            causal_length=causal_length)
    weights = _weights(_scores(q, k, compute_dtype), attn_cfg, causal, causal_length) if return_weights else None
    return out, weights


@functools.partial(jax.jit, static_argnames=("attn_cfg", "return_weights", "compute_dtype", "impl", "block_size",
                                             "causal", "causal_length"))
def _attention_jit(q, k, v, attn_cfg, return_weights, compute_dtype, impl, block_size, causal, causal_length):
    return multi_head_attention(q, k, v, attn_cfg, compute_dtype, return_weights, impl=impl, block_size=block_size,
                                causal=causal, causal_length=causal_length)


def attention(q, k, v, attn_cfg: AttentionConfig, *, impl=None, block_size=None, causal=False,
              causal_length="per_query", return_weights=False, compute_dtype=None):
    """Multi-head self-attention core (no projections): q, k, v (B, L, H, Dh) -> (B, L, H, Dh).

    s = q.k / sqrt(Dh) (qk-layernorm, when wanted, is applied by the caller to q and k first);
    w = attention_weights(s); o_i = sum_j w_ij v_j. impl: "dense" or "blocked" (default attn_cfg.impl);
    block_size: keys per tile for "blocked" (default attn_cfg.block_size, else 1024). causal=True: query i
    sees keys j <= i, with L = i + 1 (causal_length="per_query") or L ("global") in L^-alpha and log L.
    With `return_weights=True` returns `(output, weights)`, weights (B, H, L, L). Accepts NumPy or JAX
    arrays; returns JAX arrays. Differentiable (jax.grad / jax.vjp) either way.
    """
    impl = check_attention_options(attn_cfg, impl, block_size, causal, causal_length)
    shapes = [tuple(np.shape(x)) for x in (q, k, v)]
    if not (len(shapes[0]) == 4 and shapes[0] == shapes[1] == shapes[2]):  # the NumPy backend's rule and message
        raise ValueError(f"attention expects q, k, v of one shape (B, L, H, Dh); got {shapes[0]}, {shapes[1]}, {shapes[2]}")
    out, weights = _attention_jit(q, k, v, attn_cfg, bool(return_weights), canonical_compute_dtype(compute_dtype),
                                  impl, None if block_size is None else int(block_size), bool(causal), causal_length)
    return (out, weights) if return_weights else out
