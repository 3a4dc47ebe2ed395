"""Attention for long sequences, off the ViT path: causal masks, and blocked (online-softmax) attention
(shapes: legend in __init__.py; `block` is the number of keys per block). Heads-first arrays throughout:
q (B, H, T, Dh), k and v (B, H, L, Dh). `multihead_attention.attention(..., causal=, impl="blocked")`
calls in here (the causal weights go into its dense core, heads_attention_forward / _backward, through
their weights_forward / weights_backward arguments); the ViT never does.

Causal attention: query i reads keys j <= i only, and its L is its own i + 1 visible keys
(causal_length="per_query"; ReLUFormer's choice in a secondary reading of Shen et al.) or all L ("global"). Hidden keys get weight 0; softmax
renormalises over the visible ones.

Blocked attention: the dense core holds the whole (B, H, T, L) weight array. Walking the keys in blocks
holds only (B, H, T, block) at a time, which is what makes long sequences fit in memory:

    point-wise kinds (relu / L, ...):  every weight depends on its own score only, so the output is a plain
        sum of one partial read per block:   out = sum over blocks b of  c * h(q K_b^T / sqrt(Dh)) V_b,
        with c = scale * n^-alpha and n the number of keys the query sees. That is the whole algorithm.
    softmax: a weight depends on its whole row (the maximum and the normaliser), which a block does not
        know yet. The online ("flash") update keeps, per query, the running maximum m, the running
        normaliser z = sum e^(s - m) and the unnormalised output; when a block raises the maximum, the old
        sums are rescaled by e^(m_old - m_new). One division at the end.

This is the readable reference (forward only); the fast blocked forward and backward live in the JAX
backend (jax_backend/fast/blocked_attention.py).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .attention_weights import length_factor, pointwise, pointwise_derivative
from .layers import SoftmaxCache, softmax, softmax_backward

DEFAULT_BLOCK_SIZE = 128  # keys per block when neither the call nor AttentionConfig.block_size gives one


# ---------------------------------------------------------------------------------------------- causal

def causal_visible_keys(num_queries, num_keys, causal_length, dtype):
    """Query i's L, (T, 1) -- i + 1 ("per_query") or L ("global") -- and the mask (T, L) of keys j <= i."""
    query_index = np.arange(num_queries)[:, None]  # (T, 1)
    visible = np.arange(num_keys)[None, :] <= query_index  # (T, L)
    counts = query_index + 1 if causal_length == "per_query" else np.full((num_queries, 1), num_keys)  # (T, 1)
    return counts.astype(dtype), visible


class CausalWeightsCache(NamedTuple):
    scores: np.ndarray   # (..., T, L) the scores
    weights: np.ndarray  # (..., T, L) the weights, 0 where hidden
    counts: np.ndarray   # (T, 1) each query's L
    visible: np.ndarray  # (T, L) the keys each query reads


def causal_attention_weights_forward(scores, attn_cfg, causal_length="per_query"):
    """Scores (..., T, L) -> causal weights (..., T, L): hidden keys (j > i) weigh 0."""
    counts, visible = causal_visible_keys(*scores.shape[-2:], causal_length, scores.dtype)  # (T, 1), (T, L)
    if attn_cfg.kind == "softmax":
        weights = softmax(np.where(visible, scores, -np.inf))  # (..., T, L); e^-inf = 0
    else:
        weights = length_factor(attn_cfg, counts) * pointwise(attn_cfg.kind, scores, counts) * visible  # (..., T, L)
    return weights, CausalWeightsCache(scores, weights, counts, visible)


def causal_attention_weights_backward(dweights, cache, attn_cfg):
    """Returns dscores (..., T, L)."""
    scores, weights, counts, visible = cache
    if attn_cfg.kind == "softmax":
        # Differentiates weights = softmax(masked scores); hidden keys have weight 0, so gradient 0.
        return softmax_backward(dweights, SoftmaxCache(weights))  # (..., T, L)
    # Differentiates weights = scale * n_i^-alpha * h(scores) * visible.
    derivative = pointwise_derivative(attn_cfg.kind, scores, counts)  # (..., T, L)
    return dweights * length_factor(attn_cfg, counts) * derivative * visible  # (..., T, L)


# --------------------------------------------------------------------------------------------- blocked

def blocked_attention_forward(q, k, v, attn_cfg, block_size=DEFAULT_BLOCK_SIZE, causal=False,
                              causal_length="per_query"):
    """Heads-first q (B, H, T, Dh), k and v (B, H, L, Dh) -> out (B, H, T, Dh), one key block at a time."""
    num_queries, num_keys = q.shape[2], k.shape[2]
    q = q * (1.0 / math.sqrt(q.shape[-1]))  # (B, H, T, Dh): scale q once instead of every block of scores
    counts, visible = num_keys, None  # every query sees all L keys ...
    if causal:  # ... or keys j <= i, with its own L
        counts, visible = causal_visible_keys(num_queries, num_keys, causal_length, q.dtype)  # (T, 1), (T, L)
    out = np.zeros(q.shape, dtype=np.result_type(q, v))  # (B, H, T, Dh), the running sum of reads
    if attn_cfg.kind == "softmax":
        running_max = np.full(q.shape[:-1] + (1,), -np.inf, dtype=out.dtype)  # (B, H, T, 1)
        normaliser = np.zeros(q.shape[:-1] + (1,), dtype=out.dtype)  # (B, H, T, 1)
    for start in range(0, num_keys, block_size):
        keys = slice(start, min(start + block_size, num_keys))  # the last block may be shorter
        scores = q @ k[:, :, keys].swapaxes(-1, -2)  # (B, H, T, block)
        if attn_cfg.kind == "softmax":
            if visible is not None:
                scores = np.where(visible[:, keys], scores, -np.inf)  # (B, H, T, block): e^-inf = 0
            # Every query sees key 0, so after the first block every running maximum is finite.
            new_max = np.maximum(running_max, scores.max(axis=-1, keepdims=True))  # (B, H, T, 1)
            rescale = np.exp(running_max - new_max)  # (B, H, T, 1), e^-inf = 0 on the first block
            unnormalised = np.exp(scores - new_max)  # (B, H, T, block)
            normaliser = normaliser * rescale + unnormalised.sum(axis=-1, keepdims=True)  # (B, H, T, 1)
            out = out * rescale + unnormalised @ v[:, :, keys]  # (B, H, T, Dh)
            running_max = new_max
            continue
        weights = pointwise(attn_cfg.kind, scores, counts)  # (B, H, T, block); the length factor at the end
        if visible is not None:
            weights = weights * visible[:, keys]  # (B, H, T, block): hidden keys weigh 0
        out = out + weights @ v[:, :, keys]  # (B, H, T, Dh)
    if attn_cfg.kind == "softmax":
        return out / normaliser  # (B, H, T, Dh)
    # The length factor is the same for every key of a query: apply it once, to the summed output.
    return (length_factor(attn_cfg, counts) * out).astype(out.dtype, copy=False)  # (B, H, T, Dh)
