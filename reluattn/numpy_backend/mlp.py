"""The block's MLP, fc2(act(fc1(x))), with its backward (shapes: legend in __init__.py).

Read as a key-value memory (Shen et al. 2023): the columns of fc1.w are M keys, the rows of fc2.w are M
values, and act(x W1 + b1) says how much of each slot is read. The activations:
    gelu, relu    the usual FFN
    softmax       a classic memory read: softmax over the M slots
    softmax_ln    LN(softmax(x W1 + b1) W2 + b2) with params mlp.ln: "softmax + LN ~ relu"
"""

from __future__ import annotations

from typing import NamedTuple

from .layers import (DenseCache, LayerNormCache, dense_backward, dense_forward, gelu_backward, gelu_forward,
                     layernorm_backward, layernorm_forward, relu_backward, relu_forward, softmax_backward,
                     softmax_forward)

ACTIVATIONS = {  # name -> (forward, backward) of the point-wise (or over-M) activation
    "gelu": (gelu_forward, gelu_backward),
    "relu": (relu_forward, relu_backward),
    "softmax": (softmax_forward, softmax_backward),
    "softmax_ln": (softmax_forward, softmax_backward),
}


class MlpCache(NamedTuple):
    fc1: DenseCache
    activation: tuple              # the activation's own cache (GeluCache, ReluCache or SoftmaxCache)
    fc2: DenseCache
    ln: LayerNormCache | None      # None unless softmax_ln


def mlp_forward(x, params, activation):
    """x (B, T, D) -> (B, T, D)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"mlp activation must be one of {', '.join(ACTIVATIONS)}; got {activation!r}")
    activation_forward, _ = ACTIVATIONS[activation]
    hidden, fc1_cache = dense_forward(x, params["fc1"])  # (B, T, M)
    read, activation_cache = activation_forward(hidden)  # (B, T, M), softmax: over the M slots
    out, fc2_cache = dense_forward(read, params["fc2"])  # (B, T, D)
    ln_cache = None  # nothing cached without the LayerNorm
    if activation == "softmax_ln":
        # Softmax reads have small variance; the LayerNorm restores their scale (Shen et al. 2023).
        out, ln_cache = layernorm_forward(out, params["ln"])  # (B, T, D)
    return out, MlpCache(fc1_cache, activation_cache, fc2_cache, ln_cache)


def mlp_backward(dout, cache, activation):
    """Returns (dx (B, T, D), grads of the MLP's parameters {"fc1", "fc2", ["ln"]})."""
    fc1_cache, activation_cache, fc2_cache, ln_cache = cache
    _, activation_backward = ACTIVATIONS[activation]
    grads = {}
    if activation == "softmax_ln":
        # Differentiates out = LN(out).
        dout, grads["ln"] = layernorm_backward(dout, ln_cache)  # (B, T, D)
    # Differentiates out = dense(read, fc2).
    dread, grads["fc2"] = dense_backward(dout, fc2_cache)  # (B, T, M)
    # Differentiates read = act(hidden).
    dhidden = activation_backward(dread, activation_cache)  # (B, T, M)
    # Differentiates hidden = dense(x, fc1).
    dx, grads["fc1"] = dense_backward(dhidden, fc1_cache)  # (B, T, D)
    return dx, grads
