"""Attention weights from scores, for every kind, with their backward (shapes: legend in __init__.py).

    softmax:       w = softmax_j(s)                   (alpha and scale are ignored)
    sigmoid_bias:  w = scale * sigmoid(s - log L)     (alpha is ignored)
    point-wise:    w = scale * L^(-alpha) * h(s)      h in relu, relu2, gelu, softplus, sigmoid, relu6, identity

L is the number of keys (the last axis of the scores). With h = relu and alpha = 1 this is ReLU / L
(Wortsman et al. 2023): each weight is O(1/L) on average, as with softmax, instead of O(1).

Causal attention passes `visible` (T, L), True where query i may read key j (j <= i), and `num_keys`,
the L of each query as a (T, 1) column: i + 1 visible keys (ReLUFormer's choice) or all L. Hidden keys
get weight 0 (softmax renormalises over the visible ones).
"""

from __future__ import annotations

import numpy as np

from .layers import gelu, gelu_derivative, sigmoid, softmax, softmax_backward


def pointwise(kind, scores):
    """h(s) for a point-wise kind, entry by entry: the result has the scores' shape (..., L)."""
    if kind == "relu":
        return np.maximum(scores, 0.0)
    if kind == "relu2":
        return np.square(np.maximum(scores, 0.0))
    if kind == "gelu":
        return gelu(scores)
    if kind == "softplus":
        return np.logaddexp(0.0, scores)  # log(1 + e^s) without overflow
    if kind == "sigmoid":
        return sigmoid(scores)
    if kind == "relu6":
        return np.clip(scores, 0.0, 6.0)
    if kind == "identity":
        return scores.copy()
    raise ValueError(f"unknown point-wise attention kind {kind!r}")


def pointwise_derivative(kind, scores):
    """h'(s) for a point-wise kind, shaped like the scores (..., L); relu's derivative is 0 at 0,
    relu6's is 0 at 0 and at 6."""
    if kind == "relu":
        return (scores > 0).astype(scores.dtype)
    if kind == "relu2":
        return 2.0 * np.maximum(scores, 0.0)
    if kind == "gelu":
        return gelu_derivative(scores)
    if kind == "softplus":
        return sigmoid(scores)
    if kind == "sigmoid":
        sig = sigmoid(scores)  # (..., L)
        return sig * (1.0 - sig)
    if kind == "relu6":
        return ((scores > 0) & (scores < 6)).astype(scores.dtype)
    if kind == "identity":
        return np.ones_like(scores)
    raise ValueError(f"unknown point-wise attention kind {kind!r}")


def length_factor(attn_cfg, num_keys):
    """The constant in front of h(s): scale * L^(-alpha). num_keys: a number, or per-query counts (T, 1)."""
    if np.ndim(num_keys) == 0:
        return attn_cfg.scale * float(num_keys) ** (-attn_cfg.alpha)
    return attn_cfg.scale * np.power(num_keys, -attn_cfg.alpha)  # (T, 1)


def visible_keys(num_queries, num_keys, causal, causal_length, dtype):
    """The L of each query's length factor, (T, 1), and its mask (T, L) (None when every key is visible).
    causal: query i sees keys j <= i; causal_length "per_query": n_i = i + 1, "global": n_i = L."""
    if not causal:
        return np.full((num_queries, 1), num_keys, dtype=dtype), None  # (T, 1)
    query_index = np.arange(num_queries)[:, None]  # (T, 1)
    visible = np.arange(num_keys)[None, :] <= query_index  # (T, L)
    counts = query_index + 1 if causal_length == "per_query" else np.full((num_queries, 1), num_keys)  # (T, 1)
    return counts.astype(dtype), visible


def attention_weights_forward(scores, attn_cfg, num_keys=None, visible=None):
    """Scores (..., T, L) -> weights (..., T, L) of kind attn_cfg.kind, over the last axis (the keys).
    num_keys: the L of the length factor (default: all L keys; or per query, (T, 1));
    visible: None (every key) or a (T, L) mask; hidden keys get weight 0."""
    num_keys = scores.shape[-1] if num_keys is None else num_keys
    if attn_cfg.kind == "softmax":
        # exp(-inf) = 0: hidden keys drop out of the normaliser too.
        weights = softmax(scores if visible is None else np.where(visible, scores, -np.inf))  # (..., T, L)
    elif attn_cfg.kind == "sigmoid_bias":
        # The bias -log L makes the expected row sum O(1), like alpha = 1 (Ramapuram et al. 2024).
        weights = attn_cfg.scale * sigmoid(scores - np.log(num_keys))  # (..., T, L)
    else:
        weights = length_factor(attn_cfg, num_keys) * pointwise(attn_cfg.kind, scores)  # (..., T, L)
    weights = weights.astype(scores.dtype, copy=False)  # per-query counts are float64; keep float32 float32
    visible = np.ones((1, 1), dtype=bool) if visible is None else visible  # (T, L) or (1, 1): all visible
    if attn_cfg.kind != "softmax":
        weights = weights * visible  # (..., T, L)
    return weights, (scores, weights, np.asarray(num_keys), visible)


def attention_weights_backward(dweights, cache, attn_cfg):
    scores, weights, num_keys, visible = cache
    if attn_cfg.kind == "softmax":
        # Differentiates weights = softmax(scores); hidden keys have weight 0, so their gradient is 0.
        return softmax_backward(dweights, (weights,))  # (..., T, L)
    if attn_cfg.kind == "sigmoid_bias":
        # Differentiates weights = scale * sigmoid(scores - log L) * visible: sigmoid' = sig (1 - sig).
        sig = weights / attn_cfg.scale  # (..., T, L), 0 where hidden
        return dweights * attn_cfg.scale * sig * (1.0 - sig)  # (..., T, L)
    # Differentiates weights = scale * L^-alpha * h(scores) * visible.
    factor = length_factor(attn_cfg, num_keys)  # a number or (T, 1)
    return (dweights * factor * pointwise_derivative(attn_cfg.kind, scores) * visible).astype(scores.dtype, copy=False)
