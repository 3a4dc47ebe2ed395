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
    """A two-input einsum summed and returned in float32, done as one batched matmul in a layout XLA's CPU
    matmul kernel (YNNPACK) takes: left (batch, rows, summed), right (batch, summed or columns, the other).

    XLA runs a bfloat16 matmul whose inputs come otherwise -- even after a plain transpose, which XLA keeps
    as a relabelling of the axes rather than moving data -- as a float32 one. So the inputs are put in
    that layout here: free when their axes are in that order already, else a real transpose. Of the ways
    to get there (either input on the left, computing out or out^T = b^T a^T) take the one that moves
    the least data.
    """
    a_axes, b_axes, out_axes = re.split(",|->", equation)
    sizes = {**dict(zip(a_axes, a.shape)), **dict(zip(b_axes, b.shape))}
    plans = [_plan(a_axes, b_axes, out_axes, sizes), _plan(b_axes, a_axes, out_axes, sizes)]
    cost, left_groups, right_groups, out_order = min(plans, key=lambda plan: plan[0])
    left, right = (a, b) if left_groups == plans[0][1] else (b, a)
    left_axes, right_axes = (a_axes, b_axes) if left is a else (b_axes, a_axes)
    size = lambda axes: math.prod(sizes[axis] for axis in axes)  # noqa: E731
    left = _as_matrices(left, left_axes, left_groups, size)  # (batch, rows, summed)
    right = _as_matrices(right, right_axes, right_groups, size)  # (batch, summed, columns) or (batch, columns, summed)
    summed_axis = 1 if right_groups[1] == left_groups[2] else 2
    out = jax.lax.dot_general(left, right, (((2,), (summed_axis,)), ((0,), (0,))),
                              preferred_element_type=jnp.float32)  # (batch, rows, columns)
    out = out.reshape([sizes[axis] for axis in out_order])  # free
    if out_order != list(out_axes):  # the barrier: else XLA may turn transpose(matmul) into a matmul of transposes
        out = _transpose(jax.lax.optimization_barrier(out), [out_order.index(axis) for axis in out_axes])
    return out.reshape([sizes[axis] for axis in out_axes])


def _plan(left_axes, right_axes, out_axes, sizes):
    """(data moved, left's axis groups, right's axis groups, matmul output order) with `left` on the left."""
    batch = [axis for axis in out_axes if axis in left_axes and axis in right_axes]
    summed = [axis for axis in left_axes if axis in right_axes and axis not in out_axes]
    rows = [axis for axis in left_axes if axis not in batch + summed]
    columns = [axis for axis in right_axes if axis not in batch + summed]
    left_groups = [batch, rows, summed]
    right_groups = min([batch, summed, columns], [batch, columns, summed],
                       key=lambda groups: _moved(right_axes, sum(groups, []), sizes))
    out_order = batch + rows + columns
    cost = (_moved(left_axes, sum(left_groups, []), sizes) + _moved(right_axes, sum(right_groups, []), sizes)
            + _moved(out_order, list(out_axes), sizes))
    return cost, left_groups, right_groups, out_order


def _moved(axes, order, sizes):
    """A cost for laying out an array with `axes` in `order`: 0 if it already is; its size if whole rows
    move (the last axis stays last); three times that if the last axis changes (element by element)."""
    if list(axes) == list(order):
        return 0
    return math.prod(sizes[axis] for axis in axes) * (1 if axes[-1] == order[-1] else 3)


def _as_matrices(x, axes, groups, size):
    """x as a 3-D array: its axes in the order of `groups` (three lists of axis names), each group merged."""
    order, shape = sum(groups, []), tuple(size(group) for group in groups)
    if list(axes) == order:
        return x.reshape(shape)  # free
    permutation = [axes.index(axis) for axis in order]
    moved = _transpose(x, permutation)
    if moved.shape == shape:  # the reshape below must change the shape, or XLA sees the bare transpose
        moved = x.transpose(permutation)
    # The barrier keeps XLA from folding the transpose back into the matmul.
    return jax.lax.optimization_barrier(moved.reshape(shape))


def _transpose(x, permutation):
    """x.transpose(permutation) with axes that stay neighbours merged (the result's shape shows the merged
    axes): XLA:CPU moves a (8320, 384) array many times faster than the same data as (128, 65, 384)."""
    runs = []  # runs of source axes that stay adjacent and in order
    for axis in permutation:
        if runs and axis == runs[-1][-1] + 1:
            runs[-1].append(axis)
        else:
            runs.append([axis])
    in_source_order = sorted(runs)
    merged = x.reshape([math.prod(x.shape[axis] for axis in run) for run in in_source_order])
    return merged.transpose([in_source_order.index(run) for run in runs])


low_precision_einsum.defvjp(_low_precision_forward, _low_precision_backward)


def dense(x, layer: dict, compute_dtype=None):
    """x @ w + b over the last axis: (..., n_in) -> (..., n_out); weights are stored (in, out)."""
    return matmul("...i,io->...o", x, layer["w"], compute_dtype) + layer["b"]


def layer_norm(x, norm: dict):
    """LayerNorm over the last axis: biased variance, eps 1e-6, learned scale and bias."""
    return _normalize(x) * norm["scale"] + norm["bias"]


@jax.custom_vjp
def _normalize(x):
    """(x - mean) / sqrt(variance + eps) over the last axis.

    A custom_vjp because autodiff of the three-line formula saves three full-size intermediates and walks
    them in several passes; this saves the input (kept alive anyway) and two numbers per row, and does
    the backward in one fused pass.
    """
    return _normalize_forward(x)[0]


def _normalize_forward(x):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    rstd = jax.lax.rsqrt(jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True) + LAYER_NORM_EPS)
    return (x - mean) * rstd, (x, mean, rstd)


def _normalize_backward(residuals, out_grad):
    x, mean, rstd = residuals
    normalized = (x - mean) * rstd
    # d/dx of (x - mean) * rstd, contracted with out_grad (the usual LayerNorm backward).
    grad = out_grad - jnp.mean(out_grad, axis=-1, keepdims=True)
    grad = grad - normalized * jnp.mean(out_grad * normalized, axis=-1, keepdims=True)
    return (grad * rstd,)


_normalize.defvjp(_normalize_forward, _normalize_backward)


def scale_only_layer_norm(x, scale):
    """qk-layernorm (ViT-22B): LayerNorm over the head width with a learned scale (Dh,) and no bias."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    variance = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(variance + LAYER_NORM_EPS) * scale


@jax.custom_vjp
def gelu(x):
    """GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (the SPEC's form).

    A custom_vjp for the same reason as _normalize: autodiff saved five (B, T, M) intermediates; this
    saves x and recomputes the tanh in the backward.
    """
    return jax.nn.gelu(x, approximate=True)


def _gelu_forward(x):
    return gelu(x), x


def _gelu_backward(x, out_grad):
    inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
    tanh = jnp.tanh(inner)
    inner_grad = math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * jnp.square(x))
    return (out_grad * (0.5 * (1 + tanh) + 0.5 * x * (1 - jnp.square(tanh)) * inner_grad),)


gelu.defvjp(_gelu_forward, _gelu_backward)


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
