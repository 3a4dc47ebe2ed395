"""Blocked attention: the same output as the dense core, reading the keys one block at a time
(shapes: legend in __init__.py; `block` is the number of keys per block).

The dense core holds the whole (B, H, T, L) weight array. Walking the keys in blocks holds only
(B, H, T, block) at a time, which is what makes long sequences fit in memory:

    point-wise kinds (relu / L, ...):  every weight depends on its own score only, so the output is a plain
        sum of one partial read per block:   out = sum over blocks b of  c * h(q K_b^T / sqrt(Dh)) V_b,
        with c = scale * n^-alpha and n the number of keys the query sees. That is the whole algorithm.
    softmax: a weight depends on its whole row (the maximum and the normaliser), which a block does not
        know yet. The online ("flash") update keeps, per query, the running maximum m, the running
        normaliser z = sum e^(s - m) and the unnormalised output; when a block raises the maximum, the old
        sums are rescaled by e^(m_old - m_new). One division at the end.

This is the readable reference (forward only). The model's backward recomputes the dense weights
(multihead_attention.core_backward); the fast blocked forward and backward live in the JAX backend.
"""

from __future__ import annotations

import math

import numpy as np

from .attention_weights import causal_visible_keys, length_factor, pointwise
from .layers import sigmoid

DEFAULT_BLOCK_SIZE = 128  # keys per block when AttentionConfig.block_size is None


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
        if attn_cfg.kind == "sigmoid_bias":
            log_counts = np.log(counts) if causal else math.log(num_keys)  # (T, 1) or a number
            weights = sigmoid(scores - log_counts)  # (B, H, T, block); scale comes at the end
        else:
            weights = pointwise(attn_cfg.kind, scores)  # (B, H, T, block); scale * n^-alpha at the end
        if visible is not None:
            weights = weights * visible[:, keys]  # (B, H, T, block): hidden keys weigh 0
        out = out + weights @ v[:, :, keys]  # (B, H, T, Dh)
    if attn_cfg.kind == "softmax":
        return out / normaliser  # (B, H, T, Dh)
    if attn_cfg.kind == "sigmoid_bias":
        return (attn_cfg.scale * out).astype(out.dtype, copy=False)  # (B, H, T, Dh)
    # The length factor is the same for every key of a query: apply it once, to the summed output.
    return (length_factor(attn_cfg, counts) * out).astype(out.dtype, copy=False)  # (B, H, T, Dh)
