"""What one tile of blocked_attention.py computes and which keys it may read (shapes: G heads per step, a
tile of bq queries x bk keys, Tp and Lp the query and key counts padded to whole blocks).

A key is hidden from a query -- it neither weighs nor counts in the query's L -- when it is
  - padding added to make whole blocks (key j >= L),
  - after the query under a causal mask (j > i),
  - outside the local window (j < i - left or j > i + right),
  - past its sequence's length (j >= key_lengths[g], jax.nn's key_value_seq_lengths), or
  - given an additive bias <= config.HIDING_BIAS (-inf included; a bool mask arrives as a 0 / -inf bias).
The first four are built from indices, so they cost nothing to store, and they let whole tiles be skipped
(block_ranges); the bias is an array, sliced one tile at a time.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from ...config import HIDING_BIAS
from ..attention_weights import pointwise  # h(s), shared with the dense path


class Plan(NamedTuple):
    """Everything static about one blocked attention call (hashable: it is part of the jit cache key)."""
    kind: str
    alpha: float
    scale: float
    num_queries: int          # T before padding
    num_keys: int             # L before padding
    query_block: int          # bq
    key_block: int            # bk
    heads_per_step: int       # G
    causal: bool
    causal_length: str        # "per_query" or "global"
    window: tuple | None      # (left, right): query i reads keys i - left .. i + right; None: no window
    compute_dtype: str | None  # matmul input dtype ("bfloat16"), None: the inputs' dtype


class Hidden(NamedTuple):
    """One step's arrays for hiding keys (None: not used). counts is computed from the others, once."""
    counts: jax.Array | None       # (G, Tp) each query's number of visible keys n_i (at least 1); None: L
    key_lengths: jax.Array | None  # (G,) keys j >= key_lengths[g] are hidden from head g
    bias: jax.Array | None         # (G, Tp or 1, Lp or 1) added to the scores; <= HIDING_BIAS hides the key


def hides_keys(plan, hidden):
    """Whether anything but the padding of whole blocks hides a key."""
    return plan.causal or plan.window is not None or hidden.key_lengths is not None or hidden.bias is not None


# ------------------------------------------------------------------------------------------ tile pieces

def to_compute(plan, x):
    """x in the plan's compute dtype (a no-op without one)."""
    return x if plan.compute_dtype is None else x.astype(plan.compute_dtype)


def all_to_compute(plan, *arrays):
    """Cast whole (G, L, Dh) arrays once, before the loops, behind an optimization barrier. The barrier
    keeps XLA from moving the cast into the loops (it would convert every tile again at each visit) and
    from folding the backward's k^T back into a matmul as a transposed operand: XLA:CPU runs those on its
    slow generic path, which has no bfloat16 x bfloat16 -> float32 kernel at all."""
    return lax.optimization_barrier(tuple(to_compute(plan, x) for x in arrays))


def matmul(equation, a, b, plan, accumulate):
    """einsum in the plan's compute dtype, summed in `accumulate` (float32 or wider)."""
    return jnp.einsum(equation, to_compute(plan, a), to_compute(plan, b), preferred_element_type=accumulate)


def rows(x, index, size, axis=1):
    """Block `index` of `size` rows (or columns, axis=2) of a (G, rows, Dh) array."""
    return lax.dynamic_slice_in_dim(x, index * size, size, axis=axis)


def starts(*indices):
    """A start index for each axis of lax.dynamic_slice, all int32 (they must share one integer type)."""
    return tuple(jnp.asarray(index, jnp.int32) for index in indices)


def softmax_stand_in(dtype):
    """The score a hidden key gets in softmax: jax.nn's finite stand-in for -inf (e^(it - max) is 0 beside
    any real score, and a running maximum that starts at it is never -inf)."""
    return -0.7 * jnp.finfo(dtype).max


def query_counts(plan, hidden, query_start, keys_first=False):
    """n_i of a tile's queries, shaped to broadcast against its scores: (G, bq, 1), or (G, 1, bq) when
    keys_first; the number L when no key is hidden."""
    if hidden.counts is None:
        return plan.num_keys
    counts = lax.dynamic_slice_in_dim(hidden.counts, query_start, plan.query_block, axis=1)  # (G, bq)
    return counts[:, None, :] if keys_first else counts[:, :, None]


def bias_tile(plan, bias, query_start, key_start, keys_first=False):
    """The tile's slice of a step's bias: (G, bq or 1, bk or 1), swapped to (G, bk.., bq..) when keys_first."""
    per_query, per_key = bias.shape[1] > 1, bias.shape[2] > 1
    sizes = (bias.shape[0], plan.query_block if per_query else 1, plan.key_block if per_key else 1)
    at = starts(0, query_start if per_query else 0, key_start if per_key else 0)
    tile = lax.dynamic_slice(bias, at, sizes)  # (G, bq or 1, bk or 1)
    return jnp.swapaxes(tile, 1, 2) if keys_first else tile


def visible(plan, hidden, query_start, key_start, keys_first=False):
    """(G or 1, bq, bk) bool, the keys each query of the tile may read ((.., bk, bq) when keys_first),
    or None when the tile hides nothing."""
    padded_keys = plan.num_keys % plan.key_block != 0
    if not (hides_keys(plan, hidden) or (plan.kind == "softmax" and padded_keys)):
        return None
    shape = (plan.key_block, plan.query_block) if keys_first else (plan.query_block, plan.key_block)
    query = query_start + lax.broadcasted_iota(jnp.int32, shape, 1 if keys_first else 0)  # (bq, bk)
    key = key_start + lax.broadcasted_iota(jnp.int32, shape, 0 if keys_first else 1)  # (bq, bk)
    seen = (key < plan.num_keys)[None]  # (1, bq, bk): the padding of the last block is not a key
    if plan.causal:
        seen = seen & (key <= query)
    if plan.window is not None:
        left, right = plan.window
        seen = seen & (key >= query - left) & (key <= query + right)
    if hidden.key_lengths is not None:
        seen = seen & (key < hidden.key_lengths[:, None, None])  # (G, bq, bk)
    if hidden.bias is not None:
        seen = seen & (bias_tile(plan, hidden.bias, query_start, key_start, keys_first) > HIDING_BIAS)
    return seen


def biased(plan, hidden, scores, query_start, key_start, keys_first=False):
    """The tile's scores plus its bias (the scores themselves when there is none)."""
    if hidden.bias is None:
        return scores
    return scores + bias_tile(plan, hidden.bias, query_start, key_start, keys_first)  # (G, bq, bk)


def pointwise_weights(plan, hidden, scores, query_start, key_start, keys_first=False):
    """h(s + bias) of a (G, bq, bk) tile ((G, bk, bq) when keys_first), hidden keys set to 0 (the length
    factor comes later). A hidden score (perhaps -inf) is replaced by 0 before h, so h' is never NaN."""
    scores = biased(plan, hidden, scores, query_start, key_start, keys_first)  # (G, bq, bk)
    seen = visible(plan, hidden, query_start, key_start, keys_first)
    if seen is not None:
        scores = jnp.where(seen, scores, 0.0)  # (G, bq, bk)
    counts = query_counts(plan, hidden, query_start, keys_first) if plan.kind == "sigmoid_bias" else None
    weights = pointwise(plan.kind, scores, counts)  # (G, bq, bk); sigmoid_bias reads n_i: sigmoid(s - log n_i)
    return weights if seen is None else jnp.where(seen, weights, 0.0)


def softmax_scores(plan, hidden, scores, query_start, key_start):
    """Softmax's tile scores plus bias, hidden keys at the stand-in (the forward's tiles are queries-first)."""
    scores = biased(plan, hidden, scores, query_start, key_start)  # (G, bq, bk)
    seen = visible(plan, hidden, query_start, key_start)
    return scores if seen is None else jnp.where(seen, scores, softmax_stand_in(scores.dtype))


# ------------------------------------------------------------------------------------ which tiles to visit

def key_block_range(plan, hidden, query_block_index):
    """[first, stop): the key blocks that query block i may read (the others hide all their keys from it)."""
    first, stop = 0, -(-plan.num_keys // plan.key_block)
    query_start = query_block_index * plan.query_block
    last_query = query_start + plan.query_block - 1
    if plan.causal:  # keys j <= the block's last query
        stop = jnp.minimum(stop, last_query // plan.key_block + 1)
    if plan.window is not None:  # keys from first_query - left to last_query + right
        left, right = plan.window
        first = jnp.maximum(first, (query_start - left) // plan.key_block)
        stop = jnp.minimum(stop, (last_query + right) // plan.key_block + 1)
    if hidden.key_lengths is not None:  # keys before the longest of the step's sequences
        stop = jnp.minimum(stop, -(-jnp.max(hidden.key_lengths) // plan.key_block))
    return first, stop


def query_block_range(plan, hidden, key_block_index, num_query_blocks):
    """[first, stop): the query blocks that may read key block j (the transpose of key_block_range)."""
    first, stop = 0, num_query_blocks
    key_start = key_block_index * plan.key_block
    last_key = key_start + plan.key_block - 1
    if plan.causal:  # queries i >= the block's first key
        first = jnp.maximum(first, key_start // plan.query_block)
    if plan.window is not None:  # queries from first_key - right to last_key + left
        left, right = plan.window
        first = jnp.maximum(first, (key_start - right) // plan.query_block)
        stop = jnp.minimum(stop, (last_key + left) // plan.query_block + 1)
    if hidden.key_lengths is not None:  # nobody reads a block past the longest sequence
        stop = jnp.where(key_start < jnp.max(hidden.key_lengths), stop, first)
    return first, stop


# ------------------------------------------------------------------------------------------- counting

def count_visible_keys(plan, key_lengths, padded_queries):
    """n_i of every query, (..., Tp) int, when the ways of hiding are index ranges (no bias): query i reads
    keys max(0, i - left) <= j < min(L, i + 1 if causal, i + right + 1, key_lengths[n]).
    key_lengths: one per head (any shape, (S, G) say) or None."""
    query = jnp.arange(padded_queries)  # (Tp,)
    first, stop = jnp.zeros_like(query), jnp.full_like(query, plan.num_keys)  # (Tp,)
    if plan.causal and plan.causal_length == "per_query":
        stop = jnp.minimum(stop, query + 1)
    if plan.window is not None:
        left, right = plan.window
        first = jnp.maximum(first, query - left)
        stop = jnp.minimum(stop, query + right + 1)
    if key_lengths is not None:
        stop = jnp.minimum(stop, key_lengths[..., None])  # (S, G, Tp)
    return jnp.maximum(stop - first, 0)  # (Tp,) or (S, G, Tp)


def count_visible_keys_by_tiles(plan, hidden, padded_queries):
    """n_i of one step's queries, (G, Tp) int, summed tile by tile (a bias can hide any key)."""
    heads = plan.heads_per_step

    def query_block(i, counts):
        def key_block(j, row):
            seen = visible(plan, hidden, i * plan.query_block, j * plan.key_block)  # (G, bq, bk)
            return row + jnp.sum(seen, axis=-1, dtype=jnp.int32)  # (G, bq)
        row = lax.fori_loop(*key_block_range(plan, hidden, i), key_block,
                            jnp.zeros((heads, plan.query_block), jnp.int32))  # (G, bq)
        return lax.dynamic_update_slice_in_dim(counts, row, i * plan.query_block, axis=1)

    counts = jnp.zeros((heads, padded_queries), jnp.int32)  # (G, Tp)
    return lax.fori_loop(0, padded_queries // plan.query_block, query_block, counts)
