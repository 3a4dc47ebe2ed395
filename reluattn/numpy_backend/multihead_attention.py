"""Multi-head self-attention with hand-written backward (shapes: legend in __init__.py).

Two levels:
  attention_forward / attention(q, k, v, attn_cfg)   the core, q, k, v (B, L, H, Dh), no projections:
      s = q.k / sqrt(Dh),  w = weights(s) (attention_weights.py),  o = w v
  self_attention_forward(x, params, attn_cfg, heads)  the layer of a ViT block:
      fused qkv dense -> optional qk-LayerNorm -> core -> heads concatenated -> optional gate -> proj

Inside, heads stay on their own axis next to the batch, (B, H, T, Dh), so every product is one batched
matmul over (B, H); there are no Python loops over tokens or heads.

AttentionConfig.impl: "dense" holds the whole (B, H, T, L) weight array; "blocked" computes the forward
one key block at a time (blocked_attention.py). Its backward is the dense one, which recomputes the
weights out of the cached q, k, v: the forward saves memory, the gradients still hold O(T L).
Causal masks (query i sees keys j <= i) are an option of the core `attention`; the ViT does not use them.
"""

from __future__ import annotations

import math

import numpy as np

from ..checks import check_attention_options
from .attention_weights import (attention_weights_backward, attention_weights_forward,
                                causal_attention_weights_backward, causal_attention_weights_forward)
from .blocked_attention import DEFAULT_BLOCK_SIZE, blocked_attention_forward
from .layers import (dense_backward, dense_forward, layernorm_backward, layernorm_forward, silu_backward,
                     silu_forward)


# ------------------------------------------------------------------ the core, heads-first (B, H, T, Dh)

def heads_attention_forward(q, k, v, attn_cfg, causal=False, causal_length="per_query"):
    """Core attention on heads-first arrays: q (B, H, T, Dh), k and v (B, H, L, Dh).
    causal: query i sees keys j <= i, with n_i = i + 1 ("per_query") or L ("global") in the length factor."""
    inv_sqrt_dh = 1.0 / math.sqrt(q.shape[-1])
    scores = (q @ k.swapaxes(-1, -2)) * inv_sqrt_dh  # (B, H, T, L)
    if causal:
        weights, weights_cache = causal_attention_weights_forward(scores, attn_cfg, causal_length)  # (B, H, T, L)
    else:
        weights, weights_cache = attention_weights_forward(scores, attn_cfg)  # (B, H, T, L)
    out = weights @ v  # (B, H, T, Dh)
    return out, weights, (q, k, v, weights, weights_cache)


def heads_attention_backward(dout, cache, attn_cfg, causal=False):
    """causal: the forward was causal (its weights' cache is the causal one)."""
    q, k, v, weights, weights_cache = cache
    inv_sqrt_dh = 1.0 / math.sqrt(q.shape[-1])
    # Differentiates out = weights @ v.
    dweights = dout @ v.swapaxes(-1, -2)  # (B, H, T, L)
    dv = weights.swapaxes(-1, -2) @ dout  # (B, H, L, Dh)
    # Differentiates weights = attention_weights(scores).
    weights_backward = causal_attention_weights_backward if causal else attention_weights_backward
    dscores = weights_backward(dweights, weights_cache, attn_cfg)  # (B, H, T, L)
    # Differentiates scores = q @ k^T / sqrt(Dh).
    dq = (dscores @ k) * inv_sqrt_dh  # (B, H, T, Dh)
    dk = (dscores.swapaxes(-1, -2) @ q) * inv_sqrt_dh  # (B, H, L, Dh)
    return dq, dk, dv


def core_forward(q, k, v, attn_cfg):
    """The core as the model runs it, by attn_cfg.impl. Returns (out (B, H, T, Dh), weights or None, cache);
    "blocked" never makes the (B, H, T, L) weights, so it returns None for them and caches q, k, v only."""
    if attn_cfg.impl == "dense":
        return heads_attention_forward(q, k, v, attn_cfg)
    out = blocked_attention_forward(q, k, v, attn_cfg, attn_cfg.block_size or DEFAULT_BLOCK_SIZE)  # (B, H, T, Dh)
    return out, None, (q, k, v)


def core_backward(dout, cache, attn_cfg):
    if attn_cfg.impl == "dense":
        return heads_attention_backward(dout, cache, attn_cfg)
    # Differentiates the blocked forward through the dense one (same function): recompute its cache.
    _, _, dense_cache = heads_attention_forward(*cache, attn_cfg)
    return heads_attention_backward(dout, dense_cache, attn_cfg)


# ------------------------------------------------------------- the public core, tokens-first (B, L, H, Dh)

def attention_forward(q, k, v, attn_cfg):
    """Core attention with the shared API's layout: q, k, v (B, L, H, Dh) -> out (B, L, H, Dh).
    Also returns the weights (B, H, L, L) and the cache for `attention_backward`."""
    to_heads_first = (0, 2, 1, 3)  # (B, L, H, Dh) <-> (B, H, L, Dh); the same swap is its own inverse
    out, weights, cache = heads_attention_forward(
        q.transpose(to_heads_first), k.transpose(to_heads_first), v.transpose(to_heads_first), attn_cfg)
    return out.transpose(to_heads_first), weights, cache  # (B, L, H, Dh), (B, H, L, L)


def attention_backward(dout, cache, attn_cfg):
    # Differentiates the transposes around heads_attention_forward: transpose the gradients back.
    to_heads_first = (0, 2, 1, 3)
    dq, dk, dv = heads_attention_backward(dout.transpose(to_heads_first), cache, attn_cfg)
    return dq.transpose(to_heads_first), dk.transpose(to_heads_first), dv.transpose(to_heads_first)


def attention(q, k, v, attn_cfg, *, impl=None, block_size=None, causal=False, causal_length="per_query"):
    """Multi-head attention core, no projections: q, k, v (B, L, H, Dh) -> (B, L, H, Dh).
    Scores are q.k / sqrt(Dh) (do any qk-norm before calling); weights as `attn_cfg` says.

    impl: "dense" or "blocked" (default attn_cfg.impl); block_size: keys per block (default
    attn_cfg.block_size, else DEFAULT_BLOCK_SIZE). causal=True: query i sees keys j <= i, and the L of
    L^-alpha (and of sigmoid_bias's log L) is i + 1 (causal_length="per_query") or L ("global")."""
    impl = check_attention_options(attn_cfg, impl, block_size, causal, causal_length)
    block_size = block_size or attn_cfg.block_size or DEFAULT_BLOCK_SIZE
    q, k, v = (np.asarray(t) for t in (q, k, v))
    if not (q.ndim == 4 and q.shape == k.shape == v.shape):
        raise ValueError(f"attention expects q, k, v of one shape (B, L, H, Dh); got {q.shape}, {k.shape}, {v.shape}")
    to_heads_first = (0, 2, 1, 3)  # (B, L, H, Dh) <-> (B, H, L, Dh)
    q, k, v = (t.transpose(to_heads_first) for t in (q, k, v))
    if impl == "blocked":
        out = blocked_attention_forward(q, k, v, attn_cfg, block_size, causal, causal_length)  # (B, H, L, Dh)
    else:
        out = heads_attention_forward(q, k, v, attn_cfg, causal, causal_length)[0]  # (B, H, L, Dh)
    return out.transpose(to_heads_first)  # (B, L, H, Dh)


# ---------------------------------------------------------------------------- the multi-head layer

def self_attention_forward(x, params, attn_cfg, heads):
    """Multi-head self-attention of a block on its normalised input x (B, T, D).
    Returns the output (B, T, D), the weights (B, H, T, T) and the cache."""
    batch, tokens, dim = x.shape
    head_dim = dim // heads
    qkv, qkv_cache = dense_forward(x, params["qkv"])  # (B, T, 3D), columns [q | k | v]
    # Split [q | k | v] and the heads of each: column c*D + h*Dh + i is part c, head h, entry i.
    qkv_heads = qkv.reshape(batch, tokens, 3, heads, head_dim).transpose(2, 0, 3, 1, 4)  # (3, B, H, T, Dh)
    q, k, v = qkv_heads  # each (B, H, T, Dh)
    q_norm_cache = k_norm_cache = ()  # nothing cached when there is no qk-norm
    if attn_cfg.qk_norm:
        # LayerNorm over Dh per token and head, scale (Dh,) shared by the heads, no bias (ViT-22B).
        q, q_norm_cache = layernorm_forward(q, params["q_norm"])  # (B, H, T, Dh)
        k, k_norm_cache = layernorm_forward(k, params["k_norm"])  # (B, H, T, Dh)
    heads_out, weights, core_cache = core_forward(q, k, v, attn_cfg)  # (B, H, T, Dh)
    concat = heads_out.transpose(0, 2, 1, 3).reshape(batch, tokens, dim)  # (B, T, D), heads in order
    gate_caches = ()  # nothing cached when there is no gate
    if attn_cfg.gated:
        # Gated attention unit (Hua et al. 2022): the block's normalised input decides what passes.
        gate_logits, gate_dense_cache = dense_forward(x, params["gate"])  # (B, T, D)
        gate, gate_silu_cache = silu_forward(gate_logits)  # (B, T, D)
        gate_caches = (concat, gate, gate_dense_cache, gate_silu_cache)
        concat = concat * gate  # (B, T, D)
    out, proj_cache = dense_forward(concat, params["proj"])  # (B, T, D)
    cache = (qkv_cache, q_norm_cache, k_norm_cache, core_cache, gate_caches, proj_cache)
    return out, weights, cache


def self_attention_backward(dout, cache, attn_cfg, heads):
    """Returns dx (B, T, D) and the gradients of the layer's parameters."""
    qkv_cache, q_norm_cache, k_norm_cache, core_cache, gate_caches, proj_cache = cache
    batch, tokens, dim = dout.shape
    grads = {}
    # Differentiates out = dense(concat, proj).
    dconcat, grads["proj"] = dense_backward(dout, proj_cache)  # (B, T, D)
    dx = 0.0
    if attn_cfg.gated:
        ungated, gate, gate_dense_cache, gate_silu_cache = gate_caches
        # Differentiates concat = ungated * gate, then gate = silu(dense(x, gate)).
        dgate = dconcat * ungated  # (B, T, D)
        dconcat = dconcat * gate  # (B, T, D)
        dgate_logits = silu_backward(dgate, gate_silu_cache)  # (B, T, D)
        dx, grads["gate"] = dense_backward(dgate_logits, gate_dense_cache)  # (B, T, D)
    # Differentiates concat = heads_out transposed and reshaped: undo both.
    dheads_out = dconcat.reshape(batch, tokens, heads, dim // heads).transpose(0, 2, 1, 3)  # (B, H, T, Dh)
    dq, dk, dv = core_backward(dheads_out, core_cache, attn_cfg)  # each (B, H, T, Dh)
    if attn_cfg.qk_norm:
        # Differentiates the two qk LayerNorms; they have no bias, so only the scale's gradient is kept.
        dq, q_norm_grads = layernorm_backward(dq, q_norm_cache)  # (B, H, T, Dh)
        dk, k_norm_grads = layernorm_backward(dk, k_norm_cache)  # (B, H, T, Dh)
        grads["q_norm"] = {"scale": q_norm_grads["scale"]}
        grads["k_norm"] = {"scale": k_norm_grads["scale"]}
    # Differentiates the split of qkv into parts and heads: stack them back in column order.
    dqkv = np.stack([dq, dk, dv]).transpose(1, 3, 0, 2, 4).reshape(batch, tokens, 3 * dim)  # (B, T, 3D)
    dx_qkv, grads["qkv"] = dense_backward(dqkv, qkv_cache)  # (B, T, D)
    return dx + dx_qkv, grads
