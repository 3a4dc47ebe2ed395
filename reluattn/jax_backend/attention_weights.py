"""Attention weights from scores, for every kind (shapes: B batch, H heads, T queries, L keys).

    softmax:       w = softmax_j(s)                   (alpha and scale are ignored)
    sigmoid_bias:  w = scale * sigmoid(s - log L)     (alpha is ignored; Ramapuram et al. 2024, neither paper)
    point-wise:    w = scale * L^(-alpha) * h(s)      h in relu, relu2, gelu, softplus, sigmoid, relu6, identity

L is the number of keys (the last axis of the scores). With h = relu and alpha = 1 this is ReLU / L
(Wortsman et al. 2023). The derivative of relu at exactly 0 is 0, and relu6's is 0 at 0 and at 6
(jax.nn.relu / jax.nn.relu6 define these; jnp.maximum would give 1/2 at the tie).

This file is the one home of h(s) (`POINTWISE`) and of `scale * L^-alpha` (`length_factor`) in the JAX
backend: the dense core, the causal weights of long_sequences.py and the fast tiled kernels
(fast/blocked_attention.py, fast/pallas_attention.py) all build their weights from them. The NumPy twin
also lists h'(s); here autodiff derives it.

The learned length factor (AttentionConfig.learn_alpha / learn_scale; beyond both papers): per head,
w = scale * exp(beta_h) * L^(-alpha_h) * h(s), with alpha_h, beta_h the block's parameters attn.length.alpha
and attn.length.log_scale (H,), initialised at AttentionConfig.alpha and 0 (see the NumPy twin); the one
not learned is held fixed by stop_gradient, as the NumPy backward gives it gradient 0.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

# h(s) for the point-wise kinds, applied entry by entry to the scores.
POINTWISE = {
    "relu": jax.nn.relu,
    "relu2": lambda s: jnp.square(jax.nn.relu(s)),
    "gelu": lambda s: jax.nn.gelu(s, approximate=True),
    "softplus": jax.nn.softplus,
    "sigmoid": jax.nn.sigmoid,
    "relu6": jax.nn.relu6,
    "identity": lambda s: s,
}


def _log(num_keys):
    """log L: a Python float for a number (so float32 scores stay float32), else per-query logs."""
    return math.log(num_keys) if isinstance(num_keys, (int, float)) else jnp.log(num_keys)


def pointwise(kind, scores, num_keys=None):
    """h(s) for a point-wise kind (or sigmoid_bias, whose h needs num_keys: a number, or per-query counts
    that broadcast against the scores), shaped like the scores."""
    if kind == "sigmoid_bias":
        return jax.nn.sigmoid(scores - _log(num_keys))  # the bias -log L makes the expected row sum O(1)
    if kind not in POINTWISE:
        raise ValueError(f"unknown point-wise attention kind {kind!r}")
    return POINTWISE[kind](scores)


def length_factor(attn_cfg, num_keys, length=None):
    """The constant in front of h(s): scale * L^(-alpha) (sigmoid_bias: scale, its L is inside h).
    attn_cfg: anything with kind, alpha and scale; num_keys: a number, or per-query counts (an array).
    With `length`, the learned parameters {"alpha": (H,), "log_scale": (H,)}: scale * exp(log_scale_h) *
    L^(-alpha_h) per head, (H, 1, 1) (num_keys a number); the one the config does not learn is held fixed."""
    if length is not None:
        alpha, log_scale = length["alpha"], length["log_scale"]  # (H,) each
        alpha = alpha if attn_cfg.learn_alpha else jax.lax.stop_gradient(alpha)
        log_scale = log_scale if attn_cfg.learn_scale else jax.lax.stop_gradient(log_scale)
        return attn_cfg.scale * jnp.exp(log_scale - alpha * math.log(num_keys))[:, None, None]  # (H, 1, 1)
    alpha = 0.0 if attn_cfg.kind == "sigmoid_bias" else attn_cfg.alpha
    return attn_cfg.scale * num_keys ** -alpha


def attention_weights(scores, attn_cfg, num_keys: int | None = None, length=None):
    """Scores (..., L) -> weights (..., L) of kind attn_cfg.kind, over the last axis. L, the number of keys,
    is the last axis unless `num_keys` says otherwise. length: the learned length parameters of a ViT
    block (scores then (B, H, T, L)), or None."""
    if attn_cfg.kind == "softmax":
        return jax.nn.softmax(scores, axis=-1)  # (..., L)
    num_keys = scores.shape[-1] if num_keys is None else num_keys
    return length_factor(attn_cfg, num_keys, length) * pointwise(attn_cfg.kind, scores, num_keys)  # (..., L)
