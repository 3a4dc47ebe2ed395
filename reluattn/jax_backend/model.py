"""The ViT forward pass, the loss and its gradient (jax.value_and_grad), jit-compiled with the config
static (shapes: legend in the NumPy backend's __init__.py).

    patches -> dense -> [class token] + position embedding -> depth x pre-LN block -> LN -> pool -> head
    block:  x = x + attn(LN1(x));  x = x + mlp(LN2(x))

`apply` and `loss_and_grad` are the public, checked entry points: they validate their inputs with
`reluattn.checks` outside the traced function (shape and dtype checks work on tracers too, so the entry
points can themselves be transformed: jax.grad with respect to the images, jax.jvp, jax.vmap, ...), then
call a cached `jax.jit` of a pure function of the explicit parameter tree. `forward` and
`loss_and_logits` are those pure functions, unchecked and un-jitted.

Precision: computations follow the parameters' dtype (float32 by default, float64 with `jax_enable_x64`
on and float64 parameters); `compute_dtype=jnp.bfloat16` runs the matmuls in bfloat16 while parameters,
LayerNorm statistics, softmax and the loss stay in the parameters' dtype. fast=True: the speed paths of
jax_backend/fast/ (reverse-mode autodiff only; see fast/__init__.py).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ..checks import check_call, check_label_smoothing, check_regulariser_kind
from ..config import ViTConfig
from ..params import tree_leaves
from .regulariser import attention_regulariser as attention_regulariser_of_block
from .layers import canonical_compute_dtype, cross_entropy, dense, layernorm, targets_from_labels
from .mlp import mlp
from .multihead_attention import self_attention


# ------------------------------------------------------------------------------------------ embedding

def patchify(images, patch_size: int):
    """(B, S, S, C) -> (B, N, P*P*C): patches row-major over the grid, each flattened (row, col, channel)."""
    batch, side, _, channels = images.shape
    grid = side // patch_size
    patches = images.reshape(batch, grid, patch_size, grid, patch_size, channels)  # (B, S/P, P, S/P, P, C)
    patches = patches.transpose(0, 1, 3, 2, 4, 5)  # (B, S/P, S/P, P, P, C): grid row, grid col first
    return patches.reshape(batch, grid * grid, patch_size * patch_size * channels)  # (B, N, P*P*C)


def embed(images, params, cfg: ViTConfig, compute_dtype=None, fast=False, token_ids=None):
    """Images (B, S, S, C) -> tokens (B, T, D): patch embedding, class token, position embedding. With
    token_ids (B, K), each image keeps only those patch tokens (token dropping): T = K, plus the class token."""
    tokens = dense(patchify(images, cfg.patch_size), params["patch_embed"], compute_dtype, fast)  # (B, N, D)
    if cfg.pool == "cls":
        cls = jnp.broadcast_to(params["cls_token"], (tokens.shape[0], 1, cfg.dim)).astype(tokens.dtype)  # (B, 1, D)
        tokens = jnp.concatenate([cls, tokens], axis=1)  # (B, T, D), the class token is token 0
    tokens = tokens + params["pos_embed"]  # (B, T, D)
    if token_ids is not None:  # kept tokens carry their own position embedding: where each patch was
        first = 1 if cfg.pool == "cls" else 0
        kept = jnp.take_along_axis(tokens[:, first:], token_ids[:, :, None], axis=1)  # (B, K, D)
        tokens = jnp.concatenate([tokens[:, :first], kept], axis=1)  # (B, K [+ 1], D)
    return tokens


def random_token_ids(key, batch: int, num_patches: int, keep: int):
    """(B, K) int32: for each image, `keep` of its `num_patches` patch tokens, a fresh random subset each."""
    scores = jax.random.uniform(key, (batch, num_patches))  # (B, N)
    return jnp.argsort(scores, axis=1)[:, :keep].astype(jnp.int32)  # (B, K)


# ---------------------------------------------------------------------------------------------- block

def block(x, params, cfg: ViTConfig, compute_dtype=None, fast=False, return_weights=False):
    """One pre-LN block on x (B, T, D); also returns its attention weights (B, H, T, T) (or None)."""
    attended, weights = self_attention(layernorm(x, params["ln1"], fast), params["attn"], cfg.attention, cfg.heads,
                                       compute_dtype, fast, return_weights)  # (B, T, D)
    x = x + attended  # (B, T, D)
    mixed = mlp(layernorm(x, params["ln2"], fast), params["mlp"], cfg.mlp_activation, compute_dtype, fast)  # (B, T, D)
    return x + mixed, weights


# ------------------------------------------------------------------------------------------ the model

def forward(params, images, cfg: ViTConfig, compute_dtype=None, return_attention=False, *, fast=False,
            token_ids=None):
    """Logits (B, K) and, when asked, the list of per-block attention weights (B, H, T, T). token_ids
    (B, K) int: keep only those patch tokens of each image (see embed). No input checks here: `apply` and
    `loss_and_grad` do them."""
    param_dtype = jnp.result_type(*jax.tree.leaves(params))
    x = embed(images.astype(param_dtype), params, cfg, compute_dtype, fast, token_ids)  # (B, T, D)
    # A plain Python loop: XLA compiles `depth` copies of the block. A lax.scan over stacked block
    # parameters would compile one, but then XLA stacks every saved activation into a (depth, ...) array
    # and slices it back in the backward pass, which on CPU cost more than all the matmuls together
    # (docs/performance.md); compile time for the reference depth of 6 is a few seconds either way.
    weights = []
    for block_params in params["blocks"]:
        x, block_weights = block(x, block_params, cfg, compute_dtype, fast, return_attention)  # (B, T, D)
        weights.append(block_weights)  # (B, H, T, T) or None
    x = layernorm(x, params["ln_f"], fast)  # (B, T, D)
    pooled = x[:, 0] if cfg.pool == "cls" else x.mean(axis=1)  # (B, D), class token or mean of tokens
    logits = dense(pooled, params["head"], compute_dtype, fast)  # (B, K)
    return (logits, weights) if return_attention else logits


def loss_terms(params, images, labels, cfg: ViTConfig, label_smoothing=0.0, compute_dtype=None, *, fast=False,
               token_ids=None):
    """(loss, (logits, terms)): the loss, the mean softmax cross-entropy plus reg_weight * R when
    cfg.attention.reg_weight > 0, and its terms {"cross_entropy", "attention_regulariser"} (else {}).
    token_ids: as in forward."""
    reg_weight = cfg.attention.reg_weight
    if reg_weight == 0:  # the weights are not needed
        logits = forward(params, images, cfg, compute_dtype, fast=fast, token_ids=token_ids)  # (B, K)
    else:
        logits, weights = forward(params, images, cfg, compute_dtype, return_attention=True, fast=fast,
                                  token_ids=token_ids)
    targets = targets_from_labels(jnp.asarray(labels), cfg.num_classes, label_smoothing, logits.dtype)  # (B, K)
    loss = cross_entropy(logits, targets)
    if reg_weight == 0:
        return loss, (logits, {})
    # loss = cross-entropy + reg_weight * R (ReLUFormer's regulariser, a secondary reading).
    regulariser = blocks_regulariser(weights, cfg.attention)
    return loss + reg_weight * regulariser, (logits, {"cross_entropy": loss, "attention_regulariser": regulariser})


def loss_and_logits(params, images, labels, cfg: ViTConfig, label_smoothing=0.0, compute_dtype=None, *,
                    fast=False):
    """(loss, logits): the function `jax.value_and_grad(..., has_aux=True)` differentiates. labels: (B,)
    ints or (B, K) probabilities; the loss is the mean softmax cross-entropy (+ reg_weight * R, see
    loss_terms)."""
    loss, (logits, _) = loss_terms(params, images, labels, cfg, label_smoothing, compute_dtype, fast=fast)
    return loss, logits


def blocks_regulariser(weights, attn_cfg):
    """The model's attention regulariser R: the mean over blocks of each block's R (regulariser.py)."""
    return jnp.mean(jnp.stack([attention_regulariser_of_block(block_weights, attn_cfg) for block_weights in weights]))


# ---------------------------------------------------------------------------------- the public functions

@functools.partial(jax.jit, static_argnames=("cfg", "compute_dtype", "return_attention", "fast"))
def _apply_jit(params, images, cfg, compute_dtype, return_attention, fast):
    return forward(params, images, cfg, compute_dtype, return_attention, fast=fast)


@functools.partial(jax.jit, static_argnames=("cfg", "compute_dtype", "fast"))
def _loss_and_grad_jit(params, images, labels, label_smoothing, cfg, compute_dtype, fast):
    (loss, _), grads = jax.value_and_grad(loss_and_logits, has_aux=True)(
        params, images, labels, cfg, label_smoothing, compute_dtype, fast=fast)
    return loss, grads


@functools.partial(jax.jit, static_argnames=("cfg",))
def _attention_regulariser_jit(params, images, cfg):
    return blocks_regulariser(forward(params, images, cfg, return_attention=True)[1], cfg.attention)


def attention_regulariser(params, images, cfg: ViTConfig):
    """ReLUFormer's attention regulariser R of the model on `images` (a 0-d JAX array; the mean over
    blocks, heads, images and queries of |log S_i| + max(0, H(p_i) - c log n_i), c =
    cfg.attention.entropy_margin), whatever reg_weight is: for logging. Kinds with signed weights (gelu,
    identity) have no R."""
    check_regulariser_kind(cfg.attention)
    check_inputs(params, images, cfg)
    return _attention_regulariser_jit(params, images, cfg)


def check_inputs(params, images, cfg, labels=None) -> None:
    """`reluattn.checks.check_call`, plus floating-point parameters (as the NumPy backend requires).
    Shapes and dtypes only where the inputs are traced; label values too where they are concrete."""
    if not isinstance(cfg, ViTConfig):
        raise ValueError(f"cfg must be a ViTConfig, got {type(cfg).__name__}")
    check_call(params, images, cfg, labels)
    dtype = np.result_type(*(np.dtype(leaf.dtype) if hasattr(leaf, "dtype") else np.asarray(leaf).dtype
                             for leaf in tree_leaves(params)))
    if not np.issubdtype(dtype, np.floating):
        raise ValueError(f"params must be floating-point arrays, got dtype {dtype}")


def apply(params, images, cfg: ViTConfig, *, return_attention=False, compute_dtype=None, fast=False):
    """Logits (B, K) of `images` (B, S, S, C); with `return_attention=True`, `(logits, attention)` where
    attention is a list (one per block) of (B, H, T, T) weight arrays. Returns JAX arrays.
    fast=True: the speed paths of jax_backend/fast/ (reverse-mode autodiff only)."""
    check_inputs(params, images, cfg)
    if fast:
        from .fast import cpu_setup  # the speed paths live apart; only fast=True reaches them
        cpu_setup.hint_if_not_configured()
    return _apply_jit(params, images, cfg, canonical_compute_dtype(compute_dtype), bool(return_attention), bool(fast))


def loss_and_grad(params, images, labels, cfg: ViTConfig, *, label_smoothing=0.0, compute_dtype=None, fast=False):
    """(loss, grads): the mean cross-entropy as a 0-d JAX array (`float(loss)` gives a Python float;
    keeping it on device lets calls run asynchronously) and its gradient, a tree like `params` of JAX
    arrays. labels: (B,) ints in [0, K) or (B, K) target probabilities. fast: as in `apply`."""
    check_label_smoothing(label_smoothing)  # checked in the NumPy backend's order, so errors match
    check_inputs(params, images, cfg, labels)
    if fast:
        from .fast import cpu_setup  # the speed paths live apart; only fast=True reaches them
        cpu_setup.hint_if_not_configured()
    return _loss_and_grad_jit(params, images, labels, float(label_smoothing), cfg,
                              canonical_compute_dtype(compute_dtype), bool(fast))
