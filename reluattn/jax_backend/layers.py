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

import functools
import math
import re

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
    """`jnp.einsum(equation, a, b)`; with a `compute_dtype`, a low-precision matmul (see low_precision_einsum)."""
    if compute_dtype is None:
        return jnp.einsum(equation, a, b)
    if "..." in equation:  # name the axes it stands for (a's leading ones), so the backward can use them
        equation = equation.replace("...", "ABCDEFGH"[:a.ndim - len(equation.split(",")[0]) + 3])
    dtype = jnp.result_type(a, b)  # one dtype in, the same out (and for the gradients)
    return low_precision_einsum(equation, compute_dtype, a.astype(dtype), b.astype(dtype))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def low_precision_einsum(equation: str, compute_dtype, a, b):
    """`jnp.einsum(equation, a, b)` for a and b of one dtype, with both rounded to `compute_dtype` (bfloat16),
    products summed in float32 and the result returned in a's dtype; the backward's matmuls do the same.

    Why a custom_vjp: CPU matmul kernels (XLA's YNNPACK) take bfloat16 inputs only with a float32 result,
    and XLA runs any other bfloat16 matmul as a float32 one. Autodiff of a plain einsum with
    `preferred_element_type=float32` would pass its float32 output gradient straight to the backward
    matmuls, making them float32 ones; here that gradient is rounded to bfloat16 first, as the forward's
    inputs were.
    """
    return _low_precision_forward(equation, compute_dtype, a, b)[0]


def _low_precision_forward(equation, compute_dtype, a, b):
    low_a, low_b = a.astype(compute_dtype), b.astype(compute_dtype)
    return float32_einsum(equation, low_a, low_b).astype(a.dtype), (low_a, low_b)


def _low_precision_backward(equation, compute_dtype, residuals, out_grad):
    low_a, low_b = residuals  # the rounded inputs: half the memory of the originals
    a_axes, b_axes, out_axes = re.split(",|->", equation)
    # An einsum is linear in each input: each gradient is another einsum of the output gradient with the
    # other input (every axis of a is an axis of b or of the output, as in all of this model's matmuls).
    low_grad = out_grad.astype(compute_dtype)
    a_grad = float32_einsum(f"{out_axes},{b_axes}->{a_axes}", low_grad, low_b)
    b_grad = float32_einsum(f"{a_axes},{out_axes}->{b_axes}", low_a, low_grad)
    return a_grad.astype(out_grad.dtype), b_grad.astype(out_grad.dtype)


def float32_einsum(equation: str, a, b):
    """A two-input einsum summed and returned in float32, done as one batched matmul in the layout XLA's CPU
    matmul kernel (YNNPACK) takes: a as (batch, rows, summed), b as (batch, summed, columns).

    XLA runs a bfloat16 matmul whose inputs come otherwise -- even a plain transpose, which XLA keeps as a
    relabelling of the axes rather than moving data -- as a float32 one; the reshape makes each transpose
    a real copy. Both are free when the axes are in that order already.
    """
    a_axes, b_axes, out_axes = re.split(",|->", equation)
    batch = [axis for axis in out_axes if axis in a_axes and axis in b_axes]
    summed = [axis for axis in a_axes if axis in b_axes and axis not in out_axes]
    rows = [axis for axis in a_axes if axis not in batch + summed]
    columns = [axis for axis in b_axes if axis not in batch + summed]
    sizes = {**dict(zip(a_axes, a.shape)), **dict(zip(b_axes, b.shape))}
    size = lambda axes: math.prod(sizes[axis] for axis in axes)  # noqa: E731
    a = _as_matrices(a, a_axes, batch + rows + summed, size(batch), size(rows), size(summed))
    b = _as_matrices(b, b_axes, batch + summed + columns, size(batch), size(summed), size(columns))
    out = jax.lax.dot_general(a, b, (((2,), (1,)), ((0,), (0,))), preferred_element_type=jnp.float32)
    out = out.reshape([sizes[axis] for axis in batch + rows + columns])
    return jnp.einsum(f"{''.join(batch + rows + columns)}->{out_axes}", out)  # a transpose


def _as_matrices(x, axes, order, *shape):
    """x with its axes put in `order` and grouped into a 3-D `shape`; a real copy when that moves data."""
    if list(axes) == order:
        return x.reshape(shape)  # free
    x = jnp.einsum(f"{axes}->{''.join(order)}", x).reshape(shape)  # a transpose
    # Keep XLA from folding the transpose back into the matmul (which it does when the reshape is free).
    return jax.lax.optimization_barrier(x)


low_precision_einsum.defvjp(_low_precision_forward, _low_precision_backward)


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
