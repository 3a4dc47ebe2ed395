"""The one place where reluattn.testing reaches into the backends: the float64 NumPy reference.

Every check compares against these functions; nothing else in reluattn.testing imports a backend module,
so when the backends' files move, only the imports below change.

Layouts: the public API is tokens-first, q (B, T, H, Dh), k and v (B, L, H, Dh); the reference core works
heads-first, (B, H, T, Dh). Everything here is float64 NumPy and never imports JAX.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np

from .. import numpy_backend
from ..numpy_backend.attention_weights import (KINKS, attention_weights_backward, attention_weights_forward, length_factor,
                                               pointwise_derivative)
from ..numpy_backend.layers import sigmoid
from ..numpy_backend.long_sequences import (causal_attention_weights_backward, causal_attention_weights_forward,
                                            causal_visible_keys)
from ..numpy_backend.multihead_attention import heads_attention_backward, heads_attention_forward
from ..params import flatten, init_params, tree_map, unflatten

__all__ = ["AttentionPieces", "attention_pieces", "reference_attention", "reference_attention_grads",
           "numpy_backend", "flatten", "init_params", "tree_map", "unflatten", "TO_HEADS_FIRST", "heads_first"]

TO_HEADS_FIRST = (0, 2, 1, 3)  # (B, T, H, Dh) <-> (B, H, T, Dh); the same swap is its own inverse


class AttentionPieces(NamedTuple):
    """What the tolerance bounds need from one reference forward (heads-first, float64)."""
    kind: str
    q: np.ndarray             # (B, H, T, Dh)
    k: np.ndarray             # (B, H, L, Dh)
    v: np.ndarray             # (B, H, L, Dh)
    weights: np.ndarray       # (B, H, T, L)
    arguments: np.ndarray     # what h is applied to: the scores (sigmoid_bias: scores - log n)
    factor: object            # c in w = c h(arguments): a number or (T, 1); unused for softmax
    derivative: Callable      # h' (unused for softmax)
    visible: np.ndarray | None  # (T, L) mask of causal attention, None without one


def heads_first(x):
    """(B, T, H, Dh) -> (B, H, T, Dh), as float64."""
    return np.asarray(x, dtype=np.float64).transpose(TO_HEADS_FIRST)


def reference_attention(q, k, v, attn_cfg, causal=False, causal_length="per_query"):
    """The NumPy dense core in float64: q (B, T, H, Dh), k, v (B, L, H, Dh) -> (out (B, T, H, Dh), cache)."""
    def causal_weights(scores, attn_cfg):
        return causal_attention_weights_forward(scores, attn_cfg, causal_length)
    weights_forward = causal_weights if causal else attention_weights_forward
    out, _, cache = heads_attention_forward(*map(heads_first, (q, k, v)), attn_cfg, weights_forward)
    return out.transpose(TO_HEADS_FIRST), cache


def reference_attention_grads(dout, cache, attn_cfg, causal=False):
    """The hand-written backward of `reference_attention`: (dq, dk, dv), tokens-first."""
    weights_backward = causal_attention_weights_backward if causal else attention_weights_backward
    grads = heads_attention_backward(heads_first(dout), cache, attn_cfg, weights_backward)
    return [g.transpose(TO_HEADS_FIRST) for g in grads]


def attention_pieces(cache, attn_cfg, causal=False, causal_length="per_query") -> AttentionPieces:
    """AttentionPieces out of a `reference_attention` cache."""
    q, k, v, weights, _ = cache
    num_queries, num_keys = q.shape[2], k.shape[2]
    scores = (q @ k.swapaxes(-1, -2)) / math.sqrt(q.shape[-1])  # (B, H, T, L)
    counts, visible = num_keys, None
    if causal:
        counts, visible = causal_visible_keys(num_queries, num_keys, causal_length, np.float64)  # (T, 1), (T, L)
        visible = visible.astype(np.float64)
    if attn_cfg.kind == "sigmoid_bias":
        arguments = scores - np.log(counts)  # (B, H, T, L)
        return AttentionPieces(attn_cfg.kind, q, k, v, weights, arguments, attn_cfg.scale,
                               lambda s: sigmoid(s) * (1.0 - sigmoid(s)), visible)
    factor = length_factor(attn_cfg, counts) if attn_cfg.kind != "softmax" else 1.0
    return AttentionPieces(attn_cfg.kind, q, k, v, weights, scores, factor,
                           lambda s: pointwise_derivative(attn_cfg.kind, s), visible)
