"""The reference for jax_backend/interop.py, forward only, float64 (shapes in jax.nn's letters: B batch,
T queries, S keys, N query heads, K key/value heads, H head width; inside, the legend of __init__.py):

    dot_product_attention(query, key, value, bias, mask, *, kind="relu", alpha=1.0, ...)
        jax.nn.dot_product_attention's arguments (masks, sequence lengths, local window, grouped-query heads)
        with the weights of `kind`: the values the JAX drop-in and attention_fn are held to
    visible_keys(score_shape, bias, mask, ...)
        which keys each query sees; public, so the testing kit builds its expectations from it

Off the ViT path, like long_sequences.py: the ViT calls neither.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..checks import check_attention_mask
from ..config import HIDING_BIAS, AttentionConfig
from .attention_weights import length_factor, pointwise
from .layers import softmax


class _LengthFactor(NamedTuple):
    """length_factor's arguments with alpha and scale that may be arrays (the drop-in's array alpha)."""
    kind: str
    alpha: object
    scale: object


def visible_keys(score_shape, bias=None, mask=None, is_causal=False, query_seq_lengths=None,
                 key_value_seq_lengths=None, local_window_size=None):
    """The keys each query may read, bool (B, H, T, L) like the scores: mask & bias > HIDING_BIAS & (j <= i
    if is_causal) & the local window (left, right) & j < key_value_seq_lengths[b] & i < query_seq_lengths[b]."""
    num_queries, num_keys = score_shape[-2:]
    query_pos, key_pos = np.arange(num_queries)[:, None], np.arange(num_keys)[None, :]  # (T, 1), (1, L)
    visible = np.ones(score_shape, bool)  # (B, H, T, L)
    if bias is not None:
        visible = visible & (np.asarray(bias) > HIDING_BIAS)
    if mask is not None:
        visible = visible & np.asarray(mask, bool)
    if is_causal:
        visible = visible & (key_pos <= query_pos)  # (T, L), top-left aligned as in jax.nn
    if local_window_size is not None:
        left, right = (local_window_size,) * 2 if np.ndim(local_window_size) == 0 else local_window_size
        visible = visible & (key_pos >= query_pos - left) & (key_pos <= query_pos + right)  # (T, L)
    if key_value_seq_lengths is not None:
        visible = visible & (key_pos < np.asarray(key_value_seq_lengths)[:, None, None, None])  # (B, 1, 1, L)
    if query_seq_lengths is not None:
        visible = visible & (query_pos < np.asarray(query_seq_lengths)[:, None, None, None])  # (B, 1, T, 1)
    return visible


def dot_product_attention(query, key, value, bias=None, mask=None, *, kind="relu", alpha=1.0, weight_scale=1.0,
                          scale=None, is_causal=False, query_seq_lengths=None, key_value_seq_lengths=None,
                          local_window_size=None):
    """The reference for jax_backend.dot_product_attention, forward only, float64, in jax.nn's letters:
    query (B, T, N, H) (or (T, N, H)), key and value (B, S, K, H), N heads a multiple of K kv heads ->
    (B, T, N, H). s = scale * q.k + bias (scale: default 1 / sqrt(H)); a key is hidden from a query by a False
    `mask` entry (mask must be bool), a bias <= config.HIDING_BIAS (-inf included), is_causal (j > i), the
    local window, or key_value_seq_lengths. Softmax over the visible keys (a row with none averages every
    value, as jax.nn does), or weight_scale * L^-alpha * h(s) on them with L = the query's own number of
    visible keys (a row with none reads 0). Queries past query_seq_lengths output 0, as in jax.nn."""
    check_attention_mask(mask)
    AttentionConfig(kind=kind)  # a bad kind fails here
    query, key, value = (np.asarray(t, dtype=np.float64) for t in (query, key, value))
    unbatched = query.ndim == 3
    if unbatched:
        query, key, value = query[None], key[None], value[None]  # (1, T, N, H), (1, S, K, H)
    repeats = query.shape[2] // key.shape[2]  # grouped-query attention: query head n reads kv head n // repeats
    key, value = (np.repeat(t, repeats, axis=2) for t in (key, value))  # (B, L, H, Dh)
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else np.asarray(scale, np.float64)
    scores = np.einsum("bqhd,bkhd->bhqk", query, key) * scale  # (B, H, T, L)
    bias = None if bias is None else np.asarray(bias, np.float64)
    visible = visible_keys(scores.shape, bias, mask, is_causal, query_seq_lengths, key_value_seq_lengths,
                           local_window_size)  # (B, H, T, L)
    scores = scores if bias is None else scores + bias
    if kind == "softmax":
        weights = softmax(np.where(visible, scores, -0.7 * np.finfo(np.float64).max))  # (B, H, T, L)
    else:
        counts = np.maximum(visible.sum(axis=-1, keepdims=True), 1)  # (B, H, T, 1)
        factor = length_factor(_LengthFactor(kind, np.asarray(alpha, np.float64), weight_scale), counts)
        safe = np.where(visible, scores, 0.0)  # hidden scores may be -inf: keep them out of h
        weights = np.where(visible, factor * pointwise(kind, safe, counts), 0.0)  # (B, H, T, L)
    out = np.einsum("bhqk,bkhd->bqhd", weights, value)  # (B, T, H, Dh)
    if query_seq_lengths is not None:  # padded queries output 0, as in jax.nn
        out = out * (np.arange(out.shape[1])[:, None, None] < np.asarray(query_seq_lengths)[:, None, None, None])
    return out[0] if unbatched else out
