"""The fast matmul (fast=True): an einsum of two arrays, in the precision asked for, laid out for the CPU.

    matmul("btd,de->bte", x, w)                        # float32 or float64, like jnp.einsum
    matmul("btd,de->bte", x, w, jnp.dtype("bfloat16"))  # bfloat16 inputs, float32 sums and result

Precision. With `compute_dtype=None` a matmul runs in its inputs' dtype. With `compute_dtype=bfloat16`
both inputs are rounded to bfloat16, the products are summed in float32 and the result comes back in the
inputs' dtype; the two matmuls of its backward pass do the same (their incoming gradient is rounded to
bfloat16 first). Everything between matmuls (biases, activations, LayerNorm, softmax, the loss) stays in
the parameters' dtype.

Why not plain jnp.einsum. XLA:CPU hands matmuls to the YNNPACK library, whose bfloat16 kernels (AMX on
recent Intel CPUs) only produce float32; any other bfloat16 matmul XLA silently runs as a float32 one,
several times slower. So the result must be float32 (`preferred_element_type`), and autodiff must not be
left to derive the backward, which would pass the float32 gradient on and make the backward matmuls
float32 too: hence a custom_vjp. YNNPACK also wants its left input as (batch, rows, summed) in memory,
and XLA falls back to float32 (or, for bfloat16, fails at run time) when it is not; XLA keeps a plain
transpose as a relabelling of axes rather than moving data, so `float32_einsum` makes each transpose a
real copy, choosing among the equivalent layouts the one that moves the least data. float32 matmuls go
through the same custom_vjp with float32 as the compute dtype, so that their backward matmuls get these
layouts too: left to autodiff, the weight gradients x^T dy ran on XLA's generic dot (9% of a float32
training step; 1.17x faster steps with the custom_vjp). Forward-mode autodiff (jax.jvp) therefore does
not go through float32 or bfloat16 matmuls here; float64 ones are plain einsums. The default path
(fast=False) uses layers.matmul, a plain einsum, and supports every transform.
Why, measured: docs/performance.md, "The ViT training step on CPU" > "What made it faster" (bfloat16 that
is really bfloat16; float32 matmuls through the same custom_vjp) and "Where the time goes".
"""

from __future__ import annotations

import functools
import math
import re

import jax
import jax.numpy as jnp


def matmul(equation: str, a, b, compute_dtype=None):
    """`jnp.einsum(equation, a, b)` for two arrays of one dtype (the result has it too), with the inputs
    rounded to `compute_dtype` (a canonical dtype or None) when one is given. A "..." may stand for a's
    leading axes."""
    if "..." in equation:  # name the axes it stands for, so that the layouts and the backward can use them
        equation = equation.replace("...", "ABCDEFGH"[:a.ndim - len(equation.split(",")[0]) + 3])
    dtype = jnp.result_type(a, b)
    if compute_dtype is not None:
        return low_precision_einsum(equation, compute_dtype, a.astype(dtype), b.astype(dtype))
    if dtype == jnp.float32:
        return low_precision_einsum(equation, jnp.dtype(jnp.float32), a, b)
    return jnp.einsum(equation, a, b)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def low_precision_einsum(equation: str, compute_dtype, a, b):
    """The einsum of a and b (one dtype) rounded to `compute_dtype`, summed in float32, returned in a's
    dtype; its backward matmuls likewise (see the module docstring for why this is a custom_vjp)."""
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


low_precision_einsum.defvjp(_low_precision_forward, _low_precision_backward)


def float32_einsum(equation: str, a, b):
    """A two-input einsum (explicit axes, no "...") summed and returned in float32, as one batched matmul
    in a layout YNNPACK takes: left (batch, rows, summed), right (batch, summed or columns, the other).

    Inputs already in such a layout are only reshaped (free); others are transposed into a copy. Of the
    ways to get there (either input on the left, computing out, or out^T = b^T a^T, transposed back) it
    takes the one that moves the least data.
    """
    a_axes, b_axes, out_axes = re.split(",|->", equation)
    sizes = {**dict(zip(a_axes, a.shape)), **dict(zip(b_axes, b.shape))}
    size = lambda axes: math.prod(sizes[axis] for axis in axes)  # noqa: E731
    plans = [_plan(a_axes, b_axes, out_axes, sizes), _plan(b_axes, a_axes, out_axes, sizes)]
    swap = plans[1][0] < plans[0][0]
    _, left_groups, right_groups, out_order = plans[swap]
    (left, left_axes), (right, right_axes) = ((b, b_axes), (a, a_axes)) if swap else ((a, a_axes), (b, b_axes))
    left = _as_matrices(left, left_axes, left_groups, size)  # (batch, rows, summed)
    right = _as_matrices(right, right_axes, right_groups, size)  # (batch, summed, columns) or (batch, columns, summed)
    summed_axis = 1 if right_groups[1] == left_groups[2] else 2
    out = jax.lax.dot_general(left, right, (((2,), (summed_axis,)), ((0,), (0,))),
                              preferred_element_type=jnp.float32)  # (batch, rows, columns)
    out = out.reshape([sizes[axis] for axis in out_order])  # free
    if out_order != list(out_axes):  # the barrier: else XLA turns transpose(matmul) into a matmul of transposes
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
