"""The small pieces of the ViT: dense layers, LayerNorm, the MLP, and the mixed-precision matmul they share.

Every function here is a pure function of explicit parameters (a dict of arrays, the same leaves as
`reluattn.params.param_shapes`), traced inside the model's `jax.jit`.

Precision. `compute_dtype=None` computes in the parameters' dtype (float32, or float64 with x64 on).
`compute_dtype=jnp.bfloat16` casts the two inputs of every matmul to bfloat16 and the matmul's result back
to the parameters' dtype, so the MLP/attention non-linearities, LayerNorm statistics, softmax and the loss
stay in float32. Because the cast back is part of the traced program, `jax.grad` casts the incoming
gradient to bfloat16 too, so the backward matmuls also run in bfloat16.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

LAYER_NORM_EPS = 1e-6


def canonical_compute_dtype(compute_dtype):
    """None, or the numpy dtype of a floating type (jnp.bfloat16, "bfloat16", np.float16, ...)."""
    if compute_dtype is None:
        return None
    try:
        dtype = jnp.dtype(compute_dtype)
    except TypeError:
        raise ValueError(f"compute_dtype must be None or a floating dtype such as jnp.bfloat16, "
                         f"got {compute_dtype!r}") from None
    if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(f"compute_dtype must be a floating dtype such as jnp.bfloat16, got {dtype}")
    return dtype


def matmul(equation: str, a, b, compute_dtype=None):
    """`jnp.einsum(equation, a, b)`, with its inputs cast to `compute_dtype` when one is given."""
    if compute_dtype is None:
        return jnp.einsum(equation, a, b)
    # Cast back so everything after the matmul (bias, activation, residual) runs in full precision.
    result_dtype = jnp.result_type(a, b)
    return jnp.einsum(equation, a.astype(compute_dtype), b.astype(compute_dtype)).astype(result_dtype)


def dense(x, layer: dict, compute_dtype=None):
    """x @ w + b over the last axis: (..., n_in) -> (..., n_out); weights are stored (in, out)."""
    return matmul("...i,io->...o", x, layer["w"], compute_dtype) + layer["b"]


def layer_norm(x, norm: dict):
    """LayerNorm over the last axis: biased variance, eps 1e-6, learned scale and bias."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    variance = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(variance + LAYER_NORM_EPS) * norm["scale"] + norm["bias"]


def scale_only_layer_norm(x, scale):
    """qk-layernorm (ViT-22B): LayerNorm over the head width with a learned scale (Dh,) and no bias."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    variance = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(variance + LAYER_NORM_EPS) * scale


def gelu(x):
    """GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (the SPEC's form)."""
    return jax.nn.gelu(x, approximate=True)


def mlp(x, params: dict, activation: str, compute_dtype=None):
    """The feed-forward block (B, T, D) -> (B, T, D).

    gelu / relu: fc2(act(fc1(x))).  softmax: fc2(softmax over the M hidden units of fc1(x)) -- a
    key-value memory read (Shen et al. 2023).  softmax_ln: LayerNorm(that read), with params["ln"].
    """
    hidden = dense(x, params["fc1"], compute_dtype)  # (B, T, M)
    if activation == "gelu":
        hidden = gelu(hidden)
    elif activation == "relu":
        hidden = jax.nn.relu(hidden)  # derivative 0 at exactly 0, like the NumPy backend
    elif activation in ("softmax", "softmax_ln"):
        hidden = jax.nn.softmax(hidden, axis=-1)
    else:
        raise ValueError(f"unknown mlp_activation {activation!r}")
    out = dense(hidden, params["fc2"], compute_dtype)  # (B, T, D)
    if activation == "softmax_ln":
        out = layer_norm(out, params["ln"])
    return out
