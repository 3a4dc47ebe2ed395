"""The block's MLP, fc2(act(fc1(x))) (B, T, D) -> (B, T, D); its backward is jax.grad's.

Read as a key-value memory (Shen et al. 2023): the columns of fc1.w are M keys, the rows of fc2.w are M
values, and act(x W1 + b1) says how much of each slot is read. The activations:
    gelu, relu    the usual FFN
    softmax       a classic memory read: softmax over the M slots
    softmax_ln    LN(softmax(x W1 + b1) W2 + b2) with params mlp.ln: "softmax + LN ~ relu"
"""

from __future__ import annotations

from .layers import dense, gelu, layernorm, relu, softmax

ACTIVATIONS = {  # name -> the activation, (B, T, M) -> (B, T, M); fast: the custom-derivative GELU
    "gelu": lambda hidden, fast: gelu(hidden, fast),
    "relu": lambda hidden, fast: relu(hidden),
    "softmax": lambda hidden, fast: softmax(hidden),
    "softmax_ln": lambda hidden, fast: softmax(hidden),
}


def mlp(x, params, activation, compute_dtype=None, fast=False):
    """x (B, T, D) -> (B, T, D)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"mlp activation must be one of {', '.join(ACTIVATIONS)}; got {activation!r}")
    hidden = dense(x, params["fc1"], compute_dtype, fast)  # (B, T, M)
    read = ACTIVATIONS[activation](hidden, fast)  # (B, T, M), softmax: over the M slots
    out = dense(read, params["fc2"], compute_dtype, fast)  # (B, T, D)
    if activation == "softmax_ln":
        # Softmax reads have small variance; the LayerNorm restores their scale (Shen et al. 2023).
        out = layernorm(out, params["ln"], fast)  # (B, T, D)
    return out
