"""The tiled blocked attention behind long_sequences.blocked_attention (impl="blocked"): forward and
backward one (query block x key block) tile at a time.

Shapes: B batch, H heads, T queries, L keys (= T in self-attention), Dh head width; N = B * H heads in
all, G of them per step; a tile holds bq queries and bk keys. Nothing here holds a T x L array: the
forward keeps a (G, bq, Dh) running sum per query block, and the backward (a `jax.custom_vjp`) recomputes
each tile's scores instead of saving them.

    point-wise kinds:  out_i = c_i * sum_j h(s_ij) v_j,  c_i = scale * n_i^-alpha   (sigmoid_bias: c_i = scale,
                       h_i(s) = sigmoid(s - log n_i)).  No normaliser, so each tile just adds its read.
        backward, per tile, with g_i = c_i * dout_i:   dv_j += h(s_ij) g_i,  ds_ij = h'(s_ij) (g_i . v_j),
                       dq_i += ds_ij k_j,  dk_j += ds_ij q_i                          (5 matmuls per tile)
    softmax:           the online (flash) update: running max m_i and normaliser z_i per query; saves
                       out and lse_i = m_i + log z_i.  Backward: p_ij = exp(s_ij - lse_i),
                       ds_ij = p_ij (dout_i . v_j - dout_i . out_i).

The length factor c_i multiplies the (T, Dh) output (and dout), not the T x L weights. Keys and queries
are zero-padded to whole blocks: a zero key row with a zero value row adds nothing to a point-wise read,
and padded queries are cut off at the end, so only softmax (whose normaliser would count padded keys)
and causal attention need masks. Causal attention visits only the tiles on or below the diagonal.

Why a hand-written backward and this tiling: docs/performance.md, "Blocked attention" > "Where the time
goes, and what made it fast" (autodiff of the loops would save every tile's weights, the O(T L) memory
this exists to avoid). Speed on CPU: heads are walked G at a time with G * bq * bk about 512 * 512, so a
tile's score, weight and gradient arrays stay in the core's L2 cache between the matmul that writes them
and the one that reads them; and every matmul reads its left operand row by row (the layouts XLA:CPU
gives to its fast YNNPACK kernels). That is why the backward computes its tiles keys-first, s^T = k q^T.

Precision: scores, weights and every sum are float32 (or the inputs' wider dtype); with
`compute_dtype=jnp.bfloat16` the matmul inputs are rounded to bfloat16 first (accumulation stays float32).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...checks import CAUSAL_LENGTHS
from ..attention_weights import length_factor, pointwise  # h(s) and scale * n^-alpha, shared with the dense path

DEFAULT_QUERY_BLOCK_SIZE = 1024  # queries per tile when the call gives none ...
HALF_PRECISION_QUERY_BLOCK_SIZE = 512  # ... and with bfloat16 matmuls past one tile (docs/performance.md)
TILE_ELEMENTS = 512 * 512  # heads per step G: as many as keep G * bq * bk at about this many scores


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
    compute_dtype: str | None  # matmul input dtype ("bfloat16"), None: the inputs' dtype


# ------------------------------------------------------------------------------------------ tile pieces

def _to_compute(plan, x):
    """x in the plan's compute dtype (a no-op without one)."""
    return x if plan.compute_dtype is None else x.astype(plan.compute_dtype)


def _all_to_compute(plan, *arrays):
    """Cast whole (G, L, Dh) arrays once, before the loops, behind an optimization barrier. The barrier
    keeps XLA from moving the cast into the loops (it would convert every tile again at each visit) and
    from folding the backward's k^T back into a matmul as a transposed operand: XLA:CPU runs those on its
    slow generic path, which has no bfloat16 x bfloat16 -> float32 kernel at all."""
    return lax.optimization_barrier(tuple(_to_compute(plan, x) for x in arrays))


def _matmul(equation, a, b, plan, accumulate):
    """einsum in the plan's compute dtype, summed in `accumulate` (float32 or wider)."""
    return jnp.einsum(equation, _to_compute(plan, a), _to_compute(plan, b), preferred_element_type=accumulate)


def _visible_key_counts(plan, query_start, size, dtype):
    """n_i, the L of each query of a block: (size,)."""
    if plan.causal and plan.causal_length == "per_query":
        return (query_start + 1 + lax.iota(jnp.int32, size)).astype(dtype)  # (bq,)
    return jnp.full((size,), plan.num_keys, dtype)  # (bq,)


def _length_factor(plan, counts):
    """c_i, what multiplies query i's summed read: scale * n_i^-alpha (sigmoid_bias: scale; softmax: 1)."""
    if plan.kind == "softmax":
        return jnp.ones_like(counts)
    return length_factor(plan, counts)  # (bq,)


def _visible(plan, query_start, key_start, keys_first=False):
    """(bq, bk) mask of the keys each query may read ((bk, bq) when keys_first), or None when every key
    of the tile is visible."""
    padded_keys = plan.kind == "softmax" and plan.num_keys % plan.key_block != 0
    if not (plan.causal or padded_keys):
        return None
    shape = (plan.key_block, plan.query_block) if keys_first else (plan.query_block, plan.key_block)
    key_index = key_start + lax.broadcasted_iota(jnp.int32, shape, 0 if keys_first else 1)
    if plan.causal:  # padded keys come after every real query, so this hides them too
        return key_index <= query_start + lax.broadcasted_iota(jnp.int32, shape, 1 if keys_first else 0)
    return key_index < plan.num_keys


def _pointwise_weights(plan, scores, query_start, key_start, keys_first=False):
    """h(s) of a (G, bq, bk) tile ((G, bk, bq) when keys_first), hidden keys set to 0 (the length factor
    comes later)."""
    counts = None
    if plan.kind == "sigmoid_bias":  # its h reads n_i: sigmoid(s - log n_i)
        counts = _visible_key_counts(plan, query_start, plan.query_block, scores.dtype)  # (bq,)
        counts = counts if keys_first else counts[:, None]
    weights = pointwise(plan.kind, scores, counts)
    visible = _visible(plan, query_start, key_start, keys_first)
    return weights if visible is None else jnp.where(visible, weights, 0.0)


def _masked_scores(plan, scores, query_start, key_start, keys_first=False):
    """Softmax's tile scores with hidden keys at -inf (exp gives them weight 0)."""
    visible = _visible(plan, query_start, key_start, keys_first)
    return scores if visible is None else jnp.where(visible, scores, -jnp.inf)


def _key_blocks_seen(plan, query_block_index):
    """How many key blocks query block i reads: all, or (causal) those starting at or before its last query."""
    num_key_blocks = -(-plan.num_keys // plan.key_block)
    if not plan.causal:
        return num_key_blocks
    last_query = (query_block_index + 1) * plan.query_block - 1
    return jnp.minimum(last_query // plan.key_block + 1, num_key_blocks)


def _first_query_block(plan, key_block_index):
    """The first query block that reads key block j (causal: the one holding query j * bk)."""
    return (key_block_index * plan.key_block) // plan.query_block if plan.causal else 0


def _rows(x, index, size, axis=1):
    """Block `index` of `size` rows (or columns, axis=2) of a (G, rows, Dh) array."""
    return lax.dynamic_slice_in_dim(x, index * size, size, axis=axis)


# --------------------------------------------------------------------------------------------- forward

def _forward(plan, q, k, v):
    """One step's heads, padded: q (G, Tp, Dh) (already divided by sqrt(Dh)), k, v (G, Lp, Dh) ->
    out (G, Tp, Dh) in the accumulation dtype, and per-query log-sum-exp (G, Tp) (softmax; zeros else).
    Outer loop over query blocks, inner loop over the key blocks they read."""
    heads, padded_queries, head_dim = q.shape
    accumulate = jnp.promote_types(q.dtype, jnp.float32)
    bq, bk = plan.query_block, plan.key_block
    q, k, v = _all_to_compute(plan, q, k, v)

    def query_block(i):
        q_tile = _rows(q, i, bq)  # (G, bq, Dh)
        query_start = i * bq

        def pointwise_step(j, total):
            scores = _matmul("gqd,gkd->gqk", q_tile, _rows(k, j, bk), plan, accumulate)  # (G, bq, bk)
            weights = _pointwise_weights(plan, scores, query_start, j * bk)  # (G, bq, bk)
            return total + _matmul("gqk,gkd->gqd", weights, _rows(v, j, bk), plan, accumulate)  # (G, bq, Dh)

        def softmax_step(j, carry):
            running_max, normaliser, total = carry  # (G, bq), (G, bq), (G, bq, Dh)
            scores = _matmul("gqd,gkd->gqk", q_tile, _rows(k, j, bk), plan, accumulate)  # (G, bq, bk)
            scores = _masked_scores(plan, scores, query_start, j * bk)
            # Every query sees key 0 (block 0 comes first), so the maximum is finite from then on.
            new_max = jnp.maximum(running_max, scores.max(axis=-1))  # (G, bq)
            rescale = jnp.exp(running_max - new_max)  # (G, bq); e^-inf = 0 on the first block
            unnormalised = jnp.exp(scores - new_max[..., None])  # (G, bq, bk)
            normaliser = normaliser * rescale + unnormalised.sum(axis=-1)  # (G, bq)
            read = _matmul("gqk,gkd->gqd", unnormalised, _rows(v, j, bk), plan, accumulate)  # (G, bq, Dh)
            return new_max, normaliser, total * rescale[..., None] + read

        total = jnp.zeros((heads, bq, head_dim), accumulate)  # (G, bq, Dh)
        if plan.kind != "softmax":
            total = lax.fori_loop(0, _key_blocks_seen(plan, i), pointwise_step, total)
            counts = _visible_key_counts(plan, query_start, bq, accumulate)  # (bq,)
            return total * _length_factor(plan, counts)[:, None], None
        stats = jnp.full((heads, bq), -jnp.inf, accumulate)  # (G, bq)
        running_max, normaliser, total = lax.fori_loop(
            0, _key_blocks_seen(plan, i), softmax_step, (stats, jnp.zeros_like(stats), total))
        return total / normaliser[..., None], running_max + jnp.log(normaliser)

    def write_query_block(i, outputs):
        # Written in place into (G, Tp, ...) buffers: no stacking and transposing of per-block results.
        out, log_sum_exp = outputs
        out_tile, log_sum_exp_tile = query_block(i)
        out = lax.dynamic_update_slice_in_dim(out, out_tile, i * bq, axis=1)
        if log_sum_exp_tile is not None:
            log_sum_exp = lax.dynamic_update_slice_in_dim(log_sum_exp, log_sum_exp_tile, i * bq, axis=1)
        return out, log_sum_exp

    outputs = (jnp.zeros(q.shape, accumulate), jnp.zeros(q.shape[:2], accumulate))  # (G, Tp, Dh), (G, Tp)
    return lax.fori_loop(0, padded_queries // bq, write_query_block, outputs)


# -------------------------------------------------------------------------------------------- backward

def _backward(plan, q, k, v, out, log_sum_exp, dout):
    """Gradients of one step's padded core with respect to q (scaled), k, v; tile scores are recomputed.

    Outer loop over key blocks j (dk_j and dv_j summed in (G, bk, Dh) carries), inner loop over the query
    blocks that read block j; dq is carried across the outer loop. Tiles are computed keys-first,
    s^T = k q^T (G, bk, bq), so that every matmul reads its left operand row by row: dv_j += h(s^T) g,
    dk_j += ds^T q, and dq^T += k_j^T ds^T with k^T made once up front.
    """
    heads, padded_queries, head_dim = q.shape
    accumulate = jnp.promote_types(q.dtype, jnp.float32)
    bq, bk = plan.query_block, plan.key_block
    if plan.kind == "softmax":
        # dout_i . out_i, the softmax Jacobian's row term (the same for every key block).
        row_term = jnp.sum(dout.astype(accumulate) * out, axis=-1)  # (G, Tp)
    else:
        # Fold c_i into dout once: d(c_i * read_i) = c_i * dout_i.
        counts = _visible_key_counts(plan, 0, padded_queries, accumulate)  # (Tp,)
        dout = dout.astype(accumulate) * _length_factor(plan, counts)[:, None]  # (G, Tp, Dh)
    q, k, v, dout, k_transposed = _all_to_compute(plan, q, k, v, dout, jnp.swapaxes(k, 1, 2))  # k^T: (G, Dh, Lp)

    def key_block(j, grads):
        dq_transposed, dk, dv = grads  # (G, Dh, Tp), (G, Lp, Dh), (G, Lp, Dh)
        k_tile, v_tile = _rows(k, j, bk), _rows(v, j, bk)  # (G, bk, Dh)
        kt_tile = _rows(k_transposed, j, bk, axis=2)  # (G, Dh, bk)
        key_start = j * bk

        def step(i, carry):
            dk_tile, dv_tile, dq_transposed = carry
            q_tile, dout_tile = _rows(q, i, bq), _rows(dout, i, bq)  # (G, bq, Dh)
            scores = _matmul("gkd,gqd->gkq", k_tile, q_tile, plan, accumulate)  # (G, bk, bq)
            dweights = _matmul("gkd,gqd->gkq", v_tile, dout_tile, plan, accumulate)  # (G, bk, bq)
            if plan.kind == "softmax":
                scores = _masked_scores(plan, scores, i * bq, key_start, keys_first=True)
                weights = jnp.exp(scores - _rows(log_sum_exp, i, bq)[:, None, :])  # (G, bk, bq)
                dscores = weights * (dweights - _rows(row_term, i, bq)[:, None, :])  # (G, bk, bq)
            else:
                weights, derivative = jax.jvp(
                    lambda s: _pointwise_weights(plan, s, i * bq, key_start, keys_first=True),
                    (scores,), (jnp.ones_like(scores),))  # h(s), h'(s): (G, bk, bq)
                dscores = dweights * derivative  # (G, bk, bq)
            dv_tile = dv_tile + _matmul("gkq,gqd->gkd", weights, dout_tile, plan, accumulate)  # (G, bk, Dh)
            dk_tile = dk_tile + _matmul("gkq,gqd->gkd", dscores, q_tile, plan, accumulate)  # (G, bk, Dh)
            dq_tile = (_rows(dq_transposed, i, bq, axis=2)
                       + _matmul("gdk,gkq->gdq", kt_tile, dscores, plan, accumulate))  # (G, Dh, bq)
            return dk_tile, dv_tile, lax.dynamic_update_slice_in_dim(dq_transposed, dq_tile, i * bq, axis=2)

        zeros = jnp.zeros((heads, bk, head_dim), accumulate)  # (G, bk, Dh)
        dk_tile, dv_tile, dq_transposed = lax.fori_loop(
            _first_query_block(plan, j), padded_queries // bq, step, (zeros, zeros, dq_transposed))
        return (dq_transposed, lax.dynamic_update_slice_in_dim(dk, dk_tile, key_start, axis=1),
                lax.dynamic_update_slice_in_dim(dv, dv_tile, key_start, axis=1))

    grads = (jnp.zeros((heads, head_dim, padded_queries), accumulate),  # dq^T (G, Dh, Tp)
             jnp.zeros(k.shape, accumulate), jnp.zeros(v.shape, accumulate))  # dk, dv (G, Lp, Dh)
    dq_transposed, dk, dv = lax.fori_loop(0, k.shape[1] // bk, key_block, grads)
    # The barrier keeps XLA from merging this transpose into the dq matmuls (transposed operands again).
    dq_transposed = lax.optimization_barrier(dq_transposed)
    return jnp.swapaxes(dq_transposed, 1, 2), dk, dv


# ------------------------------------------------------------------------------------ the custom VJP

def _map_steps(plan, function, arrays):
    """lax.map of function over the steps of G heads. Steps are (S, G, rows, ...) arrays, or (N, rows, ...)
    when G = 1: a size-1 axis there would cost XLA:CPU an extra copy of every input and output."""
    if plan.heads_per_step > 1:
        return lax.map(lambda step: function(*step), arrays)
    squeeze = functools.partial(jax.tree.map, lambda x: x[0])
    return lax.map(lambda step: squeeze(function(*[x[None] for x in step])), arrays)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _core(plan, q, k, v):
    """q (S, G, Tp, Dh), k and v (S, G, Lp, Dh), S steps of G heads (G = 1: no G axis) -> out like q."""
    return _core_forward(plan, q, k, v)[0]


def _core_forward(plan, q, k, v):
    out, log_sum_exp = _map_steps(plan, functools.partial(_forward, plan), (q, k, v))
    # Saved for the backward: O(T Dh) arrays only, never the T x L weights.
    if plan.kind == "softmax":
        return out, (q, k, v, out, log_sum_exp)
    return out, (q, k, v, None, None)


def _core_backward(plan, residuals, dout):
    q, k, v, out, log_sum_exp = residuals
    if plan.kind == "softmax":
        grads = _map_steps(plan, functools.partial(_backward, plan), (q, k, v, out, log_sum_exp, dout))
    else:
        grads = _map_steps(plan, lambda q, k, v, dout: _backward(plan, q, k, v, None, None, dout), (q, k, v, dout))
    return tuple(grad.astype(x.dtype) for grad, x in zip(grads, (q, k, v)))


_core.defvjp(_core_forward, _core_backward)


# ---------------------------------------------------------------------------------------- entry point

def _largest_divisor_at_most(n, limit):
    return max(d for d in range(1, min(n, max(limit, 1)) + 1) if n % d == 0)


def make_plan(attn_cfg, num_queries, num_keys, num_heads=1, *, block_size, query_block_size=None,
              heads_per_step=None, causal=False, causal_length="per_query", compute_dtype=None,
              input_dtype=jnp.float32) -> Plan:
    """The static description of a call: block sizes clipped to the sequence lengths, and the heads per
    step (G, a divisor of num_heads = B * H) that keep G * bq * bk near TILE_ELEMENTS."""
    if causal_length not in CAUSAL_LENGTHS:
        raise ValueError(f"causal_length must be one of {', '.join(CAUSAL_LENGTHS)}; got {causal_length!r}")
    if causal and num_queries != num_keys:
        raise ValueError(f"causal attention needs as many queries as keys, got {num_queries} and {num_keys}")
    if query_block_size is None:
        # bfloat16 matmuls are ~3x faster, so the float32 score tiles weigh more: smaller ones do better.
        half = jnp.dtype(compute_dtype or input_dtype).itemsize < 4 and num_queries > DEFAULT_QUERY_BLOCK_SIZE
        query_block_size = HALF_PRECISION_QUERY_BLOCK_SIZE if half else DEFAULT_QUERY_BLOCK_SIZE
    for name, value in (("block_size", block_size), ("query_block_size", query_block_size),
                        ("heads_per_step", 1 if heads_per_step is None else heads_per_step)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    query_block, key_block = int(min(query_block_size, num_queries)), int(min(block_size, num_keys))
    if heads_per_step is None:
        heads_per_step = _largest_divisor_at_most(num_heads, TILE_ELEMENTS // (query_block * key_block))
    elif num_heads % heads_per_step:
        raise ValueError(f"heads_per_step ({heads_per_step}) must divide batch * heads ({num_heads})")
    compute_dtype = None if compute_dtype is None else jnp.dtype(compute_dtype).name
    return Plan(attn_cfg.kind, attn_cfg.alpha, attn_cfg.scale, num_queries, num_keys, query_block, key_block,
                int(heads_per_step), bool(causal), causal_length, compute_dtype)


def _padded_steps(x, rows, heads_per_step):
    """(B, L, H, Dh) -> (N / G, G, rows, Dh), or (N, rows, Dh) when G = 1: heads first and flattened, zero
    rows added at the end."""
    batch, length, heads, head_dim = x.shape
    x = jnp.swapaxes(x, 1, 2).reshape(batch * heads, length, head_dim)  # (N, L, Dh)
    x = jnp.pad(x, ((0, 0), (0, rows - length), (0, 0))) if rows > length else x  # (N, rows, Dh)
    return x if heads_per_step == 1 else x.reshape(batch * heads // heads_per_step, heads_per_step, rows, head_dim)


def blocked_attention(q, k, v, attn_cfg, *, block_size, query_block_size=None, causal=False,
                      causal_length="per_query", compute_dtype=None, heads_per_step=None):
    """q (B, T, H, Dh), k and v (B, L, H, Dh) -> (B, T, H, Dh), the same values as dense attention,
    with O((T + L) Dh + G bq bk) memory in the forward and the backward. Traceable (call it under jit).

    block_size: keys per tile (long_sequences.blocked_attention picks the default);
    query_block_size: queries per tile (default 1024; 512 with bfloat16 matmuls on more than 1024 queries);
    causal: query i sees keys j <= i, n_i = i + 1 (causal_length="per_query") or L ("global");
    compute_dtype: e.g. jnp.bfloat16 for bfloat16 matmul inputs with float32 accumulation;
    heads_per_step: G, how many of the B * H heads each tile holds (default: see make_plan)."""
    batch, num_queries, heads, head_dim = q.shape
    plan = make_plan(attn_cfg, num_queries, k.shape[1], batch * heads, block_size=block_size,
                     query_block_size=query_block_size, heads_per_step=heads_per_step, causal=causal,
                     causal_length=causal_length, compute_dtype=compute_dtype, input_dtype=q.dtype)
    out_dtype = jnp.result_type(q, k, v)
    scaled_q = q * (1.0 / math.sqrt(head_dim))  # scale the (T, Dh) queries, not the T x L scores
    padded_queries = -(-plan.num_queries // plan.query_block) * plan.query_block
    padded_keys = -(-plan.num_keys // plan.key_block) * plan.key_block
    out = _core(plan, _padded_steps(scaled_q, padded_queries, plan.heads_per_step),
                _padded_steps(k, padded_keys, plan.heads_per_step),
                _padded_steps(v, padded_keys, plan.heads_per_step))  # (N / G, G, Tp, Dh) or (N, Tp, Dh)
    out = out.reshape(batch, heads, padded_queries, head_dim)[:, :, :num_queries]  # (B, H, T, Dh)
    return jnp.swapaxes(out, 1, 2).astype(out_dtype)  # (B, T, H, Dh)
