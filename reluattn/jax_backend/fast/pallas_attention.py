"""Fused point-wise attention for GPUs, as Pallas kernels (Triton on NVIDIA): relu/L without an L x L array.

    out = pallas_attention(q, k, v, AttentionConfig(kind="relu"))   # q, k, v: (B, L, H, Dh), on a GPU
    out = pallas_attention(q, k, v, attn_cfg, interpret=True)        # anywhere, slowly (the tests)

The shape of flash attention without its running maximum and normaliser: a point-wise weight needs
neither, so each program keeps one (bq, Dh) tile of queries and adds up `h(s) v` over the key blocks.

    forward   (grid: query blocks x B x H)  out_i  = c sum_j h(s_ij) v_j,            s_ij = q_i k_j^T / sqrt(Dh)
    dk, dv    (grid: key blocks x B x H)    dv_j   = c sum_i h(s_ij)^T g_i,          g = d loss / d out
                                            dk_j   = sum_i ds_ij^T q_i / sqrt(Dh),  ds = c h'(s) * (g v^T)
    dq        (grid: query blocks x B x H)  dq_i   = sum_j ds_ij k_j / sqrt(Dh)

with c = scale * L^-alpha. The backward recomputes the scores; nothing of size L x L is ever stored.
Matmul inputs are the inputs' dtype (bfloat16 for speed), sums are float32. Supported: the point-wise
kinds below, without causal masks, L a multiple of the block sizes and Dh a power of two >= 16.
This module is optional: only the drop-in dot_product_attention (interop.py) imports it, on a
GPU, and the CPU paths never need it.
Why it exists, measured: docs/performance.md, "On a GPU: one NVIDIA H200" > "Attention on the GPU, and a
Pallas kernel for relu/L".
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax

from ...config import AttentionConfig
from ..attention_weights import POINTWISE, length_factor

# The kinds the kernels support; h(s) and scale * L^-alpha come from attention_weights.py, h'(s) from
# jax.jvp of h (traced into plain element-wise operations inside the kernels).
KINDS = ("relu", "relu2", "relu6", "identity", "sigmoid", "softplus")


def _h_and_derivative(kind, scores):
    """h(s) and h'(s), element-wise."""
    return jax.jvp(POINTWISE[kind], (scores,), (jnp.ones_like(scores),))


def pallas_attention(q, k, v, attn_cfg: AttentionConfig, *, block_q: int = 64, block_k: int = 64,
                     num_warps: int = 4, num_stages: int = 2, interpret: bool = False):
    """(B, L, H, Dh) q, k, v -> (B, L, H, Dh) attention output with point-wise weights (see module)."""
    if attn_cfg.kind not in KINDS:
        raise ValueError(f"pallas_attention supports the kinds {', '.join(KINDS)}; got {attn_cfg.kind!r} "
                         f"(use attention(..., impl='dense' or 'blocked') for it)")
    if attn_cfg.learned_length:
        raise ValueError("pallas_attention takes a fixed alpha and scale; the learned length factor (learn_alpha / "
                         "learn_scale) lives in a ViT's parameters: use the model, or learn_alpha=learn_scale=False")
    if not (q.shape == k.shape == v.shape and q.ndim == 4):
        raise ValueError(f"q, k and v must share one (B, L, H, Dh) shape; got {q.shape}, {k.shape}, {v.shape}")
    length, head_dim = q.shape[1], q.shape[3]
    if head_dim < 16 or head_dim & (head_dim - 1):
        raise ValueError(f"the head width must be a power of two >= 16; got {head_dim}")
    for name, block in (("block_q", block_q), ("block_k", block_k)):
        if length % block:
            raise ValueError(f"the length {length} must be a multiple of {name}={block}")
    options = (attn_cfg.kind, float(length_factor(attn_cfg, length)), block_q, block_k,
               num_warps, num_stages, interpret)
    return _attention(options, q, k, v)


def _call(kernel, grid, in_specs, out_specs, out_shape, options, name):
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu
    *_, num_warps, num_stages, interpret = options
    return pl.pallas_call(kernel, grid=grid, in_specs=in_specs, out_specs=out_specs, out_shape=out_shape,
                          compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=num_stages),
                          interpret=interpret, name=name)


def _specs(block, length, head_dim):
    """BlockSpecs over (B, L, H, Dh) arrays: one (block, Dh) tile of program i, and the whole (L, Dh) row."""
    from jax.experimental import pallas as pl
    tile = pl.BlockSpec((None, block, None, head_dim), lambda i, b, h: (b, i, h, 0))
    row = pl.BlockSpec((None, length, None, head_dim), lambda i, b, h: (b, 0, h, 0))
    return tile, row


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _attention(options, q, k, v):
    return _forward(options, q, k, v)


def _forward(options, q, k, v):
    from jax.experimental import pallas as pl
    kind, factor, block_q, block_k = options[:4]
    batch, length, heads, head_dim = q.shape
    h = POINTWISE[kind]
    inverse_sqrt = 1.0 / math.sqrt(head_dim)

    def kernel(q_ref, k_ref, v_ref, out_ref):
        q_tile = q_ref[...]  # (bq, Dh)

        def body(j, total):
            keys = pl.ds(j * block_k, block_k)
            scores = jnp.dot(q_tile, k_ref[keys, :].T, preferred_element_type=jnp.float32) * inverse_sqrt  # (bq, bk)
            weights = h(scores).astype(v_ref.dtype)  # (bq, bk)
            return total + jnp.dot(weights, v_ref[keys, :], preferred_element_type=jnp.float32)  # (bq, Dh)

        total = lax.fori_loop(0, length // block_k, body, jnp.zeros((block_q, head_dim), jnp.float32))
        out_ref[...] = (factor * total).astype(out_ref.dtype)  # the length factor once per output, not per weight

    tile, row = _specs(block_q, length, head_dim)
    return _call(kernel, (length // block_q, batch, heads), [tile, row, row], tile,
                 jax.ShapeDtypeStruct(q.shape, q.dtype), options, "pointwise_attention_forward")(q, k, v)


def _forward_with_residuals(options, q, k, v):
    return _forward(options, q, k, v), (q, k, v)  # O(L Dh) residuals: the backward recomputes the scores


def _backward(options, residuals, out_grad):
    from jax.experimental import pallas as pl
    q, k, v = residuals
    kind, factor, block_q, block_k = options[:4]
    batch, length, heads, head_dim = q.shape
    inverse_sqrt = 1.0 / math.sqrt(head_dim)
    out_grad = out_grad.astype(q.dtype)

    def scores_of(q_tile, k_tile):
        return jnp.dot(q_tile, k_tile.T, preferred_element_type=jnp.float32) * inverse_sqrt  # (bq, bk)

    def dkdv_kernel(q_ref, k_ref, v_ref, g_ref, dk_ref, dv_ref):
        k_tile, v_tile = k_ref[...], v_ref[...]  # (bk, Dh)

        def body(i, carry):
            dk, dv = carry
            queries = pl.ds(i * block_q, block_q)
            q_tile, g_tile = q_ref[queries, :], g_ref[queries, :]  # (bq, Dh)
            scores = scores_of(q_tile, k_tile)  # (bq, bk)
            unscaled, derivative = _h_and_derivative(kind, scores)  # h(s), h'(s): (bq, bk)
            weights = (factor * unscaled).astype(g_tile.dtype)  # (bq, bk)
            dv = dv + jnp.dot(weights.T, g_tile, preferred_element_type=jnp.float32)  # (bk, Dh)
            dweights = jnp.dot(g_tile, v_tile.T, preferred_element_type=jnp.float32)  # (bq, bk)
            dscores = (dweights * (factor * inverse_sqrt) * derivative).astype(q_tile.dtype)  # (bq, bk)
            return dk + jnp.dot(dscores.T, q_tile, preferred_element_type=jnp.float32), dv  # (bk, Dh)

        zeros = jnp.zeros((block_k, head_dim), jnp.float32)
        dk, dv = lax.fori_loop(0, length // block_q, body, (zeros, zeros))
        dk_ref[...], dv_ref[...] = dk.astype(dk_ref.dtype), dv.astype(dv_ref.dtype)

    def dq_kernel(q_ref, k_ref, v_ref, g_ref, dq_ref):
        q_tile, g_tile = q_ref[...], g_ref[...]  # (bq, Dh)

        def body(j, dq):
            keys = pl.ds(j * block_k, block_k)
            k_tile = k_ref[keys, :]  # (bk, Dh)
            scores = scores_of(q_tile, k_tile)  # (bq, bk)
            dweights = jnp.dot(g_tile, v_ref[keys, :].T, preferred_element_type=jnp.float32)  # (bq, bk)
            derivative = _h_and_derivative(kind, scores)[1]  # h'(s): (bq, bk)
            dscores = (dweights * (factor * inverse_sqrt) * derivative).astype(k_tile.dtype)  # (bq, bk)
            return dq + jnp.dot(dscores, k_tile, preferred_element_type=jnp.float32)  # (bq, Dh)

        dq = lax.fori_loop(0, length // block_k, body, jnp.zeros((block_q, head_dim), jnp.float32))
        dq_ref[...] = dq.astype(dq_ref.dtype)

    key_tile, row = _specs(block_k, length, head_dim)
    like_q = jax.ShapeDtypeStruct(q.shape, q.dtype)
    dk, dv = _call(dkdv_kernel, (length // block_k, batch, heads), [row, key_tile, key_tile, row],
                   [key_tile, key_tile], [like_q, like_q], options, "pointwise_attention_dkdv")(q, k, v, out_grad)
    query_tile, row = _specs(block_q, length, head_dim)
    dq = _call(dq_kernel, (length // block_q, batch, heads), [query_tile, row, row, query_tile], query_tile,
               like_q, options, "pointwise_attention_dq")(q, k, v, out_grad)
    return dq, dk, dv


_attention.defvjp(_forward_with_residuals, _backward)
