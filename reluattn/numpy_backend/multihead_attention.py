"""Multi-head self-attention with hand-written backward (shapes: legend in __init__.py).

Two levels:
  heads_attention_forward(q, k, v, attn_cfg)          the core on heads-first q, k, v (B, H, T, Dh):
      s = q.k / sqrt(Dh),  w = weights(s) (attention_weights.py),  o = w v
  self_attention_forward(x, params, attn_cfg, heads)  the layer of a ViT block:
      fused qkv dense -> optional qk-LayerNorm -> core -> heads concatenated -> optional gate -> proj
      (the learned length factor, when AttentionConfig.learn_alpha / learn_scale, is in the core's weights;
      the gate: o = attn_out * phi(x W_g + b_g), phi = silu or identity, AttentionConfig.gate_activation)

Inside, heads stay on their own axis next to the batch, (B, H, T, Dh), so every product is one batched
matmul over (B, H); there are no Python loops over tokens or heads.

`attention(q, k, v, attn_cfg, *, impl, block_size, causal, causal_length)` is the public core on the
shared tokens-first layout (B, L, H, Dh), with every option; causal masks and impl="blocked" come from
long_sequences.py. The ViT itself always runs the dense core: AttentionConfig.impl is a memory strategy
with the same values (the JAX backend honours it; the NumPy reference does not need to). The reference for
the JAX drop-in (jax.nn.dot_product_attention's signature) is in interop.py.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..checks import check_attention_options, check_attention_shapes
from .attention_weights import (AttentionWeightsCache, attention_weights_backward, attention_weights_forward,
                                learned_attention_weights_backward, learned_attention_weights_forward,
                                learned_length_backward)
from .layers import (DenseCache, LayerNormCache, SiluCache, dense_backward, dense_forward, layernorm_backward,
                     layernorm_forward, silu_backward, silu_forward)
from .long_sequences import DEFAULT_BLOCK_SIZE, blocked_attention_forward, causal_attention_weights_forward


# ------------------------------------------------------------------ the core, heads-first (B, H, T, Dh)

class AttentionCoreCache(NamedTuple):
    q: np.ndarray        # (B, H, T, Dh)
    k: np.ndarray        # (B, H, L, Dh)
    v: np.ndarray        # (B, H, L, Dh)
    weights: np.ndarray  # (B, H, T, L)
    weights_cache: AttentionWeightsCache  # (or long_sequences.CausalWeightsCache)


def heads_attention_forward(q, k, v, attn_cfg, weights_forward=None):
    """Core attention on heads-first arrays: q (B, H, T, Dh), k and v (B, H, L, Dh).
    Returns (out (B, H, T, Dh), weights (B, H, T, L), cache). weights_forward(scores, attn_cfg) ->
    (weights, cache): the ViT's by default; long_sequences.py has the causal one (with its own backward)."""
    weights_forward = weights_forward or attention_weights_forward  # looked up per call, not bound at import
    scores = (q @ k.swapaxes(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))  # (B, H, T, L)
    weights, weights_cache = weights_forward(scores, attn_cfg)  # (B, H, T, L)
    out = weights @ v  # (B, H, T, Dh)
    return out, weights, AttentionCoreCache(q, k, v, weights, weights_cache)


def heads_attention_backward(dout, cache, attn_cfg, weights_backward=None, extra_dweights=None):
    """Returns (dq (B, H, T, Dh), dk (B, H, L, Dh), dv (B, H, L, Dh)). weights_backward: the backward of
    the forward's weights_forward (default: the ViT's). extra_dweights (B, H, T, L): the gradient of a loss
    term on the weights themselves (the attention regulariser), added to what comes back through the output."""
    q, k, v, weights, weights_cache = cache
    weights_backward = weights_backward or attention_weights_backward
    inv_sqrt_dh = 1.0 / math.sqrt(q.shape[-1])
    # Differentiates out = weights @ v.
    dweights = weights_gradient(dout, v, extra_dweights)  # (B, H, T, L)
    dv = weights.swapaxes(-1, -2) @ dout  # (B, H, L, Dh)
    # Differentiates weights = attention_weights(scores).
    dscores = weights_backward(dweights, weights_cache, attn_cfg)  # (B, H, T, L)
    # Differentiates scores = q @ k^T / sqrt(Dh).
    dq = (dscores @ k) * inv_sqrt_dh  # (B, H, T, Dh)
    dk = (dscores.swapaxes(-1, -2) @ q) * inv_sqrt_dh  # (B, H, L, Dh)
    return dq, dk, dv


def weights_gradient(dout, v, extra_dweights=None):
    """dweights (B, H, T, L) of out = weights @ v, plus the regulariser's extra_dweights when there is one."""
    dweights = dout @ v.swapaxes(-1, -2)  # (B, H, T, L)
    return dweights if extra_dweights is None else dweights + extra_dweights  # (B, H, T, L)


# ------------------------------------------------------------- the public core, tokens-first (B, L, H, Dh)

def attention(q, k, v, attn_cfg, *, impl=None, block_size=None, causal=False, causal_length="per_query"):
    """Multi-head attention core, no projections: q, k, v (B, L, H, Dh) -> (B, L, H, Dh).
    Scores are q.k / sqrt(Dh) (do any qk-norm before calling); weights as `attn_cfg` says.

    impl: "dense" or "blocked" (default attn_cfg.impl); block_size: keys per block (default
    attn_cfg.block_size, else long_sequences.DEFAULT_BLOCK_SIZE). causal=True: query i sees keys j <= i, and
    the L of L^-alpha (and of sigmoid_bias's log L) is i + 1 (causal_length="per_query") or L ("global").
    A config with learn_alpha / learn_scale is refused (the learned factor is a ViT block's parameters);
    reg_weight is a term of the model's loss, which the core does not compute."""
    impl = check_attention_options(attn_cfg, impl, block_size, causal, causal_length)
    block_size = block_size or attn_cfg.block_size or DEFAULT_BLOCK_SIZE
    check_attention_shapes(q, k, v)
    q, k, v = (np.asarray(t) for t in (q, k, v))
    to_heads_first = (0, 2, 1, 3)  # (B, L, H, Dh) <-> (B, H, L, Dh); the same swap is its own inverse
    q, k, v = (t.transpose(to_heads_first) for t in (q, k, v))
    if impl == "blocked":
        out = blocked_attention_forward(q, k, v, attn_cfg, block_size, causal, causal_length)  # (B, H, L, Dh)
    elif causal:
        def causal_weights(scores, attn_cfg):
            return causal_attention_weights_forward(scores, attn_cfg, causal_length)
        out = heads_attention_forward(q, k, v, attn_cfg, causal_weights)[0]  # (B, H, L, Dh)
    else:
        out = heads_attention_forward(q, k, v, attn_cfg)[0]  # (B, H, L, Dh)
    return out.transpose(to_heads_first)  # (B, L, H, Dh)


# ---------------------------------------------------------------------------- the multi-head layer

class GateCache(NamedTuple):
    ungated: np.ndarray  # (B, T, D) the concatenated heads before the gate
    gate: np.ndarray     # (B, T, D) phi(x W_g + b_g)
    dense: DenseCache
    silu: SiluCache | None  # None when gate_activation is "identity"


class SelfAttentionCache(NamedTuple):
    qkv: DenseCache
    q_norm: LayerNormCache | None  # None without qk-norm
    k_norm: LayerNormCache | None
    core: AttentionCoreCache
    gate: GateCache | None         # None without the gate
    proj: DenseCache


def self_attention_forward(x, params, attn_cfg, heads):
    """Multi-head self-attention of a block on its normalised input x (B, T, D).
    Returns the output (B, T, D), the weights (B, H, T, T) and the cache."""
    batch, tokens, dim = x.shape
    head_dim = dim // heads
    qkv, qkv_cache = dense_forward(x, params["qkv"])  # (B, T, 3D), columns [q | k | v]
    # Split [q | k | v] and the heads of each: column c*D + h*Dh + i is part c, head h, entry i.
    qkv_heads = qkv.reshape(batch, tokens, 3, heads, head_dim).transpose(2, 0, 3, 1, 4)  # (3, B, H, T, Dh)
    q, k, v = qkv_heads  # each (B, H, T, Dh)
    q_norm_cache = k_norm_cache = None  # nothing cached when there is no qk-norm
    if attn_cfg.qk_norm:
        # LayerNorm over Dh per token and head, scale (Dh,) shared by the heads, no bias (ViT-22B).
        q, q_norm_cache = layernorm_forward(q, params["q_norm"])  # (B, H, T, Dh)
        k, k_norm_cache = layernorm_forward(k, params["k_norm"])  # (B, H, T, Dh)
    weights_forward = attention_weights_forward
    if attn_cfg.learned_length:  # the weights with this block's learned length factor
        def weights_forward(scores, attn_cfg):
            return learned_attention_weights_forward(scores, attn_cfg, params["length"])
    heads_out, weights, core_cache = heads_attention_forward(q, k, v, attn_cfg, weights_forward)  # (B, H, T, Dh)
    concat = heads_out.transpose(0, 2, 1, 3).reshape(batch, tokens, dim)  # (B, T, D), heads in order
    gate_cache = None  # nothing cached when there is no gate
    if attn_cfg.gated:
        # The block's normalised input decides what passes: phi = silu as in the gated attention unit (Hua et
        # al. 2022), or identity, Wortsman et al.'s (2023) "extra projection" taken literally.
        gate_logits, gate_dense_cache = dense_forward(x, params["gate"])  # (B, T, D)
        gate, gate_silu_cache = gate_logits, None  # identity: the projection itself
        if attn_cfg.gate_activation == "silu":
            gate, gate_silu_cache = silu_forward(gate_logits)  # (B, T, D)
        gate_cache = GateCache(concat, gate, gate_dense_cache, gate_silu_cache)
        concat = concat * gate  # (B, T, D)
    out, proj_cache = dense_forward(concat, params["proj"])  # (B, T, D)
    cache = SelfAttentionCache(qkv_cache, q_norm_cache, k_norm_cache, core_cache, gate_cache, proj_cache)
    return out, weights, cache


def self_attention_backward(dout, cache, attn_cfg, heads, extra_dweights=None):
    """Returns (dx (B, T, D), grads of the layer's parameters {"qkv", "proj", ["q_norm", "k_norm"], ["gate"],
    ["length"]}). extra_dweights (B, H, T, T): the regulariser's gradient on the weights, or None."""
    qkv_cache, q_norm_cache, k_norm_cache, core_cache, gate_cache, proj_cache = cache
    batch, tokens, dim = dout.shape
    grads = {}
    # Differentiates out = dense(concat, proj).
    dconcat, grads["proj"] = dense_backward(dout, proj_cache)  # (B, T, D)
    dx = 0.0
    if attn_cfg.gated:
        ungated, gate, gate_dense_cache, gate_silu_cache = gate_cache
        # Differentiates concat = ungated * gate, then gate = phi(dense(x, gate)).
        dgate = dconcat * ungated  # (B, T, D)
        dconcat = dconcat * gate  # (B, T, D)
        dgate_logits = dgate if gate_silu_cache is None else silu_backward(dgate, gate_silu_cache)  # (B, T, D)
        dx, grads["gate"] = dense_backward(dgate_logits, gate_dense_cache)  # (B, T, D)
    # Differentiates concat = heads_out transposed and reshaped: undo both.
    dheads_out = dconcat.reshape(batch, tokens, heads, dim // heads).transpose(0, 2, 1, 3)  # (B, H, T, Dh)
    weights_backward = attention_weights_backward
    if attn_cfg.learned_length:
        weights_backward = learned_attention_weights_backward
        # The factor's gradient needs dweights, which the core's backward keeps to itself: one matmul again.
        dweights = weights_gradient(dheads_out, core_cache.v, extra_dweights)  # (B, H, T, T)
        grads["length"] = learned_length_backward(dweights, core_cache.weights_cache, attn_cfg)
    dq, dk, dv = heads_attention_backward(dheads_out, core_cache, attn_cfg, weights_backward,
                                          extra_dweights=extra_dweights)  # each (B, H, T, Dh)
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
