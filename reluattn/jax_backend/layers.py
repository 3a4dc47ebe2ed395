"""The small pieces of the ViT: dense layers, LayerNorm, GELU, the MLP.

Every function here is a pure function of explicit parameters (a dict of arrays, the same leaves as
`reluattn.params.param_shapes`), traced inside the model's `jax.jit`. Matmuls go through
`matmul.matmul`, which owns the precision (`compute_dtype`, see matmul.py); everything here runs in the
parameters' dtype (float32, or float64 with x64 on), LayerNorm statistics included.

LayerNorm and GELU have custom JVP rules, giving the derivative in one fused expression: autodiff of their
formulas would save several full-size intermediates for the backward pass (five (B, T, M) arrays for the
tanh GELU) and walk them again; with these rules it saves one (and one per row for LayerNorm).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from .matmul import canonical_compute_dtype, matmul  # noqa: F401  (canonical_compute_dtype: re-exported)

LAYER_NORM_EPS = 1e-6


def dense(x, layer: dict, compute_dtype=None):
    """x @ w + b over the last axis: (..., n_in) -> (..., n_out); weights are stored (in, out)."""
    return matmul("...i,io->...o", x, layer["w"], compute_dtype) + layer["b"]


def layer_norm(x, norm: dict):
    """LayerNorm over the last axis: biased variance, eps 1e-6, learned scale and bias."""
    return normalize(x) * norm["scale"] + norm["bias"]


@jax.custom_jvp
def normalize(x):
    """(x - mean) / sqrt(variance + eps) over the last axis."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True) + LAYER_NORM_EPS)


@normalize.defjvp
def _normalize_jvp(primals, tangents):
    (x,), (x_dot,) = primals, tangents
    mean = jnp.mean(x, axis=-1, keepdims=True)
    rstd = jax.lax.rsqrt(jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True) + LAYER_NORM_EPS)
    out = (x - mean) * rstd
    # d out = rstd (dx - mean(dx) - out mean(dx out)): the mean and the variance move with x too.
    centred = x_dot - jnp.mean(x_dot, axis=-1, keepdims=True)
    return out, rstd * (centred - out * jnp.mean(x_dot * out, axis=-1, keepdims=True))


def scale_only_layer_norm(x, scale):
    """qk-layernorm (ViT-22B): LayerNorm over the head width with a learned scale (Dh,) and no bias."""
    return normalize(x) * scale


GELU_C = math.sqrt(2 / math.pi)


@jax.custom_jvp
def gelu(x):
    """GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (the SPEC's form)."""
    return jax.nn.gelu(x, approximate=True)


@gelu.defjvp
def _gelu_jvp(primals, tangents):
    (x,), (x_dot,) = primals, tangents
    tanh = jnp.tanh(GELU_C * (x + 0.044715 * x**3))
    slope = 0.5 * (1 + tanh) + 0.5 * x * (1 - jnp.square(tanh)) * GELU_C * (1 + 3 * 0.044715 * jnp.square(x))
    return 0.5 * x * (1 + tanh), slope * x_dot


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
