"""Attention weights from scores, for every kind, with their backward (shapes: legend in __init__.py).

    softmax:       w = softmax_j(s)                   (alpha and scale are ignored)
    sigmoid_bias:  w = scale * sigmoid(s - log L)     (alpha is ignored; Ramapuram et al. 2024, neither paper)
    point-wise:    w = scale * L^(-alpha) * h(s)      h in relu, relu2, gelu, softplus, sigmoid, relu6, identity

L is the number of keys (the last axis of the scores). With h = relu and alpha = 1 this is ReLU / L
(Wortsman et al. 2023): each weight is O(1/L) on average, as with softmax, instead of O(1).

This file is the one home of h(s) (`POINTWISE`) and of the factor `scale * L^-alpha` (`length_factor`) in
the NumPy backend: the dense core here, and the causal and blocked attention of long_sequences.py, all
build their weights from `pointwise(...)` and `length_factor(...)`.

The learned length factor (AttentionConfig.learn_alpha / learn_scale; beyond both papers: Wortsman et al.
2023 ask whether the factor "could be learned"): per head h, w = scale * exp(beta_h) * L^(-alpha_h) * h(s),
with alpha_h, beta_h the parameters attn.length.alpha and attn.length.log_scale (H,), initialised at
AttentionConfig.alpha and 0. `learned_attention_weights_forward / _backward` are the weights with it,
`learned_length_backward` the gradient of its parameters. The one not learned gets gradient 0, so the
optimizer leaves it at its initial value. ReLUFormer's relu(s) / (gamma sqrt(L/2)) (a secondary reading)
is alpha = 1/2, scale = sqrt(2), learn_scale=True: gamma_h = exp(-beta_h).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .layers import SoftmaxCache, gelu, gelu_derivative, sigmoid, softmax, softmax_backward


def _relu6_derivative(s):
    return ((s > 0) & (s < 6)).astype(s.dtype)  # 0 at 0 and at 6


# kind -> (h, h'), applied entry by entry to scores (..., L); relu's derivative is 0 at 0.
POINTWISE = {
    "relu": (lambda s: np.maximum(s, 0.0), lambda s: (s > 0).astype(s.dtype)),
    "relu2": (lambda s: np.square(np.maximum(s, 0.0)), lambda s: 2.0 * np.maximum(s, 0.0)),
    "gelu": (gelu, gelu_derivative),
    "softplus": (lambda s: np.logaddexp(0.0, s), sigmoid),  # log(1 + e^s) without overflow
    "sigmoid": (sigmoid, lambda s: sigmoid(s) * (1.0 - sigmoid(s))),
    "relu6": (lambda s: np.clip(s, 0.0, 6.0), _relu6_derivative),
    "identity": (lambda s: s.copy(), np.ones_like),
}
# kind -> the scores where h is not smooth: h' jumps there (relu, relu6) or bends (relu2). Every backend's h'
# is 0 there; finite differences must keep away. The one list: tests and the test kit read it from here.
KINKS = {"relu": (0.0,), "relu2": (0.0,), "relu6": (0.0, 6.0)}


def _log(num_keys):
    """log L: a Python float for a number (so float32 scores stay float32), else per-query logs (T, 1)."""
    return math.log(num_keys) if np.ndim(num_keys) == 0 else np.log(num_keys)


def pointwise(kind, scores, num_keys=None):
    """h(s) for a point-wise kind (or sigmoid_bias, which needs num_keys), shaped like the scores (..., L)."""
    if kind not in POINTWISE and kind != "sigmoid_bias":
        raise ValueError(f"unknown point-wise attention kind {kind!r}")
    if kind == "sigmoid_bias":
        return sigmoid(scores - _log(num_keys))  # (..., L); the bias -log L makes the row sum O(1)
    return POINTWISE[kind][0](scores)  # (..., L)


def pointwise_derivative(kind, scores, num_keys=None):
    """h'(s), shaped like the scores (..., L); relu's derivative is 0 at 0, relu6's is 0 at 0 and at 6."""
    if kind not in POINTWISE and kind != "sigmoid_bias":
        raise ValueError(f"unknown point-wise attention kind {kind!r}")
    if kind == "sigmoid_bias":
        return POINTWISE["sigmoid"][1](scores - _log(num_keys))  # (..., L)
    return POINTWISE[kind][1](scores)  # (..., L)


def length_factor(attn_cfg, num_keys, length=None):
    """The constant in front of h(s): scale * L^(-alpha) (sigmoid_bias: scale, its L is inside h).
    num_keys: a number, or per-query counts (T, 1). With `length`, the learned parameters {"alpha": (H,),
    "log_scale": (H,)}: scale * exp(log_scale_h) * L^(-alpha_h) per head, (H, 1, 1) (num_keys a number)."""
    if length is not None:
        alpha, log_scale = (np.asarray(length[name])[:, None, None] for name in ("alpha", "log_scale"))  # (H, 1, 1)
        return attn_cfg.scale * np.exp(log_scale - alpha * math.log(num_keys))  # (H, 1, 1)
    alpha = 0.0 if attn_cfg.kind == "sigmoid_bias" else attn_cfg.alpha
    if np.ndim(num_keys) == 0:
        return attn_cfg.scale * float(num_keys) ** (-alpha)
    return attn_cfg.scale * np.power(num_keys, -alpha)  # (T, 1)


class AttentionWeightsCache(NamedTuple):
    scores: np.ndarray   # (..., L) the scores
    weights: np.ndarray  # (..., L) the weights


def attention_weights_forward(scores, attn_cfg):
    """Scores (..., L) -> weights (..., L) of kind attn_cfg.kind, over the last axis (the keys)."""
    num_keys = scores.shape[-1]
    if attn_cfg.kind == "softmax":
        weights = softmax(scores)  # (..., L)
    else:
        weights = length_factor(attn_cfg, num_keys) * pointwise(attn_cfg.kind, scores, num_keys)  # (..., L)
    return weights, AttentionWeightsCache(scores, weights)


def attention_weights_backward(dweights, cache, attn_cfg):
    """Returns dscores (..., L)."""
    scores, weights = cache
    num_keys = scores.shape[-1]
    if attn_cfg.kind == "softmax":
        # Differentiates weights = softmax(scores).
        return softmax_backward(dweights, SoftmaxCache(weights))  # (..., L)
    # Differentiates weights = scale * L^-alpha * h(scores).
    factor = length_factor(attn_cfg, num_keys)
    return dweights * factor * pointwise_derivative(attn_cfg.kind, scores, num_keys)  # (..., L)



# ------------------------------------------------------------------------ the learned length factor

class LearnedWeightsCache(NamedTuple):
    scores: np.ndarray   # (B, H, T, L) the scores
    weights: np.ndarray  # (B, H, T, L) the weights
    factor: np.ndarray   # (H, 1, 1) scale * exp(beta_h) * L^-alpha_h


def learned_attention_weights_forward(scores, attn_cfg, length):
    """Scores (B, H, T, L) -> weights scale * exp(beta_h) * L^(-alpha_h) * h(s) (B, H, T, L), with the
    learned length = {"alpha": (H,), "log_scale": (H,)} (a point-wise kind: softmax has no factor)."""
    factor = length_factor(attn_cfg, scores.shape[-1], length)  # (H, 1, 1)
    weights = factor * pointwise(attn_cfg.kind, scores)  # (B, H, T, L)
    return weights, LearnedWeightsCache(scores, weights, factor)


def learned_attention_weights_backward(dweights, cache, attn_cfg):
    """Returns dscores (B, H, T, L); learned_length_backward gives the factor's parameters' gradient."""
    scores, _, factor = cache
    # Differentiates weights = factor_h * h(scores).
    return dweights * factor * pointwise_derivative(attn_cfg.kind, scores)  # (B, H, T, L)


def learned_length_backward(dweights, cache, attn_cfg):
    """Returns {"alpha": (H,), "log_scale": (H,)}, the gradient of the learned parameters given dweights
    (B, H, T, L); 0 for the one the config does not learn."""
    scores, weights, _ = cache
    # Differentiates weights = e^(log factor_h) * h(s): d log factor_h = sum over (B, T, L) of dw * w.
    dlog_factor = np.einsum("bhtl,bhtl->h", dweights, weights)  # (H,)
    # log factor_h = log scale + beta_h - alpha_h log L.
    return {"alpha": -math.log(scores.shape[-1]) * dlog_factor * attn_cfg.learn_alpha,  # (H,)
            "log_scale": dlog_factor * attn_cfg.learn_scale}  # (H,)
