"""The tiled blocked attention behind long_sequences.blocked_attention (impl="blocked"): forward and
backward one (query block x key block) tile at a time. What a tile computes and which keys it may read:
blocked_tiles.py.

Shapes: B batch, H heads, T queries, L keys (= T in self-attention), Dh head width; N = B * H heads in
all, G of them per step; a tile holds bq queries and bk keys. Nothing here holds a T x L array (unless the
caller hands in a T x L bias or mask): the forward keeps a (G, bq, Dh) running sum per query block, and the
backward (a `jax.custom_vjp`) recomputes each tile's scores instead of saving them.

    point-wise kinds:  out_i = c_i * sum_j h(s_ij) v_j,  c_i = scale * n_i^-alpha   (sigmoid_bias: c_i = scale,
                       h_i(s) = sigmoid(s - log n_i)).  No normaliser, so each tile just adds its read.
        backward, per tile, with g_i = c_i * dout_i:   dv_j += h(s_ij) g_i,  ds_ij = h'(s_ij) (g_i . v_j),
                       dq_i += ds_ij k_j,  dk_j += ds_ij q_i                          (5 matmuls per tile)
    softmax:           the online (flash) update: running max m_i and normaliser z_i per query; saves
                       out and lse_i = m_i + log z_i.  Backward: p_ij = exp(s_ij - lse_i),
                       ds_ij = p_ij (dout_i . v_j - dout_i . out_i).

Hidden keys (blocked_tiles.py: causal, window, key lengths, bias, mask) weigh 0 and do not count: n_i is the
number of keys query i sees, counted once before the tiles. A query that sees no key reads 0 (point-wise)
or, for softmax, the mean of all L values, as jax.nn gives. Tiles whose keys are all hidden by position
(causal, window, key lengths) are skipped. With a bias, ds_ij is also its gradient (summed over the axes
the bias broadcasts along).

The length factor c_i multiplies the (T, Dh) output (and dout), not the T x L weights. Keys and queries
are zero-padded to whole blocks: a zero key row with a zero value row adds nothing to a point-wise read,
and padded queries are cut off at the end.

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

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...checks import CAUSAL_LENGTHS, check_attention_mask
from .blocked_loops import backward, forward
from .blocked_tiles import Hidden, Plan, count_visible_keys, count_visible_keys_by_tiles, hides_keys

DEFAULT_QUERY_BLOCK_SIZE = 1024  # queries per tile when the call gives none ...
HALF_PRECISION_QUERY_BLOCK_SIZE = 512  # ... and with bfloat16 matmuls past one tile (docs/performance.md)
TILE_ELEMENTS = 512 * 512  # heads per step G: as many as keep G * bq * bk at about this many scores


# ------------------------------------------------------------------------------------ the custom VJP

def _map_steps(plan, function, arrays):
    """lax.map of function over the steps of G heads. Steps are (S, G, rows, ...) arrays, or (N, rows, ...)
    when G = 1: a size-1 axis there would cost XLA:CPU an extra copy of every input and output."""
    if plan.heads_per_step > 1:
        return lax.map(lambda step: function(*step), arrays)
    add_axis, drop_axis = (functools.partial(jax.tree.map, f) for f in (lambda x: x[None], lambda x: x[0]))
    return lax.map(lambda step: drop_axis(function(*add_axis(step))), arrays)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _core(plan, q, k, v, hidden):
    """q (S, G, Tp, Dh), k and v (S, G, Lp, Dh), S steps of G heads (G = 1: no G axis), hidden a Hidden of
    step arrays -> out like q."""
    return _core_forward(plan, q, k, v, hidden)[0]


def _core_forward(plan, q, k, v, hidden):
    out, log_sum_exp = _map_steps(plan, functools.partial(forward, plan), (q, k, v, hidden))
    # Saved for the backward: O(T Dh) arrays only (and the caller's bias), never the T x L weights.
    if plan.kind == "softmax":
        return out, (q, k, v, hidden, out, log_sum_exp)
    return out, (q, k, v, hidden, None, None)


def _core_backward(plan, residuals, dout):
    q, k, v, hidden, out, log_sum_exp = residuals
    if plan.kind == "softmax":
        steps = (q, k, v, hidden, out, log_sum_exp, dout)
        dq, dk, dv, dbias = _map_steps(plan, functools.partial(backward, plan), steps)
    else:  # no out and log-sum-exp to read
        def pointwise_backward(q, k, v, hidden, dout):
            return backward(plan, q, k, v, hidden, None, None, dout)
        dq, dk, dv, dbias = _map_steps(plan, pointwise_backward, (q, k, v, hidden, dout))
    dbias = None if dbias is None else dbias.astype(hidden.bias.dtype)
    return (dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), Hidden(None, None, dbias))


_core.defvjp(_core_forward, _core_backward)


# ---------------------------------------------------------------------------------------- entry point

def _largest_divisor_at_most(n, limit):
    return max(d for d in range(1, min(n, max(limit, 1)) + 1) if n % d == 0)


def make_plan(attn_cfg, num_queries, num_keys, num_heads=1, *, block_size, query_block_size=None,
              heads_per_step=None, causal=False, causal_length="per_query", window=None, compute_dtype=None,
              input_dtype=jnp.float32) -> Plan:
    """The static description of a call: block sizes clipped to the sequence lengths, the window as
    (left, right) (an int w means (w, w)), and the heads per step (G, a divisor of num_heads = B * H) that
    keep G * bq * bk near TILE_ELEMENTS."""
    if causal_length not in CAUSAL_LENGTHS:
        raise ValueError(f"causal_length must be one of {', '.join(CAUSAL_LENGTHS)}; got {causal_length!r}")
    if causal and num_queries != num_keys:
        raise ValueError(f"causal attention needs as many queries as keys, got {num_queries} and {num_keys}")
    if window is not None:
        window = (window, window) if np.ndim(window) == 0 else tuple(window)
        if len(window) != 2 or not all(isinstance(w, (int, np.integer)) and not isinstance(w, bool) for w in window):
            raise ValueError(f"window (local_window_size) must be an int or a pair of ints, got {window!r}")
        limit = num_queries + num_keys  # a wider window hides nothing more; clipped, i - left never overflows
        window = tuple(int(min(max(w, -limit), limit)) for w in window)
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
    return Plan(kind=attn_cfg.kind, alpha=attn_cfg.alpha, scale=attn_cfg.scale, num_queries=num_queries,
                num_keys=num_keys, query_block=query_block, key_block=key_block, heads_per_step=int(heads_per_step),
                causal=bool(causal), causal_length=causal_length, window=window, compute_dtype=compute_dtype)


def _steps(x, heads_per_step):
    """(N, ...) -> (N / G, G, ...), or (N, ...) itself when G = 1."""
    return x if heads_per_step == 1 else x.reshape(x.shape[0] // heads_per_step, heads_per_step, *x.shape[1:])


def _padded_steps(x, rows, heads_per_step):
    """(B, L, H, Dh) -> (N / G, G, rows, Dh), or (N, rows, Dh) when G = 1: heads first and flattened, zero
    rows added at the end."""
    batch, length, heads, head_dim = x.shape
    x = jnp.swapaxes(x, 1, 2).reshape(batch * heads, length, head_dim)  # (N, L, Dh)
    x = jnp.pad(x, ((0, 0), (0, rows - length), (0, 0))) if rows > length else x  # (N, rows, Dh)
    return _steps(x, heads_per_step)


def _bias_per_head(bias, mask, batch, heads, padded_queries, padded_keys, num_queries, num_keys, dtype):
    """The bias and mask (each None or broadcastable to (B, H, T, L)) as one bias (N, Tp or 1, Lp or 1): a
    mask is a bias of 0 where it is True and -inf where it is False. Size-1 axes stay size 1 (a padding
    mask (B, 1, 1, L) costs N * L); the batch and head axes are broadcast to every head."""
    if mask is not None:
        check_attention_mask(mask)
        bias = jnp.where(mask, 0.0 if bias is None else bias, -jnp.inf)  # (.., T or 1, L or 1)
    bias = jnp.asarray(bias).astype(dtype)
    if bias.ndim > 4:
        raise ValueError(f"bias and mask must broadcast to (B, H, T, L) (at most 4-d), got shape {bias.shape}")
    bias = bias.reshape((1,) * (4 - bias.ndim) + bias.shape)  # (B or 1, H or 1, T or 1, L or 1)
    num_rows, num_columns = (num_queries if bias.shape[2] > 1 else 1), (num_keys if bias.shape[3] > 1 else 1)
    bias = jnp.broadcast_to(bias, (batch, heads, num_rows, num_columns))  # (B, H, T or 1, L or 1)
    bias = bias.reshape(batch * heads, num_rows, num_columns)  # (N, T or 1, L or 1)
    padding = ((0, 0), (0, padded_queries - num_rows if num_rows > 1 else 0),
               (0, padded_keys - num_columns if num_columns > 1 else 0))
    return jnp.pad(bias, padding)  # (N, Tp or 1, Lp or 1); padded queries are cut off, padded keys hidden


def blocked_attention(q, k, v, attn_cfg, *, block_size, query_block_size=None, causal=False,
                      causal_length="per_query", window=None, key_lengths=None, mask=None, bias=None,
                      compute_dtype=None, heads_per_step=None):
    """q (B, T, H, Dh), k and v (B, L, H, Dh) -> (B, T, H, Dh), the same values as dense attention,
    with O((T + L) Dh + G bq bk) memory in the forward and the backward. Traceable (call it under jit).

    block_size: keys per tile (long_sequences.blocked_attention picks the default);
    query_block_size: queries per tile (default 1024; 512 with bfloat16 matmuls on more than 1024 queries);
    causal: query i sees keys j <= i, n_i = i + 1 (causal_length="per_query") or L ("global", which takes no
    other way of hiding keys); window: (left, right) or w, query i sees keys i - left .. i + right;
    key_lengths (B,): keys j >= key_lengths[b] are hidden; mask (bool) and bias, broadcastable to
    (B, H, T, L): a False entry or a bias <= config.HIDING_BIAS hides its key (bias is added to the scores and
    has a gradient); n_i counts the keys query i sees;
    compute_dtype: e.g. jnp.bfloat16 for bfloat16 matmul inputs with float32 accumulation;
    heads_per_step: G, how many of the B * H heads each tile holds (default: see make_plan)."""
    batch, num_queries, heads, head_dim = q.shape
    plan = make_plan(attn_cfg, num_queries, k.shape[1], batch * heads, block_size=block_size,
                     query_block_size=query_block_size, heads_per_step=heads_per_step, causal=causal,
                     causal_length=causal_length, window=window, compute_dtype=compute_dtype, input_dtype=q.dtype)
    if causal_length == "global" and any(x is not None for x in (window, key_lengths, mask, bias)):
        raise ValueError("causal_length='global' (n_i = L under the causal mask) takes no other way of hiding keys")
    out_dtype = jnp.result_type(q, k, v)
    accumulate = jnp.promote_types(out_dtype, jnp.float32)
    scaled_q = q * (1.0 / math.sqrt(head_dim))  # scale the (T, Dh) queries, not the T x L scores
    padded_queries = -(-plan.num_queries // plan.query_block) * plan.query_block
    padded_keys = -(-plan.num_keys // plan.key_block) * plan.key_block
    q, k, v = (_padded_steps(x, rows, plan.heads_per_step)
               for x, rows in ((scaled_q, padded_queries), (k, padded_keys), (v, padded_keys)))  # (S, G, rows, Dh)
    if key_lengths is not None:
        key_lengths = _steps(jnp.repeat(jnp.asarray(key_lengths, jnp.int32), heads), plan.heads_per_step)  # (S, G)
    if mask is not None or bias is not None:
        bias = _steps(_bias_per_head(bias, mask, batch, heads, padded_queries, padded_keys, plan.num_queries,
                                     plan.num_keys, accumulate), plan.heads_per_step)  # (S, G, Tp or 1, Lp or 1)
    hidden = Hidden(None, key_lengths, bias)
    counts = None
    if hides_keys(plan, hidden) and bias is None:  # n_i from the index ranges
        counts = jnp.broadcast_to(count_visible_keys(plan, key_lengths, padded_queries), q.shape[:-1])  # (S, G, Tp)
    elif bias is not None:  # n_i summed tile by tile
        counts = _map_steps(plan, lambda key_lengths, bias: count_visible_keys_by_tiles(
            plan, Hidden(None, key_lengths, bias), padded_queries), (key_lengths, bias))  # (S, G, Tp)
    if counts is not None:  # at least 1: a query that sees no key reads 0 anyway
        hidden = hidden._replace(counts=jnp.maximum(counts, 1).astype(accumulate))  # (S, G, Tp)
    out = _core(plan, q, k, v, hidden)  # (S, G, Tp, Dh) or (N, Tp, Dh)
    if plan.kind == "softmax" and counts is not None:
        # jax.nn's answer for a query that sees no key: the mean of all L values (the padding rows are 0).
        mean = v.sum(axis=-2, keepdims=True) / plan.num_keys  # (S, G, 1, Dh)
        out = jnp.where((counts == 0)[..., None], mean.astype(out.dtype), out)  # (S, G, Tp, Dh)
    out = out.reshape(batch, heads, padded_queries, head_dim)[:, :, :num_queries]  # (B, H, T, Dh)
    return jnp.swapaxes(out, 1, 2).astype(out_dtype)  # (B, T, H, Dh)
