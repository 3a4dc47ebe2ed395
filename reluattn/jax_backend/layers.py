"""The small layers of the ViT, as pure functions of explicit parameters (shapes: legend in the NumPy
backend's __init__.py). Their backward is jax.grad's; the NumPy twin, numpy_backend/layers.py, writes it
by hand.

Every function takes the parameters' dtype (float32, or float64 with x64 on). Two opt-in switches:
    compute_dtype=jnp.bfloat16  matmul inputs rounded to bfloat16, products summed in float32; everything
                                between matmuls (LayerNorm, softmax, the loss) stays in the parameters' dtype
    fast=True                   the matmuls, LayerNorm and GELU of jax_backend/fast/ (custom derivative
                                rules that make XLA:CPU faster; reverse-mode autodiff only)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .fast import layers as fast_layers
from .fast import matmul as fast_matmul

LAYERNORM_EPS = 1e-6


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


def matmul(equation: str, a, b, compute_dtype=None, fast=False):
    """`jnp.einsum(equation, a, b)`, the result in a and b's dtype; with a compute_dtype the inputs are
    rounded to it and the products summed in float32 (or wider)."""
    if fast:
        return fast_matmul.matmul(equation, a, b, compute_dtype)
    if compute_dtype is None:
        return jnp.einsum(equation, a, b)
    dtype = jnp.result_type(a, b)
    summed = jnp.promote_types(dtype, jnp.float32)
    return jnp.einsum(equation, a.astype(compute_dtype), b.astype(compute_dtype),
                      preferred_element_type=summed).astype(dtype)


def dense(x, params: dict, compute_dtype=None, fast=False):
    """x @ w + b with w stored (in, out); x is (..., in), any leading axes."""
    return matmul("...i,io->...o", x, params["w"], compute_dtype, fast) + params["b"]  # (..., out)


def layernorm(x, params: dict, fast=False):
    """LayerNorm over the last axis: biased variance, eps 1e-6, learned scale, and a bias when params has
    one (qk-norm's LayerNorm has a scale only)."""
    if fast:
        out = fast_layers.normalize(x, LAYERNORM_EPS)  # (..., F)
    else:
        mean = jnp.mean(x, axis=-1, keepdims=True)  # (..., 1)
        out = (x - mean) * jax.lax.rsqrt(jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True) + LAYERNORM_EPS)
    out = out * params["scale"]  # (..., F)
    return out + params["bias"] if "bias" in params else out


def gelu(x, fast=False):
    """GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return fast_layers.gelu(x) if fast else jax.nn.gelu(x, approximate=True)


def relu(x):
    """max(x, 0), with derivative 0 at exactly 0 (like the NumPy backend)."""
    return jax.nn.relu(x)


def silu(x):
    """x * sigmoid(x), the gate's activation."""
    return jax.nn.silu(x)


def softmax(x):
    """Softmax over the last axis."""
    return jax.nn.softmax(x, axis=-1)


def targets_from_labels(labels, num_classes, label_smoothing=0.0, dtype=jnp.float32):
    """(B,) integer labels or (B, K) probabilities -> (B, K) targets, smoothed as
    (1 - label_smoothing) * targets + label_smoothing / K."""
    if labels.ndim == 1:
        targets = jax.nn.one_hot(labels, num_classes, dtype=dtype)  # (B, K)
    else:
        targets = labels.astype(dtype)  # (B, K) soft targets (mixup)
    return (1.0 - label_smoothing) * targets + label_smoothing / num_classes  # (B, K)


def cross_entropy(logits, targets):
    """Mean over the batch of -sum_k targets * log_softmax(logits)."""
    log_probs = jax.nn.log_softmax(logits, axis=-1)  # (B, K)
    return -jnp.mean(jnp.sum(targets * log_probs, axis=-1))
