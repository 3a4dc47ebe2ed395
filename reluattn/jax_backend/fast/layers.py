"""LayerNorm's normalisation and the tanh GELU with hand-written derivative rules (custom_jvp), used by
`layers.layernorm` and `layers.gelu` when fast=True.

Why (docs/performance.md, "The ViT training step on CPU" > "What made it faster", the last point):
autodiff of their formulas saves several full-size intermediates for the backward pass (five (B, T, M)
arrays for the tanh GELU) and walks them again; with these rules it saves one (and one per row for
LayerNorm), and the backward is one fused element-wise pass. The values are those of the plain functions
in ../layers.py (tests/parity/test_jax_vs_numpy.py checks both paths against the NumPy backend).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

GELU_C = math.sqrt(2 / math.pi)  # the tanh approximation's constant


def _normalized(x, eps):
    """((x - mean) / sqrt(variance + eps), 1 / sqrt(variance + eps)) over the last axis."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    rstd = jax.lax.rsqrt(jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True) + eps)
    return (x - mean) * rstd, rstd


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def normalize(x, eps):
    """(x - mean) / sqrt(variance + eps) over the last axis."""
    return _normalized(x, eps)[0]


@normalize.defjvp
def _normalize_jvp(eps, primals, tangents):
    (x,), (x_dot,) = primals, tangents
    out, rstd = _normalized(x, eps)
    # d out = rstd (dx - mean(dx) - out mean(dx out)): the mean and the variance move with x too.
    centred = x_dot - jnp.mean(x_dot, axis=-1, keepdims=True)
    return out, rstd * (centred - out * jnp.mean(x_dot * out, axis=-1, keepdims=True))


@jax.custom_jvp
def gelu(x):
    """GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return jax.nn.gelu(x, approximate=True)


@gelu.defjvp
def _gelu_jvp(primals, tangents):
    (x,), (x_dot,) = primals, tangents
    tanh = jnp.tanh(GELU_C * (x + 0.044715 * x**3))
    slope = 0.5 * (1 + tanh) + 0.5 * x * (1 - jnp.square(tanh)) * GELU_C * (1 + 3 * 0.044715 * jnp.square(x))
    return 0.5 * x * (1 + tanh), slope * x_dot
