"""The forward and backward loops of blocked_attention.py over one step's G heads (the algorithm and the
shapes: that file's docstring; what one tile computes: blocked_tiles.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ..attention_weights import length_factor  # scale * n^-alpha, shared with the dense path
from .blocked_tiles import (all_to_compute, biased, key_block_range, matmul, pointwise_weights, query_block_range,
                            query_counts, rows, softmax_scores, softmax_stand_in, starts, visible)


def _length_factor(plan, counts):
    """c_i, what multiplies query i's summed read: scale * n_i^-alpha (sigmoid_bias: scale; softmax: 1)."""
    return 1.0 if plan.kind == "softmax" else length_factor(plan, counts)


# --------------------------------------------------------------------------------------------- forward

def forward(plan, q, k, v, hidden):
    """One step's heads, padded: q (G, Tp, Dh) (already divided by sqrt(Dh)), k, v (G, Lp, Dh) ->
    out (G, Tp, Dh) in the accumulation dtype, and per-query log-sum-exp (G, Tp) (softmax; zeros else).
    Outer loop over query blocks, inner loop over the key blocks they read."""
    heads, padded_queries, head_dim = q.shape
    accumulate = jnp.promote_types(q.dtype, jnp.float32)
    bq, bk = plan.query_block, plan.key_block
    q, k, v = all_to_compute(plan, q, k, v)

    def query_block(i):
        q_tile = rows(q, i, bq)  # (G, bq, Dh)
        query_start = i * bq

        def pointwise_step(j, total):
            scores = matmul("gqd,gkd->gqk", q_tile, rows(k, j, bk), plan, accumulate)  # (G, bq, bk)
            weights = pointwise_weights(plan, hidden, scores, query_start, j * bk)  # (G, bq, bk)
            return total + matmul("gqk,gkd->gqd", weights, rows(v, j, bk), plan, accumulate)  # (G, bq, Dh)

        def softmax_step(j, carry):
            running_max, normaliser, total = carry  # (G, bq), (G, bq), (G, bq, Dh)
            scores = matmul("gqd,gkd->gqk", q_tile, rows(k, j, bk), plan, accumulate)  # (G, bq, bk)
            scores = softmax_scores(plan, hidden, scores, query_start, j * bk)  # (G, bq, bk)
            new_max = jnp.maximum(running_max, scores.max(axis=-1))  # (G, bq)
            rescale = jnp.exp(running_max - new_max)  # (G, bq)
            unnormalised = jnp.exp(scores - new_max[..., None])  # (G, bq, bk)
            normaliser = normaliser * rescale + unnormalised.sum(axis=-1)  # (G, bq)
            read = matmul("gqk,gkd->gqd", unnormalised, rows(v, j, bk), plan, accumulate)  # (G, bq, Dh)
            return new_max, normaliser, total * rescale[..., None] + read

        total = jnp.zeros((heads, bq, head_dim), accumulate)  # (G, bq, Dh)
        blocks = key_block_range(plan, hidden, i)  # the key blocks this query block reads
        if plan.kind != "softmax":
            total = lax.fori_loop(*blocks, pointwise_step, total)  # (G, bq, Dh)
            return total * _length_factor(plan, query_counts(plan, hidden, query_start)), None
        # The running maximum starts at the stand-in hidden keys get, so it is never -inf.
        stats = jnp.full((heads, bq), softmax_stand_in(accumulate), accumulate)  # (G, bq)
        running_max, normaliser, total = lax.fori_loop(*blocks, softmax_step, (stats, jnp.zeros_like(stats), total))
        normaliser = jnp.where(normaliser > 0, normaliser, 1.0)  # (G, bq); 0 only when no tile was read
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

def _add_bias_grad(dbias, dscores, query_start, key_start):
    """dbias (G, Tp or 1, Lp or 1) plus a keys-first tile's dscores (G, bk, bq), summed over the axes along
    which the bias broadcasts (d bias = d scores: the bias is added to the scores)."""
    tile = jnp.swapaxes(dscores, 1, 2)  # (G, bq, bk)
    per_query, per_key = dbias.shape[1] > 1, dbias.shape[2] > 1
    tile = tile if per_query else tile.sum(axis=1, keepdims=True)  # (G, bq or 1, bk)
    tile = tile if per_key else tile.sum(axis=2, keepdims=True)  # (G, bq or 1, bk or 1)
    at = starts(0, query_start if per_query else 0, key_start if per_key else 0)
    return lax.dynamic_update_slice(dbias, lax.dynamic_slice(dbias, at, tile.shape) + tile, at)


def backward(plan, q, k, v, hidden, out, log_sum_exp, dout):
    """Gradients of one step's padded core with respect to q (scaled), k, v and the bias (None without
    one); tile scores are recomputed.

    Outer loop over key blocks j (dk_j and dv_j summed in (G, bk, Dh) carries), inner loop over the query
    blocks that read block j; dq (and dbias) are carried across the outer loop. Tiles are computed
    keys-first, s^T = k q^T (G, bk, bq), so that every matmul reads its left operand row by row:
    dv_j += h(s^T) g, dk_j += ds^T q, and dq^T += k_j^T ds^T with k^T made once up front.
    """
    heads, padded_queries, head_dim = q.shape
    accumulate = jnp.promote_types(q.dtype, jnp.float32)
    bq, bk = plan.query_block, plan.key_block
    if plan.kind == "softmax":
        # dout_i . out_i, the softmax Jacobian's row term (the same for every key block).
        row_term = jnp.sum(dout.astype(accumulate) * out, axis=-1)  # (G, Tp)
    else:
        # Fold c_i into dout once: d(c_i * read_i) = c_i * dout_i.
        counts = plan.num_keys if hidden.counts is None else hidden.counts[:, :, None]  # (G, Tp, 1)
        dout = dout.astype(accumulate) * _length_factor(plan, counts)  # (G, Tp, Dh)
    q, k, v, dout, k_transposed = all_to_compute(plan, q, k, v, dout, jnp.swapaxes(k, 1, 2))  # k^T: (G, Dh, Lp)

    def key_block(j, grads):
        dq_transposed, dk, dv, dbias = grads  # (G, Dh, Tp), (G, Lp, Dh), (G, Lp, Dh), bias-shaped or None
        k_tile, v_tile = rows(k, j, bk), rows(v, j, bk)  # (G, bk, Dh)
        kt_tile = rows(k_transposed, j, bk, axis=2)  # (G, Dh, bk)
        key_start = j * bk

        def step(i, carry):
            dk_tile, dv_tile, dq_transposed, dbias = carry
            query_start = i * bq
            q_tile, dout_tile = rows(q, i, bq), rows(dout, i, bq)  # (G, bq, Dh)
            scores = matmul("gkd,gqd->gkq", k_tile, q_tile, plan, accumulate)  # (G, bk, bq)
            dweights = matmul("gkd,gqd->gkq", v_tile, dout_tile, plan, accumulate)  # (G, bk, bq)
            if plan.kind == "softmax":
                scores = biased(plan, hidden, scores, query_start, key_start, keys_first=True)  # (G, bk, bq)
                weights = jnp.exp(scores - rows(log_sum_exp, i, bq)[:, None, :])  # (G, bk, bq)
                seen = visible(plan, hidden, query_start, key_start, keys_first=True)
                if seen is not None:  # hidden keys weigh 0, in a row that sees no key too
                    weights = jnp.where(seen, weights, 0.0)  # (G, bk, bq)
                dscores = weights * (dweights - rows(row_term, i, bq)[:, None, :])  # (G, bk, bq)
            else:
                weights, derivative = jax.jvp(
                    lambda s: pointwise_weights(plan, hidden, s, query_start, key_start, keys_first=True),
                    (scores,), (jnp.ones_like(scores),))  # h(s), h'(s): (G, bk, bq)
                dscores = dweights * derivative  # (G, bk, bq)
            dv_tile = dv_tile + matmul("gkq,gqd->gkd", weights, dout_tile, plan, accumulate)  # (G, bk, Dh)
            dk_tile = dk_tile + matmul("gkq,gqd->gkd", dscores, q_tile, plan, accumulate)  # (G, bk, Dh)
            dq_tile = (rows(dq_transposed, i, bq, axis=2)
                       + matmul("gdk,gkq->gdq", kt_tile, dscores, plan, accumulate))  # (G, Dh, bq)
            if dbias is not None:
                dbias = _add_bias_grad(dbias, dscores, query_start, key_start)
            return dk_tile, dv_tile, lax.dynamic_update_slice_in_dim(dq_transposed, dq_tile, query_start, axis=2), dbias

        zeros = jnp.zeros((heads, bk, head_dim), accumulate)  # (G, bk, Dh)
        dk_tile, dv_tile, dq_transposed, dbias = lax.fori_loop(
            *query_block_range(plan, hidden, j, padded_queries // bq), step, (zeros, zeros, dq_transposed, dbias))
        return (dq_transposed, lax.dynamic_update_slice_in_dim(dk, dk_tile, key_start, axis=1),
                lax.dynamic_update_slice_in_dim(dv, dv_tile, key_start, axis=1), dbias)

    dbias = None if hidden.bias is None else jnp.zeros(hidden.bias.shape, accumulate)  # like the bias
    grads = (jnp.zeros((heads, head_dim, padded_queries), accumulate),  # dq^T (G, Dh, Tp)
             jnp.zeros(k.shape, accumulate), jnp.zeros(v.shape, accumulate), dbias)  # dk, dv (G, Lp, Dh)
    dq_transposed, dk, dv, dbias = lax.fori_loop(0, k.shape[1] // bk, key_block, grads)
    # The barrier keeps XLA from merging this transpose into the dq matmuls (transposed operands again).
    dq_transposed = lax.optimization_barrier(dq_transposed)
    return jnp.swapaxes(dq_transposed, 1, 2), dk, dv, dbias
