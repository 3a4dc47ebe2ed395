"""Blocked attention in JAX: forward and backward one (query block x key block) tile at a time.

Shapes: B batch, H heads, T queries, L keys (= T in self-attention), Dh head width; tiles hold `bq`
queries and `bk` keys. Nothing here ever holds a T x L array: the forward keeps a (bq, Dh) running sum per
query block, and the backward (a `jax.custom_vjp`) recomputes each tile's scores instead of saving them.

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

DEFAULT_BLOCK_SIZE = 512  # keys per tile when neither the call nor AttentionConfig.block_size gives one
DEFAULT_QUERY_BLOCK_SIZE = 512  # queries per tile when not given
CAUSAL_LENGTHS = ("per_query", "global")

# h(s) for the point-wise kinds (jax.nn.relu and relu6 have derivative 0 at their kinks, like NumPy's).
POINTWISE = {
    "relu": jax.nn.relu,
    "relu2": lambda s: jnp.square(jax.nn.relu(s)),
    "gelu": lambda s: jax.nn.gelu(s, approximate=True),
    "softplus": jax.nn.softplus,
    "sigmoid": jax.nn.sigmoid,
    "relu6": jax.nn.relu6,
    "identity": lambda s: s,
}


class Plan(NamedTuple):
    """Everything static about one blocked attention call (hashable: it is part of the jit cache key)."""
    kind: str
    alpha: float
    scale: float
    num_queries: int          # T before padding
    num_keys: int             # L before padding
    query_block: int          # bq
    key_block: int            # bk
    causal: bool
    causal_length: str        # "per_query" or "global"
    compute_dtype: str | None  # matmul input dtype ("bfloat16"), None: the inputs' dtype


# ------------------------------------------------------------------------------------------ tile pieces

def _matmul(equation, a, b, plan, accumulate):
    """einsum in the plan's compute dtype, summed in `accumulate` (float32 or wider)."""
    if plan.compute_dtype is not None:
        a, b = a.astype(plan.compute_dtype), b.astype(plan.compute_dtype)
    return jnp.einsum(equation, a, b, preferred_element_type=accumulate)


def _visible_key_counts(plan, query_start, size, dtype):
    """n_i, the L of each query of a block: (size,)."""
    if plan.causal and plan.causal_length == "per_query":
        return (query_start + 1 + lax.iota(jnp.int32, size)).astype(dtype)  # (bq,)
    return jnp.full((size,), plan.num_keys, dtype)  # (bq,)


def _length_factor(plan, counts):
    """c_i, what multiplies query i's summed read: scale * n_i^-alpha (sigmoid_bias: scale; softmax: 1)."""
    if plan.kind == "softmax":
        return jnp.ones_like(counts)
    if plan.kind == "sigmoid_bias":
        return jnp.full_like(counts, plan.scale)
    return plan.scale * counts ** -plan.alpha  # (bq,)


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
    """h(s) of a (B, H, bq, bk) tile ((B, H, bk, bq) when keys_first), hidden keys set to 0 (the length
    factor comes later)."""
    if plan.kind == "sigmoid_bias":
        log_counts = jnp.log(_visible_key_counts(plan, query_start, plan.query_block, scores.dtype))  # (bq,)
        weights = jax.nn.sigmoid(scores - (log_counts if keys_first else log_counts[:, None]))
    else:
        weights = POINTWISE[plan.kind](scores)
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


def _block(x, index, size):
    """Block `index` of `size` rows along axis 2 of (B, H, rows, Dh)."""
    return lax.dynamic_slice_in_dim(x, index * size, size, axis=2)


# --------------------------------------------------------------------------------------------- forward

def _forward(plan, q, k, v):
    """Padded, heads-first q (B, H, Tp, Dh) (already divided by sqrt(Dh)), k, v (B, H, Lp, Dh) ->
    out (B, H, Tp, Dh) in the accumulation dtype, and per-query log-sum-exp (B, H, Tp) (softmax) or None."""
    batch, heads, padded_queries, head_dim = q.shape
    accumulate = jnp.promote_types(q.dtype, jnp.float32)
    bq, bk = plan.query_block, plan.key_block

    def query_block(i):
        q_tile = _block(q, i, bq)  # (B, H, bq, Dh)
        query_start = i * bq

        def pointwise_step(j, total):
            scores = _matmul("bhqd,bhkd->bhqk", q_tile, _block(k, j, bk), plan, accumulate)  # (B, H, bq, bk)
            weights = _pointwise_weights(plan, scores, query_start, j * bk)  # (B, H, bq, bk)
            return total + _matmul("bhqk,bhkd->bhqd", weights, _block(v, j, bk), plan, accumulate)

        def softmax_step(j, carry):
            running_max, normaliser, total = carry  # (B, H, bq), (B, H, bq), (B, H, bq, Dh)
            scores = _matmul("bhqd,bhkd->bhqk", q_tile, _block(k, j, bk), plan, accumulate)  # (B, H, bq, bk)
            scores = _masked_scores(plan, scores, query_start, j * bk)
            # Every query sees key 0 (block 0 comes first), so the maximum is finite from then on.
            new_max = jnp.maximum(running_max, scores.max(axis=-1))  # (B, H, bq)
            rescale = jnp.exp(running_max - new_max)  # (B, H, bq); e^-inf = 0 on the first block
            unnormalised = jnp.exp(scores - new_max[..., None])  # (B, H, bq, bk)
            normaliser = normaliser * rescale + unnormalised.sum(axis=-1)  # (B, H, bq)
            read = _matmul("bhqk,bhkd->bhqd", unnormalised, _block(v, j, bk), plan, accumulate)
            return new_max, normaliser, total * rescale[..., None] + read

        total = jnp.zeros((batch, heads, bq, head_dim), accumulate)  # (B, H, bq, Dh)
        if plan.kind != "softmax":
            total = lax.fori_loop(0, _key_blocks_seen(plan, i), pointwise_step, total)
            counts = _visible_key_counts(plan, query_start, bq, accumulate)  # (bq,)
            return total * _length_factor(plan, counts)[:, None], jnp.zeros((batch, heads, bq), accumulate)
        stats = jnp.full((batch, heads, bq), -jnp.inf, accumulate)  # (B, H, bq)
        running_max, normaliser, total = lax.fori_loop(
            0, _key_blocks_seen(plan, i), softmax_step, (stats, jnp.zeros_like(stats), total))
        return total / normaliser[..., None], running_max + jnp.log(normaliser)

    out, log_sum_exp = lax.map(query_block, jnp.arange(padded_queries // bq))  # (nq, B, H, bq, Dh), (nq, B, H, bq)
    out = jnp.moveaxis(out, 0, 2).reshape(batch, heads, padded_queries, head_dim)  # (B, H, Tp, Dh)
    log_sum_exp = jnp.moveaxis(log_sum_exp, 0, 2).reshape(batch, heads, padded_queries)  # (B, H, Tp)
    return out, log_sum_exp


# -------------------------------------------------------------------------------------------- backward

def _backward(plan, q, k, v, out, log_sum_exp, dout):
    """Gradients of the padded core with respect to q (scaled), k, v; each tile's scores are recomputed.

    Outer loop over key blocks j (dk_j and dv_j summed in (bk, Dh) carries), inner loop over the query
    blocks that read block j; dq is carried across the outer loop. Tiles are computed keys-first,
    s^T = k q^T (bk, bq), so that every matmul reads its left operand row by row (the layouts XLA:CPU
    hands to its fast YNNPACK kernels; a contraction over the left operand's rows falls back to a
    slower path): dv_j += h(s^T) g, dk_j += ds^T q, and dq^T += k_j^T ds^T with k^T made once up front.
    """
    batch, heads, padded_queries, head_dim = q.shape
    accumulate = jnp.promote_types(q.dtype, jnp.float32)
    bq, bk = plan.query_block, plan.key_block
    num_query_blocks = padded_queries // bq
    if plan.kind == "softmax":
        # dout_i . out_i, the softmax Jacobian's row term (the same for every key block).
        row_term = jnp.sum(dout.astype(accumulate) * out, axis=-1)  # (B, H, Tp)
    else:
        # Fold c_i into dout once: d(c_i * read_i) = c_i * dout_i.
        counts = _visible_key_counts(plan, 0, padded_queries, accumulate)  # (Tp,)
        dout = dout.astype(accumulate) * _length_factor(plan, counts)[:, None]  # (B, H, Tp, Dh)
    k_transposed = jnp.swapaxes(k, 2, 3)  # (B, H, Dh, Lp)

    def key_block(dq_transposed, j):
        k_tile, v_tile = _block(k, j, bk), _block(v, j, bk)  # (B, H, bk, Dh)
        kt_tile = lax.dynamic_slice_in_dim(k_transposed, j * bk, bk, axis=3)  # (B, H, Dh, bk)
        key_start = j * bk

        def step(i, carry):
            dk_tile, dv_tile, dq_transposed = carry
            q_tile, dout_tile = _block(q, i, bq), _block(dout, i, bq)  # (B, H, bq, Dh)
            scores = _matmul("bhkd,bhqd->bhkq", k_tile, q_tile, plan, accumulate)  # (B, H, bk, bq)
            dweights = _matmul("bhkd,bhqd->bhkq", v_tile, dout_tile, plan, accumulate)  # (B, H, bk, bq)
            if plan.kind == "softmax":
                scores = _masked_scores(plan, scores, i * bq, key_start, keys_first=True)
                log_sum_exp_tile = lax.dynamic_slice_in_dim(log_sum_exp, i * bq, bq, axis=2)  # (B, H, bq)
                row_term_tile = lax.dynamic_slice_in_dim(row_term, i * bq, bq, axis=2)  # (B, H, bq)
                weights = jnp.exp(scores - log_sum_exp_tile[:, :, None, :])  # (B, H, bk, bq)
                dscores = weights * (dweights - row_term_tile[:, :, None, :])  # (B, H, bk, bq)
            else:
                weights, derivative = jax.jvp(
                    lambda s: _pointwise_weights(plan, s, i * bq, key_start, keys_first=True),
                    (scores,), (jnp.ones_like(scores),))  # h(s), h'(s): (B, H, bk, bq)
                dscores = dweights * derivative  # (B, H, bk, bq)
            dv_tile = dv_tile + _matmul("bhkq,bhqd->bhkd", weights, dout_tile, plan, accumulate)
            dk_tile = dk_tile + _matmul("bhkq,bhqd->bhkd", dscores, q_tile, plan, accumulate)
            dq_tile = (lax.dynamic_slice_in_dim(dq_transposed, i * bq, bq, axis=3)
                       + _matmul("bhdk,bhkq->bhdq", kt_tile, dscores, plan, accumulate))  # (B, H, Dh, bq)
            return dk_tile, dv_tile, lax.dynamic_update_slice_in_dim(dq_transposed, dq_tile, i * bq, axis=3)

        zeros = jnp.zeros((batch, heads, bk, head_dim), accumulate)  # (B, H, bk, Dh)
        dk_tile, dv_tile, dq_transposed = lax.fori_loop(
            _first_query_block(plan, j), num_query_blocks, step, (zeros, zeros, dq_transposed))
        return dq_transposed, (dk_tile, dv_tile)

    num_key_blocks = k.shape[2] // bk
    dq_transposed = jnp.zeros((batch, heads, head_dim, padded_queries), accumulate)  # (B, H, Dh, Tp)
    dq_transposed, (dk, dv) = lax.scan(key_block, dq_transposed, jnp.arange(num_key_blocks))
    dk = jnp.moveaxis(dk, 0, 2).reshape(k.shape)  # (B, H, Lp, Dh)
    dv = jnp.moveaxis(dv, 0, 2).reshape(v.shape)  # (B, H, Lp, Dh)
    return jnp.swapaxes(dq_transposed, 2, 3), dk, dv


# ------------------------------------------------------------------------------------ the custom VJP

@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _core(plan, q, k, v):
    return _forward(plan, q, k, v)[0]


def _core_forward(plan, q, k, v):
    out, log_sum_exp = _forward(plan, q, k, v)
    # Saved for the backward: O(T Dh) arrays only, never the T x L weights.
    return out, (q, k, v, out if plan.kind == "softmax" else None, log_sum_exp if plan.kind == "softmax" else None)


def _core_backward(plan, residuals, dout):
    q, k, v, out, log_sum_exp = residuals
    dq, dk, dv = _backward(plan, q, k, v, out, log_sum_exp, dout)
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype)


_core.defvjp(_core_forward, _core_backward)


# ---------------------------------------------------------------------------------------- entry point

def _pad_rows(x, rows):
    """Zero-pad axis 2 of (B, H, L, Dh) to `rows`."""
    return x if x.shape[2] == rows else jnp.pad(x, ((0, 0), (0, 0), (0, rows - x.shape[2]), (0, 0)))


def make_plan(attn_cfg, num_queries, num_keys, *, block_size=None, query_block_size=None, causal=False,
              causal_length="per_query", compute_dtype=None) -> Plan:
    """The static description of a call (block sizes clipped to the sequence lengths)."""
    if causal_length not in CAUSAL_LENGTHS:
        raise ValueError(f"causal_length must be one of {', '.join(CAUSAL_LENGTHS)}; got {causal_length!r}")
    if causal and num_queries != num_keys:
        raise ValueError(f"causal attention needs as many queries as keys, got {num_queries} and {num_keys}")
    if block_size is None:
        block_size = attn_cfg.block_size or DEFAULT_BLOCK_SIZE
    if query_block_size is None:
        query_block_size = DEFAULT_QUERY_BLOCK_SIZE
    for name, value in (("block_size", block_size), ("query_block_size", query_block_size)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    compute_dtype = None if compute_dtype is None else jnp.dtype(compute_dtype).name
    return Plan(attn_cfg.kind, attn_cfg.alpha, attn_cfg.scale, num_queries, num_keys,
                int(min(query_block_size, num_queries)), int(min(block_size, num_keys)), bool(causal), causal_length,
                compute_dtype)


def blocked_attention(q, k, v, attn_cfg, *, block_size=None, query_block_size=None, causal=False,
                      causal_length="per_query", compute_dtype=None):
    """q (B, T, H, Dh), k and v (B, L, H, Dh) -> (B, T, H, Dh), the same values as dense attention,
    with O((T + L) Dh + bq bk) memory in the forward and the backward. Traceable (call it under jit).

    block_size: keys per tile (default attn_cfg.block_size, else DEFAULT_BLOCK_SIZE);
    query_block_size: queries per tile (default DEFAULT_QUERY_BLOCK_SIZE);
    causal: query i sees keys j <= i, n_i = i + 1 (causal_length="per_query") or L ("global");
    compute_dtype: e.g. jnp.bfloat16 for bfloat16 matmul inputs with float32 accumulation."""
    plan = make_plan(attn_cfg, q.shape[1], k.shape[1], block_size=block_size, query_block_size=query_block_size,
                     causal=causal, causal_length=causal_length, compute_dtype=compute_dtype)
    out_dtype = jnp.result_type(q, k, v)
    scaled_q = q * (1.0 / math.sqrt(q.shape[-1]))  # scale the (T, Dh) queries, not the T x L scores
    heads_first = [jnp.swapaxes(x, 1, 2) for x in (scaled_q, k, v)]  # (B, H, T or L, Dh): tiles contiguous
    padded_queries = -(-plan.num_queries // plan.query_block) * plan.query_block
    padded_keys = -(-plan.num_keys // plan.key_block) * plan.key_block
    q_h, k_h, v_h = (_pad_rows(x, rows) for x, rows in zip(heads_first, (padded_queries, padded_keys, padded_keys)))
    out = _core(plan, q_h, k_h, v_h)[:, :, :plan.num_queries]  # (B, H, T, Dh)
    return jnp.swapaxes(out, 1, 2).astype(out_dtype)  # (B, T, H, Dh)
