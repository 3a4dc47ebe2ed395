"""Attention weights of every kind and the multi-head attention core, dense or blocked over keys.

Scores s = q.k / sqrt(Dh) become weights w = scale * L^-alpha * h(s) (Wortsman et al. 2023), with L the
number of keys; softmax ignores alpha and scale; sigmoid_bias is scale * sigmoid(s - log L), alpha ignored.
The derivative of relu at exactly 0 is 0, and relu6's is 0 at 0 and at 6 (jax.nn.relu / jax.nn.relu6
define these custom derivatives; jnp.maximum would give 1/2 at the tie).

Shapes: B batch, T queries, L keys (= T in self-attention), H heads, Dh head width.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from ..config import AttentionConfig
from .layers import canonical_compute_dtype, matmul

DEFAULT_BLOCK_SIZE = 128  # keys per block for impl="blocked" when AttentionConfig.block_size is None

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


def _scores(q, k, compute_dtype):
    """s = q.k / sqrt(Dh): (B, T, H, Dh), (B, L, H, Dh) -> (B, H, T, L)."""
    q = q * (1.0 / math.sqrt(q.shape[-1]))  # scale the smaller tensor, not the T x L scores
    return matmul("bqhd,bkhd->bhqk", q, k, compute_dtype)  # (B, H, T, L)


def dense_attention(q, k, v, attn_cfg: AttentionConfig, compute_dtype=None):
    """Holds the whole T x L weight matrix. Returns ((B, T, H, Dh) output, (B, H, T, L) weights)."""
    weights = attention_weights(_scores(q, k, compute_dtype), attn_cfg)  # (B, H, T, L)
    out = matmul("bhqk,bkhd->bqhd", weights, v, compute_dtype)  # (B, T, H, Dh)
    return out, weights


def blocked_attention(q, k, v, attn_cfg: AttentionConfig, compute_dtype=None):
    """The same output as `dense_attention`, walking keys in blocks so only a T x block slab is live.

    Point-wise kinds need no normalisation, so the output is a plain sum of per-block reads (L, the total
    number of keys, still sets the L^-alpha factor). Softmax keeps a running max and sum (online softmax).
    Keys are zero-padded to a whole number of blocks and the padding is masked out. Each block step is
    rematerialised in the backward pass (jax.checkpoint), so training memory is O(T x block) too.
    """
    batch, num_keys, heads, head_dim = k.shape
    block = min(attn_cfg.block_size or DEFAULT_BLOCK_SIZE, num_keys)
    num_blocks = -(-num_keys // block)
    padding = num_blocks * block - num_keys
    pad = ((0, 0), (0, padding), (0, 0), (0, 0))
    k_blocks = jnp.pad(k, pad).reshape(batch, num_blocks, block, heads, head_dim).swapaxes(0, 1)  # (nb, B, blk, H, Dh)
    v_blocks = jnp.pad(v, pad).reshape(batch, num_blocks, block, heads, head_dim).swapaxes(0, 1)  # (nb, B, blk, H, Dh)
    valid = jnp.asarray(np.arange(num_blocks * block).reshape(num_blocks, block) < num_keys)  # (nb, blk)
    q = q * (1.0 / math.sqrt(head_dim))  # (B, T, H, Dh)
    stat_dtype = jnp.result_type(q, k)

    if attn_cfg.kind != "softmax":
        @jax.checkpoint
        def step(total, block_inputs):
            k_block, v_block, valid_block = block_inputs
            scores = matmul("bqhd,bkhd->bhqk", q, k_block, compute_dtype)  # (B, H, T, blk)
            # The L^-alpha factor (or log L bias) uses all L keys, not the block's.
            weights = attention_weights(scores, attn_cfg, num_keys) * valid_block  # (B, H, T, blk)
            return total + matmul("bhqk,bkhd->bqhd", weights, v_block, compute_dtype), None  # (B, T, H, Dh)

        initial = jnp.zeros(q.shape, stat_dtype)  # (B, T, H, Dh)
        out, _ = jax.lax.scan(step, initial, (k_blocks, v_blocks, valid))
        return out

    @jax.checkpoint
    def softmax_step(carry, block_inputs):
        running_max, running_sum, total = carry  # (B, H, T), (B, H, T), (B, T, H, Dh)
        k_block, v_block, valid_block = block_inputs
        scores = matmul("bqhd,bkhd->bhqk", q, k_block, compute_dtype)  # (B, H, T, blk)
        scores = jnp.where(valid_block, scores, -jnp.inf)  # padded keys get no weight
        # The result does not depend on the shift, so no gradient flows through it.
        new_max = jax.lax.stop_gradient(jnp.maximum(running_max, scores.max(axis=-1)))  # (B, H, T)
        correction = jnp.exp(running_max - new_max)  # (B, H, T)
        unnormalised = jnp.exp(scores - new_max[..., None])  # (B, H, T, blk)
        running_sum = running_sum * correction + unnormalised.sum(axis=-1)  # (B, H, T)
        read = matmul("bhqk,bkhd->bqhd", unnormalised, v_block, compute_dtype)  # (B, T, H, Dh)
        total = total * correction.transpose(0, 2, 1)[..., None] + read  # (B, T, H, Dh)
        return (new_max, running_sum, total), None

    stats_shape = (batch, heads, q.shape[1])
    initial = (jnp.full(stats_shape, -jnp.inf, stat_dtype), jnp.zeros(stats_shape, stat_dtype),
               jnp.zeros(q.shape, stat_dtype))
    (_, running_sum, total), _ = jax.lax.scan(softmax_step, initial, (k_blocks, v_blocks, valid))
    return total / running_sum.transpose(0, 2, 1)[..., None]  # (B, T, H, Dh)


def multi_head_attention(q, k, v, attn_cfg: AttentionConfig, compute_dtype=None, return_weights=False):
    """Dispatch on attn_cfg.impl. Returns (output, weights or None); with impl="blocked" the weights are
    only computed (densely, for plots and tests) when asked for."""
    if attn_cfg.impl == "dense":
        out, weights = dense_attention(q, k, v, attn_cfg, compute_dtype)
        return out, (weights if return_weights else None)
    out = blocked_attention(q, k, v, attn_cfg, compute_dtype)
    weights = attention_weights(_scores(q, k, compute_dtype), attn_cfg) if return_weights else None
    return out, weights


@functools.partial(jax.jit, static_argnames=("attn_cfg", "return_weights", "compute_dtype"))
def _attention_jit(q, k, v, attn_cfg, return_weights, compute_dtype):
    return multi_head_attention(q, k, v, attn_cfg, compute_dtype, return_weights)


def attention(q, k, v, attn_cfg: AttentionConfig, *, return_weights=False, compute_dtype=None):
    """Multi-head self-attention core (no projections): q, k, v (B, L, H, Dh) -> (B, L, H, Dh).

    s = q.k / sqrt(Dh) (qk-layernorm, when wanted, is applied by the caller to q and k first);
    w = attention_weights(s); o_i = sum_j w_ij v_j. With `return_weights=True` returns
    `(output, weights)`, weights (B, H, L, L). Accepts NumPy or JAX arrays; returns JAX arrays.
    """
    if not isinstance(attn_cfg, AttentionConfig):
        raise ValueError(f"attn_cfg must be an AttentionConfig, got {type(attn_cfg).__name__}")
    shapes = [tuple(np.shape(x)) for x in (q, k, v)]
    if not (len(shapes[0]) == 4 and shapes[0] == shapes[1] == shapes[2]):  # the NumPy backend's rule and message
        raise ValueError(f"attention expects q, k, v of one shape (B, L, H, Dh); got {shapes[0]}, {shapes[1]}, {shapes[2]}")
    out, weights = _attention_jit(q, k, v, attn_cfg, bool(return_weights), canonical_compute_dtype(compute_dtype))
    return (out, weights) if return_weights else out
