"""reluattn's attention in someone else's JAX model (shapes in jax.nn's letters: B batch, T queries, S keys,
N query heads, K key/value heads, H head width):

    dot_product_attention(query, key, value, bias, mask, *, kind="relu", alpha=1.0, ...)
        jax.nn.dot_product_attention's arguments and meaning (masks, sequence lengths, local window,
        grouped-query heads, implementation), with the weights of `kind`
    attention_fn(kind, *, alpha=1.0, ...)
        the attention_fn of flax.nnx.MultiHeadAttention / flax.linen.MultiHeadDotProductAttention

JAX only (the ViT never calls it); its NumPy twin, numpy_backend/interop.py, is the float64 reference the
tests and reluattn.testing.check_dot_product_attention hold it to. Flax is never imported. docs/own-model.md
shows both in use.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..checks import check_attention_mask, concrete_values
from ..config import HIDING_BIAS, AttentionConfig
from .attention_weights import length_factor, pointwise
from .long_sequences import blocked_attention


IMPLEMENTATIONS = ("dense", "blocked", "pallas")  # implementation=None picks one (see dot_product_attention)
BLOCKED_FROM_KEYS = 1024  # CPU: blocked from here, the shortest length benchmarked (docs/performance.md, "Blocked
                          # attention": 1.92x faster than dense relu/L at L = 1024, float32)


class _LengthFactor(NamedTuple):
    """length_factor's arguments with an alpha and scale that may be arrays (a learned alpha, a traced one)."""
    kind: str
    alpha: object
    scale: object


def _visible_keys(score_shape, bias, mask, is_causal, query_seq_lengths, key_value_seq_lengths, local_window_size):
    """The keys each query may read, bool (..., H, T, L) like the scores, or None when every key is visible.
    The masks and their meaning are jax.nn.dot_product_attention's; a bias <= HIDING_BIAS hides its key too."""
    num_queries, num_keys = score_shape[-2:]
    query_pos, key_pos = jnp.arange(num_queries)[:, None], jnp.arange(num_keys)[None, :]  # (T, 1), (1, L)
    masks = [] if mask is None else [jnp.asarray(mask)]
    if bias is not None:
        masks.append(bias > HIDING_BIAS)  # -inf, finfo.min, -1e9: the key is not there
    if is_causal:
        masks.append(key_pos <= query_pos)  # (T, L), top-left aligned as in jax.nn
    if local_window_size is not None:
        left, right = ((local_window_size,) * 2 if isinstance(local_window_size, int) else local_window_size)
        masks.append((key_pos >= query_pos - left) & (key_pos <= query_pos + right))  # (T, L)
    if key_value_seq_lengths is not None:
        masks.append(key_pos < jnp.asarray(key_value_seq_lengths)[:, None, None, None])  # (B, 1, 1, L)
    if query_seq_lengths is not None:
        masks.append(query_pos < jnp.asarray(query_seq_lengths)[:, None, None, None])  # (B, 1, T, 1)
    if not masks:
        return None
    return functools.reduce(jnp.logical_and, masks, jnp.ones(score_shape, bool))  # (..., H, T, L)


def _weights_from_scores(scores, visible, factor):
    """Scores (..., H, T, L) float32 -> weights: softmax over the visible keys (a row with none averages every
    value, as jax.nn does), or scale * L^-alpha * h(s) on them and 0 elsewhere, with L = the query's visible
    keys (a row with none reads 0). factor: the kind, alpha and weight_scale (a _LengthFactor)."""
    if factor.kind == "softmax":
        if visible is not None:  # jax.nn's finite stand-in for -inf
            scores = jnp.where(visible, scores, -0.7 * jnp.finfo(scores.dtype).max)
        return jax.nn.softmax(scores, axis=-1)  # (..., H, T, L)
    if visible is None:
        num_keys = scores.shape[-1]
        return length_factor(factor, num_keys) * pointwise(factor.kind, scores, num_keys)  # (..., H, T, L)
    counts = jnp.maximum(jnp.sum(visible, axis=-1, keepdims=True), 1).astype(scores.dtype)  # (..., H, T, 1)
    safe = jnp.where(visible, scores, 0.0)  # a -inf bias stays out of h (and of h' in the backward: no NaN)
    weights = length_factor(factor, counts) * pointwise(factor.kind, safe, counts)  # (..., H, T, L)
    return jnp.where(visible, weights, 0.0)


def _is_number(x):
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def _check_drop_in(query, key, value, mask, kind, alpha, weight_scale, implementation, return_residual):
    """The drop-in's own checks (jax.nn's argument checks are left to the arrays' shapes); its length factor.
    alpha and weight_scale may be arrays (checked when their values are known, i.e. not traced)."""
    if return_residual:
        raise NotImplementedError("return_residual=True (softmax's log-sum-exp) is not supported: use "
                                  "jax.nn.dot_product_attention for it")
    if implementation not in (None, "xla") + IMPLEMENTATIONS:
        raise ValueError(f"implementation must be None or one of {', '.join(IMPLEMENTATIONS)} ('xla' means "
                         f"'dense'); got {implementation!r}")
    if not (query.ndim >= 3 and key.ndim == query.ndim and key.shape[:-1] == value.shape[:-1]
            and query.shape[-1] == key.shape[-1] and query.shape[-2] % key.shape[-2] == 0):
        raise ValueError("expected query (..., T, N, H), key (..., S, K, H) and value (..., S, K, Hv) (jax.nn's "
                         "letters: N heads, K kv heads) with N a multiple of K; got "
                         f"{query.shape}, {key.shape}, {value.shape}")
    check_attention_mask(mask)
    numbers = {name: x if _is_number(x) else 1.0 for name, x in (("alpha", alpha), ("scale", weight_scale))}
    AttentionConfig(kind=kind, **numbers)  # the kind, and alpha and weight_scale when they are numbers
    for name, x in (("alpha", alpha), ("weight_scale", weight_scale)):
        values = None if _is_number(x) else concrete_values(x)
        if values is not None and not (np.all(np.isfinite(values)) and np.all(values >= 0 if name == "alpha"
                                                                             else values > 0)):
            raise ValueError(f"{name} must be finite and {'>= 0' if name == 'alpha' else '> 0'}; got {values}")
    return _LengthFactor(kind, alpha, weight_scale)


def _pick_implementation(implementation, factor, query, key, value, plain, blockable, is_causal):
    """implementation=None: the Pallas kernel on a GPU when it supports the call, else on a CPU the blocked
    kernel from BLOCKED_FROM_KEYS keys (plain calls only: the measured case), else dense. plain: no bias,
    mask, lengths, window, dropout or sown weights; blockable: no dropout or sown weights (the blocked kernel
    takes every way of hiding keys); both need alpha and weight_scale numbers (compile-time constants)."""
    num_queries, num_keys, head_dim = query.shape[-3], key.shape[-3], query.shape[-1]
    numbers = _is_number(factor.alpha) and _is_number(factor.scale)
    can_block = (blockable and numbers and query.ndim == 4 and key.shape == value.shape
                 and not (is_causal and num_queries != num_keys))
    can_pallas = (can_block and plain and not is_causal and query.shape == key.shape and num_keys % 64 == 0
                  and head_dim >= 16 and not head_dim & (head_dim - 1) and jax.default_backend() == "gpu")
    if can_pallas:  # fast/ is only imported when it can run
        from .fast.pallas_attention import KINDS as PALLAS_KINDS
        can_pallas = factor.kind in PALLAS_KINDS
    if implementation is None:
        long_on_cpu = num_keys >= BLOCKED_FROM_KEYS and jax.default_backend() == "cpu"  # the kernel is tuned for CPUs
        return "pallas" if can_pallas else "blocked" if can_block and plain and long_on_cpu else "dense"
    implementation = "dense" if implementation == "xla" else implementation
    if (implementation == "blocked" and not can_block) or (implementation == "pallas" and not can_pallas):
        raise ValueError(f"implementation={implementation!r} does not support this call: both kernels take 4-d "
                         "inputs with no dropout or sown weights, alpha and weight_scale numbers (not arrays), and "
                         "Hv == H; 'blocked' with is_causal needs T == S; 'pallas' needs a GPU, no bias, mask, "
                         "sequence lengths, window or causal mask, T == S a "
                         "multiple of 64, Dh a power of two >= 16 and a kind in fast/pallas_attention.KINDS. "
                         "Use implementation='dense' or None")
    return implementation


def _drop_in(query, key, value, bias, mask, kind, alpha, weight_scale, scale, is_causal, query_seq_lengths,
             key_value_seq_lengths, local_window_size, implementation, return_residual, precision=None,
             dropout=None, module=None):
    """dot_product_attention and attention_fn's one body. dropout: (rng, rate, broadcast) or None."""
    query, key, value = (jnp.asarray(x) for x in (query, key, value))
    factor = _check_drop_in(query, key, value, mask, kind, alpha, weight_scale, implementation, return_residual)
    repeats = query.shape[-2] // key.shape[-2]  # grouped-query attention: query head n reads kv head n // repeats
    key, value = (jnp.repeat(x, repeats, axis=-2) for x in (key, value))  # (..., L, H, Dh)
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale  # a number, or an array (traced too)
    blockable = dropout is None and module is None
    plain = (blockable and bias is None and mask is None and query_seq_lengths is None
             and key_value_seq_lengths is None and local_window_size is None)
    implementation = _pick_implementation(implementation, factor, query, key, value, plain, blockable, is_causal)
    if implementation != "dense":  # the kernels scale by 1 / sqrt(H): fold the rest into the queries
        query = query * (scale * math.sqrt(query.shape[-1]))
        attn_cfg = AttentionConfig(kind=factor.kind, alpha=factor.alpha, scale=factor.scale)
        if implementation == "pallas":
            from .fast.pallas_attention import pallas_attention
            return pallas_attention(query, key, value, attn_cfg)
        out = blocked_attention(query, key, value, attn_cfg, causal=is_causal, window=local_window_size,
                                key_lengths=key_value_seq_lengths, mask=mask, bias=bias)
        return _zero_padded_queries(out, query_seq_lengths)
    score_dtype = jnp.promote_types(query.dtype, jnp.float32)
    scores = jnp.einsum("...qhd,...khd->...hqk", query, key, precision=precision,
                        preferred_element_type=score_dtype) * jnp.asarray(scale, score_dtype)  # (..., H, T, L)
    if bias is not None:
        bias = jnp.asarray(bias)
        scores = (scores + bias).astype(score_dtype)
    visible = _visible_keys(scores.shape, bias, mask, is_causal, query_seq_lengths, key_value_seq_lengths,
                            local_window_size)  # (..., H, T, L) or None
    weights = _weights_from_scores(scores, visible, factor).astype(value.dtype)  # (..., H, T, L)
    if module is not None:  # Flax's sow_weights=True: the weights before dropout, as Flax keeps them
        module.sow("intermediates", "attention_weights", weights)
    if dropout is not None:
        rng, rate, broadcast = dropout
        shape = (1,) * (key.ndim - 2) + weights.shape[-2:] if broadcast else weights.shape  # as in Flax
        weights = weights * (jax.random.bernoulli(rng, 1.0 - rate, shape) / (1.0 - rate)).astype(weights.dtype)
    out = jnp.einsum("...hqk,...khd->...qhd", weights, value, precision=precision)  # (..., T, H, Dh)
    return _zero_padded_queries(out, query_seq_lengths)


def _zero_padded_queries(out, query_seq_lengths):
    """out (..., T, H, Dh) with the queries past query_seq_lengths set to 0 (they read nothing, as in jax.nn)."""
    if query_seq_lengths is None:
        return out
    return out * (jnp.arange(out.shape[-3])[:, None, None] < jnp.asarray(query_seq_lengths)[:, None, None, None])


def dot_product_attention(query, key, value, bias=None, mask=None, *, kind="relu", alpha=1.0, weight_scale=1.0,
                          scale=None, is_causal=False, query_seq_lengths=None, key_value_seq_lengths=None,
                          local_window_size=None, implementation=None, return_residual=False):
    """jax.nn.dot_product_attention with the weights of `kind`: query (B, T, N, H), key and value (B, S, K, H)
    (or without B; N a multiple of K) -> (B, T, N, H). The arguments jax.nn has mean what they mean there.

    scores s = scale * q.k + bias (scale: default 1 / sqrt(H), a number or an array, traced too). A key is
    hidden from a query -- it is not part of that query's sequence, it neither weighs nor counts -- by a False
    entry of `mask` (bool, as in jax.nn: a float mask is refused, pass an additive one as `bias`), a `bias` entry
    <= config.HIDING_BIAS (-1e4: -inf, finfo.min and -1e9 all hide), is_causal (key j > query i),
    local_window_size, or key_value_seq_lengths; queries past query_seq_lengths output 0, as in jax.nn.
    Weights: kind="softmax": jax.nn's softmax over the visible keys (the same output to float32 rounding; a row
    with no visible key averages every value, as jax.nn gives for a row masked by `mask`, where jax.nn gives
    NaN for a row that is all -inf bias); a point-wise kind: weight_scale * L^-alpha * h(s) on the visible keys
    and 0 on the others, L = the number of keys THIS query sees (for a padding mask, the real keys; under
    is_causal, i + 1), and a row with no visible key reads 0. A -inf bias never makes a NaN, forward or
    backward. alpha and weight_scale may be arrays (a learned alpha) that broadcast against (..., N, T, 1).
    relu with alpha=1 is ReLU / L (Wortsman et al. 2023, who use it in bidirectional ViTs only); L = i + 1
    under a causal mask is the per-query count of ReLUFormer (Shen et al. 2023; a secondary reading, beyond
    that paper's abstract), also `attention(..., causal=True)`.

    implementation: "dense" (jnp, holds the (B, H, T, L) weights; "xla" is an alias), "blocked"
    (fast/blocked_attention.py: never holds them; every way of hiding keys, the same values) or "pallas"
    (fast/pallas_attention.py, a GPU kernel: point-wise kinds, no masks); both need alpha and weight_scale
    numbers. None: Pallas on a GPU when it supports the call, else on a CPU blocked from BLOCKED_FROM_KEYS
    keys for calls with no bias, mask, lengths or window, else dense. return_residual is refused.
    """
    return _drop_in(query, key, value, bias, mask, kind, alpha, weight_scale, scale, is_causal, query_seq_lengths,
                    key_value_seq_lengths, local_window_size, implementation, return_residual)


def _flax_mask(mask):
    """Flax's float 0/1 masks (nn.make_attention_mask gives float32) as the bool mask they mean, "attend where
    nonzero", as Flax's own attention reads them. A concrete float mask holding anything but 0 and 1 (an
    additive 0 / -1e9 one, which that reading would invert) is refused with jax.nn's message."""
    if mask is None or jnp.issubdtype(jnp.asarray(mask).dtype, jnp.bool_):
        return mask
    if not isinstance(mask, jax.core.Tracer) and not np.isin(np.asarray(mask), (0, 1)).all():
        check_attention_mask(mask)  # raises: "mask dtype should be bool ...: pass an additive mask as `bias=`"
    return jnp.asarray(mask) != 0


def attention_fn(kind="relu", *, alpha=1.0, weight_scale=1.0, implementation=None):
    """The `attention_fn` of flax.nnx.MultiHeadAttention / flax.linen.MultiHeadDotProductAttention (and a
    jax.nn.dot_product_attention stand-in) with `kind`, alpha and weight_scale fixed:

        nnx.MultiHeadAttention(..., attention_fn=reluattn.jax_backend.attention_fn("relu"))

    It takes Flax's keywords: dropout as Flax does it (on the weights, broadcast over the batch and heads when
    broadcast_dropout), dtype (q, k, v cast to it), precision, module (sow_weights=True: the weights are
    sown as "attention_weights"); force_fp32_for_softmax is accepted and ignored (the scores and weights are
    float32 anyway); Linen's einsum hooks (qk_attn_weights_einsum, attn_weights_value_einsum) are refused, since
    honouring them would bypass the masks and the length factor. alpha and weight_scale: numbers or arrays.
    A float 0/1 `mask` is read as Flax reads its masks (attend where nonzero: Linen's make_attention_mask gives
    float32); any other float mask is refused, as is every float mask by the jax.nn-signature drop-in."""
    AttentionConfig(kind=kind, **{name: x if _is_number(x) else 1.0
                                  for name, x in (("alpha", alpha), ("scale", weight_scale))})  # fails here

    def reluattn_attention(query, key, value, bias=None, mask=None, broadcast_dropout=True, dropout_rng=None,
                           dropout_rate=0.0, deterministic=False, dtype=None, precision=None, module=None,
                           is_causal=False, force_fp32_for_softmax=False, qk_attn_weights_einsum=None,
                           attn_weights_value_einsum=None, *, scale=None, query_seq_lengths=None,
                           key_value_seq_lengths=None, local_window_size=None, return_residual=False):
        for name, hook in (("qk_attn_weights_einsum", qk_attn_weights_einsum),
                           ("attn_weights_value_einsum", attn_weights_value_einsum)):
            if hook is not None:
                raise NotImplementedError(f"reluattn's attention_fn does not take Linen's {name}: it computes the "
                                          f"scores and weighted sum itself (masks, L); leave {name} unset")
        if dtype is not None:
            query, key, value = (jnp.asarray(x, dtype) for x in (query, key, value))
        mask = _flax_mask(mask)
        dropout = None
        if dropout_rate > 0.0 and not deterministic:
            if dropout_rng is None:
                raise ValueError("dropout_rate > 0 without deterministic=True needs a dropout_rng")
            dropout = (dropout_rng, float(dropout_rate), bool(broadcast_dropout))
        return _drop_in(query, key, value, bias, mask, kind, alpha, weight_scale, scale, is_causal,
                        query_seq_lengths, key_value_seq_lengths, local_window_size, implementation, return_residual,
                        precision, dropout, module)

    return reluattn_attention
