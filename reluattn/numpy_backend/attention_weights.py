"""Attention weights from scores, for every kind, with their backward (shapes: legend in __init__.py).

    softmax:       w = softmax_j(s)                   (alpha and scale are ignored)
    sigmoid_bias:  w = scale * sigmoid(s - log L)     (alpha is ignored)
    point-wise:    w = scale * L^(-alpha) * h(s)      h in relu, relu2, gelu, softplus, sigmoid, relu6, identity

L is the number of keys (the last axis of the scores). With h = relu and alpha = 1 this is ReLU / L
(Wortsman et al. 2023): each weight is O(1/L) on average, as with softmax, instead of O(1).

Causal attention (causal_attention_weights_forward / _backward): query i reads keys j <= i only, and its
L is its own i + 1 visible keys (causal_length="per_query", ReLUFormer's choice) or all L ("global").
Hidden keys get weight 0; softmax renormalises over the visible ones.
"""

from __future__ import annotations

import math

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


def attention_weights_forward(scores, attn_cfg):
    """Scores (..., L) -> weights (..., L) of kind attn_cfg.kind, over the last axis (the keys)."""
    num_keys = scores.shape[-1]
    if attn_cfg.kind == "softmax":
        weights = softmax(scores)  # (..., L)
    elif attn_cfg.kind == "sigmoid_bias":
        # The bias -log L makes the expected row sum O(1), like alpha = 1 (Ramapuram et al. 2024).
        weights = attn_cfg.scale * sigmoid(scores - math.log(num_keys))  # (..., L)
    else:
        weights = length_factor(attn_cfg, num_keys) * pointwise(attn_cfg.kind, scores)  # (..., L)
    return weights, (scores, weights)


def attention_weights_backward(dweights, cache, attn_cfg):
    scores, weights = cache
    num_keys = scores.shape[-1]
    if attn_cfg.kind == "softmax":
        # Differentiates weights = softmax(scores).
        return softmax_backward(dweights, (weights,))  # (..., L)
    if attn_cfg.kind == "sigmoid_bias":
        # Differentiates weights = scale * sigmoid(scores - log L): sigmoid' = sig (1 - sig).
        sig = weights / attn_cfg.scale  # (..., L)
        return dweights * attn_cfg.scale * sig * (1.0 - sig)  # (..., L)
    # Differentiates weights = scale * L^-alpha * h(scores).
    factor = length_factor(attn_cfg, num_keys)
    return dweights * factor * pointwise_derivative(attn_cfg.kind, scores)  # (..., L)


# ---------------------------------------------------------------------------------------------- causal

def causal_visible_keys(num_queries, num_keys, causal_length, dtype):
    """Query i's L, (T, 1) -- i + 1 ("per_query") or L ("global") -- and the mask (T, L) of keys j <= i."""
    query_index = np.arange(num_queries)[:, None]  # (T, 1)
    visible = np.arange(num_keys)[None, :] <= query_index  # (T, L)
    counts = query_index + 1 if causal_length == "per_query" else np.full((num_queries, 1), num_keys)  # (T, 1)
    return counts.astype(dtype), visible


def causal_attention_weights_forward(scores, attn_cfg, causal_length="per_query"):
    """Scores (..., T, L) -> causal weights (..., T, L): hidden keys (j > i) weigh 0."""
    counts, visible = causal_visible_keys(*scores.shape[-2:], causal_length, scores.dtype)  # (T, 1), (T, L)
    if attn_cfg.kind == "softmax":
        weights = softmax(np.where(visible, scores, -np.inf))  # (..., T, L); e^-inf = 0
    elif attn_cfg.kind == "sigmoid_bias":
        weights = attn_cfg.scale * sigmoid(scores - np.log(counts)) * visible  # (..., T, L)
    else:
        weights = length_factor(attn_cfg, counts) * pointwise(attn_cfg.kind, scores) * visible  # (..., T, L)
    return weights, (scores, weights, counts, visible)


def causal_attention_weights_backward(dweights, cache, attn_cfg):
    scores, weights, counts, visible = cache
    if attn_cfg.kind == "softmax":
        # Differentiates weights = softmax(masked scores); hidden keys have weight 0, so gradient 0.
        return softmax_backward(dweights, (weights,))  # (..., T, L)
    if attn_cfg.kind == "sigmoid_bias":
        # Differentiates weights = scale * sigmoid(scores - log n_i) * visible (sig = 0 where hidden).
        sig = weights / attn_cfg.scale  # (..., T, L)
        return dweights * attn_cfg.scale * sig * (1.0 - sig)  # (..., T, L)
    # Differentiates weights = scale * n_i^-alpha * h(scores) * visible.
    return dweights * length_factor(attn_cfg, counts) * pointwise_derivative(attn_cfg.kind, scores) * visible
