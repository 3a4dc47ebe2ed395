"""Multi-head self-attention; its backward is jax.grad's (shapes: B batch, T queries, L keys, H heads,
Dh head width, D = H * Dh).

Two levels, as in the NumPy twin:
  heads_attention(q, k, v, attn_cfg)                 the core, q, k, v (B, T, H, Dh), no projections:
      s = q.k / sqrt(Dh),  w = attention_weights(s) (attention_weights.py),  o = w v
  self_attention(x, params, attn_cfg, heads)         the layer of a ViT block:
      fused qkv dense -> optional qk-LayerNorm -> core -> heads concatenated -> optional gate -> proj
      (the learned length factor, when AttentionConfig.learn_alpha / learn_scale, is in the core's weights;
      the gate: o = attn_out * phi(x W_g + b_g), phi = silu or identity, AttentionConfig.gate_activation)

Layout: tokens-first (B, T, H, Dh) here, heads-first (B, H, T, Dh) in NumPy: an einsum names its axes,
so XLA picks the layout, while NumPy's batched matmul needs the batch axes (B, H) in front.

`attention(q, k, v, attn_cfg, *, impl, block_size, causal, causal_length)` is the public, checked,
jitted core with every option (causal masks and impl="blocked" come from long_sequences.py). The drop-ins
for someone else's model (jax.nn.dot_product_attention's and Flax's signatures) are in interop.py.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from ..checks import check_attention_options, check_attention_shapes
from .attention_weights import attention_weights, length_factor
from .layers import canonical_compute_dtype, dense, layernorm, matmul, silu
from .long_sequences import blocked_attention, causal_attention_weights


# --------------------------------------------------------------------- the core, tokens-first (B, T, H, Dh)

def heads_attention(q, k, v, attn_cfg, compute_dtype=None, fast=False, weights_function=attention_weights):
    """Core attention: q (B, T, H, Dh), k and v (B, L, H, Dh) -> (out (B, T, H, Dh), weights (B, H, T, L)).
    weights_function(scores, attn_cfg) -> weights: the ViT's; long_sequences.py has the causal one."""
    q = q * (1.0 / math.sqrt(q.shape[-1]))  # scale the smaller tensor, not the T x L scores
    scores = matmul("bqhd,bkhd->bhqk", q, k, compute_dtype, fast)  # (B, H, T, L)
    weights = weights_function(scores, attn_cfg)  # (B, H, T, L)
    return matmul("bhqk,bkhd->bqhd", weights, v, compute_dtype, fast), weights  # (B, T, H, Dh)


def core_attention(q, k, v, attn_cfg, compute_dtype=None, fast=False, return_weights=False, *, impl=None,
                   block_size=None, causal=False, causal_length="per_query", length=None):
    """The core by impl (default attn_cfg.impl) and causal: (out (B, T, H, Dh), weights or None). With
    impl="blocked" the weights are only computed (densely, for plots and tests) when asked for.
    length: a ViT block's learned length parameters (not causal), or None."""
    impl = attn_cfg.impl if impl is None else impl
    if impl == "dense":
        def causal_weights(scores, attn_cfg):
            return causal_attention_weights(scores, attn_cfg, causal_length)

        def learned_weights(scores, attn_cfg):
            return attention_weights(scores, attn_cfg, length=length)
        weights_function = causal_weights if causal else attention_weights if length is None else learned_weights
        out, weights = heads_attention(q, k, v, attn_cfg, compute_dtype, fast, weights_function)
        return out, (weights if return_weights else None)
    if length is None:
        out = blocked_attention(q, k, v, attn_cfg, block_size=block_size, causal=causal,
                                causal_length=causal_length, compute_dtype=compute_dtype)
    else:
        # The learned factor is one number per head, the same for every weight of the head: run the tiles
        # with factor 1 (alpha 0, scale 1) and multiply each head's output by its factor.
        unit = attn_cfg.replace(alpha=0.0, scale=1.0, learn_alpha=False, learn_scale=False)
        out = blocked_attention(q, k, v, unit, block_size=block_size, compute_dtype=compute_dtype)  # (B, T, H, Dh)
        out = out * length_factor(attn_cfg, k.shape[1], length)[:, 0].astype(out.dtype)  # (B, T, H, Dh)
    if not return_weights:
        return out, None
    return out, core_attention(q, k, v, attn_cfg, compute_dtype, fast, True, impl="dense", causal=causal,
                               causal_length=causal_length, length=length)[1]


@functools.partial(jax.jit, static_argnames=("attn_cfg", "return_weights", "compute_dtype", "fast", "impl",
                                             "block_size", "causal", "causal_length"))
def _attention_jit(q, k, v, attn_cfg, return_weights, compute_dtype, fast, impl, block_size, causal, causal_length):
    return core_attention(q, k, v, attn_cfg, compute_dtype, fast, return_weights, impl=impl, block_size=block_size,
                          causal=causal, causal_length=causal_length)


def attention(q, k, v, attn_cfg, *, impl=None, block_size=None, causal=False, causal_length="per_query",
              return_weights=False, compute_dtype=None, fast=False):
    """Multi-head attention core, no projections: q, k, v (B, L, H, Dh) -> (B, L, H, Dh).

    s = q.k / sqrt(Dh) (do any qk-norm before calling); weights as `attn_cfg` says; o_i = sum_j w_ij v_j.
    impl: "dense" or "blocked" (default attn_cfg.impl); block_size: keys per tile for "blocked" (default
    attn_cfg.block_size, else long_sequences.DEFAULT_BLOCK_SIZE). causal=True: query i sees keys j <= i,
    with L = i + 1 (causal_length="per_query") or L ("global") in L^-alpha and log L. With
    `return_weights=True` returns `(output, weights)`, weights (B, H, L, L). fast=True: the matmuls of
    jax_backend/fast/. Accepts NumPy or JAX arrays; returns JAX arrays. Differentiable either way.
    A config with learn_alpha / learn_scale is refused (the learned factor is a ViT block's parameters);
    reg_weight is a term of the model's loss, which the core does not compute.
    """
    impl = check_attention_options(attn_cfg, impl, block_size, causal, causal_length)
    check_attention_shapes(q, k, v)
    out, weights = _attention_jit(q, k, v, attn_cfg, bool(return_weights), canonical_compute_dtype(compute_dtype),
                                  bool(fast), impl, None if block_size is None else int(block_size), bool(causal),
                                  causal_length)
    return (out, weights) if return_weights else out


# ---------------------------------------------------------------------------- the multi-head layer

def self_attention(x, params, attn_cfg, heads, compute_dtype=None, fast=False, return_weights=False):
    """Multi-head self-attention of a block on its normalised input x (B, T, D).
    Returns the output (B, T, D) and the weights (B, H, T, T) (None unless return_weights)."""
    batch, tokens, dim = x.shape
    qkv = dense(x, params["qkv"], compute_dtype, fast)  # (B, T, 3D), columns [q | k | v]
    # Split [q | k | v] and the heads of each: column c*D + h*Dh + i is part c, head h, entry i.
    q, k, v = jnp.unstack(qkv.reshape(batch, tokens, 3, heads, dim // heads), axis=2)  # 3 x (B, T, H, Dh)
    if attn_cfg.qk_norm:
        # LayerNorm over Dh per token and head, scale (Dh,) shared by the heads, no bias (ViT-22B).
        q = layernorm(q, params["q_norm"], fast)  # (B, T, H, Dh)
        k = layernorm(k, params["k_norm"], fast)  # (B, T, H, Dh)
    out, weights = core_attention(q, k, v, attn_cfg, compute_dtype, fast, return_weights,
                                  length=params.get("length"))  # (B, T, H, Dh); the learned factor, if any
    out = out.reshape(batch, tokens, dim)  # (B, T, D), heads concatenated in order
    if attn_cfg.gated:
        # The block's normalised input decides what passes: phi = silu as in the gated attention unit (Hua et
        # al. 2022), or identity, Wortsman et al.'s (2023) "extra projection" taken literally.
        gate = dense(x, params["gate"], compute_dtype, fast)  # (B, T, D)
        out = out * (silu(gate) if attn_cfg.gate_activation == "silu" else gate)  # (B, T, D)
    return dense(out, params["proj"], compute_dtype, fast), weights  # (B, T, D)
