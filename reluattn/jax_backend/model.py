"""The ViT forward pass, the loss and its gradient, jit-compiled with the config static.

`apply` and `loss_and_grad` are the public, checked entry points: they validate their inputs with
`reluattn.checks` (outside jit, so errors are plain ValueErrors), then call a cached `jax.jit` of a pure
function of the explicit parameter tree (`reluattn.params.param_shapes`; NumPy or JAX arrays).
Gradients come from `jax.value_and_grad` and have the same tree (dicts and lists) as the parameters.

Precision: computations follow the parameters' dtype (float32 by default, float64 with `jax_enable_x64`
on and float64 parameters); `compute_dtype=jnp.bfloat16` runs the matmuls in bfloat16 while parameters,
LayerNorm statistics, softmax and the loss stay in the parameters' dtype (see layers.py).

Shapes: B batch, S image side, C channels, P patch side, N patches, T tokens, D width, H heads,
Dh head width, M MLP width, K classes.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ..checks import check_call, check_label_smoothing
from ..config import ViTConfig
from ..params import tree_leaves
from .attention import multi_head_attention
from .layers import canonical_compute_dtype, dense, layer_norm, mlp, scale_only_layer_norm


def patchify(images, patch_size: int):
    """(B, S, S, C) -> (B, N, P*P*C): patches row-major over the grid, each flattened (row, col, channel)."""
    batch, side, _, channels = images.shape
    grid = side // patch_size
    patches = images.reshape(batch, grid, patch_size, grid, patch_size, channels)  # (B, gy, P, gx, P, C)
    patches = patches.transpose(0, 1, 3, 2, 4, 5)  # (B, gy, gx, P, P, C)
    return patches.reshape(batch, grid * grid, patch_size * patch_size * channels)  # (B, N, P*P*C)


def embed(params, images, cfg: ViTConfig, compute_dtype=None):
    """Patch embedding, class token (token 0, when pool == "cls"), position embedding: (B, T, D)."""
    x = dense(patchify(images, cfg.patch_size), params["patch_embed"], compute_dtype)  # (B, N, D)
    if cfg.pool == "cls":
        cls = jnp.broadcast_to(params["cls_token"], (x.shape[0], 1, cfg.dim)).astype(x.dtype)  # (B, 1, D)
        x = jnp.concatenate([cls, x], axis=1)  # (B, T, D)
    return x + params["pos_embed"]  # (B, T, D)


def attention_layer(x, params, cfg: ViTConfig, compute_dtype=None, return_weights=False):
    """Multi-head self-attention on the normalised block input x (B, T, D): fused qkv projection,
    optional qk-layernorm, the attention core, optional gate, output projection."""
    batch, tokens, _ = x.shape
    attn_cfg = cfg.attention
    qkv = dense(x, params["qkv"], compute_dtype)  # (B, T, 3D), columns [q | k | v]
    q, k, v = jnp.unstack(qkv.reshape(batch, tokens, 3, cfg.heads, cfg.head_dim), axis=2)  # 3 x (B, T, H, Dh)
    if attn_cfg.qk_norm:
        q = scale_only_layer_norm(q, params["q_norm"]["scale"])  # (B, T, H, Dh)
        k = scale_only_layer_norm(k, params["k_norm"]["scale"])  # (B, T, H, Dh)
    out, weights = multi_head_attention(q, k, v, attn_cfg, compute_dtype, return_weights)  # (B, T, H, Dh)
    out = out.reshape(batch, tokens, cfg.dim)  # (B, T, D), heads concatenated in order
    if attn_cfg.gated:
        out = out * jax.nn.silu(dense(x, params["gate"], compute_dtype))  # (B, T, D)
    return dense(out, params["proj"], compute_dtype), weights  # (B, T, D)


def block(x, params, cfg: ViTConfig, compute_dtype=None, return_weights=False):
    """Pre-LN transformer block: x + attn(LN1(x)), then + mlp(LN2(x))."""
    attended, weights = attention_layer(layer_norm(x, params["ln1"]), params["attn"], cfg, compute_dtype,
                                        return_weights)
    x = x + attended  # (B, T, D)
    x = x + mlp(layer_norm(x, params["ln2"]), params["mlp"], cfg.mlp_activation, compute_dtype)  # (B, T, D)
    return x, weights


def forward(params, images, cfg: ViTConfig, compute_dtype=None, return_attention=False):
    """Logits (B, K) and, when asked, the list of per-block attention weights (B, H, T, T)."""
    param_dtype = jnp.result_type(*jax.tree.leaves(params))
    x = embed(params, images.astype(param_dtype), cfg, compute_dtype)  # (B, T, D)
    # The blocks share one structure, so stack their parameters (a leading depth axis) and scan over them:
    # XLA compiles one block, not `depth` unrolled copies, so compile time does not grow with depth. On the
    # reference config (busy 2-core CPU) it ran within noise of a Python loop over the blocks (faster in
    # some runs, slower in others); re-measure on a quiet machine when tuning speed.
    stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves), *params["blocks"])  # each leaf (depth, ...)

    def one_block(x, block_params):
        return block(x, block_params, cfg, compute_dtype, return_attention)

    x, weights = jax.lax.scan(one_block, x, stacked)  # (B, T, D), (depth, B, H, T, T) or None
    x = layer_norm(x, params["ln_f"])  # (B, T, D)
    pooled = x[:, 0] if cfg.pool == "cls" else x.mean(axis=1)  # (B, D)
    logits = dense(pooled, params["head"], compute_dtype)  # (B, K)
    return (logits, list(weights)) if return_attention else logits


def cross_entropy(logits, labels, label_smoothing=0.0):
    """Mean over the batch of -sum target * log_softmax(logits). labels: (B,) ints or (B, K) probabilities;
    label smoothing mixes the target with the uniform distribution: (1 - ls) * target + ls / K."""
    num_classes = logits.shape[-1]
    log_probs = jax.nn.log_softmax(logits, axis=-1)  # (B, K)
    if labels.ndim == 1:
        targets = jax.nn.one_hot(labels, num_classes, dtype=log_probs.dtype)  # (B, K)
    else:
        targets = labels.astype(log_probs.dtype)  # (B, K)
    targets = (1.0 - label_smoothing) * targets + label_smoothing / num_classes  # (B, K)
    return -jnp.mean(jnp.sum(targets * log_probs, axis=-1))


def loss_and_logits(params, images, labels, cfg: ViTConfig, label_smoothing=0.0, compute_dtype=None):
    """(loss, logits): the function `jax.value_and_grad(..., has_aux=True)` differentiates."""
    logits = forward(params, images, cfg, compute_dtype)  # (B, K)
    return cross_entropy(logits, labels, label_smoothing), logits


@functools.partial(jax.jit, static_argnames=("cfg", "compute_dtype", "return_attention"))
def _apply_jit(params, images, cfg, compute_dtype, return_attention):
    return forward(params, images, cfg, compute_dtype, return_attention)


@functools.partial(jax.jit, static_argnames=("cfg", "compute_dtype"))
def _loss_and_grad_jit(params, images, labels, label_smoothing, cfg, compute_dtype):
    (loss, _), grads = jax.value_and_grad(loss_and_logits, has_aux=True)(
        params, images, labels, cfg, label_smoothing, compute_dtype)
    return loss, grads


def check_inputs(params, images, cfg, labels=None) -> None:
    """`reluattn.checks.check_call`, plus floating-point parameters (as the NumPy backend requires)."""
    if not isinstance(cfg, ViTConfig):
        raise ValueError(f"cfg must be a ViTConfig, got {type(cfg).__name__}")
    check_call(params, images, cfg, labels)
    dtype = np.result_type(*(np.dtype(leaf.dtype) if hasattr(leaf, "dtype") else np.asarray(leaf).dtype
                             for leaf in tree_leaves(params)))
    if not np.issubdtype(dtype, np.floating):
        raise ValueError(f"params must be floating-point arrays, got dtype {dtype}")


def apply(params, images, cfg: ViTConfig, *, return_attention=False, compute_dtype=None):
    """Logits (B, K) of `images` (B, S, S, C); with `return_attention=True`, `(logits, attention)` where
    attention is a list (one per block) of (B, H, T, T) weight arrays. Returns JAX arrays."""
    check_inputs(params, images, cfg)
    return _apply_jit(params, images, cfg, canonical_compute_dtype(compute_dtype), bool(return_attention))


def loss_and_grad(params, images, labels, cfg: ViTConfig, *, label_smoothing=0.0, compute_dtype=None):
    """(loss, grads): the mean cross-entropy as a 0-d JAX array (`float(loss)` gives a Python float;
    keeping it on device lets calls run asynchronously) and its gradient, a tree like `params` of JAX
    arrays. labels: (B,) ints in [0, K) or (B, K) target probabilities."""
    check_label_smoothing(label_smoothing)  # checked in the NumPy backend's order, so errors match
    check_inputs(params, images, cfg, labels)
    return _loss_and_grad_jit(params, images, labels, float(label_smoothing), cfg,
                              canonical_compute_dtype(compute_dtype))
