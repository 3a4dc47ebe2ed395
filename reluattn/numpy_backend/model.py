"""The Vision Transformer, forward and hand-written backward (shapes: legend in __init__.py).

    patches -> dense -> [class token] + position embedding -> depth x pre-LN block -> LN -> pool -> head
    block:  x = x + attn(LN1(x));  x = x + mlp(LN2(x))

`apply` and `loss_and_grad` are the public entry points; they check their input and compute in the
parameters' dtype (float64 parameters: float64 throughout, which is what the gradient tests use).
The attention core is always the dense one (cfg.attention.impl is a memory strategy of the JAX backend;
the values are the same).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..checks import check_call, check_label_smoothing, check_regulariser_kind
from ..config import ViTConfig
from ..params import tree_leaves, tree_map
from .regulariser import attention_regulariser_backward, attention_regulariser_forward
from .layers import (DenseCache, LayerNormCache, cross_entropy_backward, cross_entropy_forward, dense_backward,
                     dense_forward, layernorm_backward, layernorm_forward, targets_from_labels)
from .mlp import MlpCache, mlp_backward, mlp_forward
from .multihead_attention import SelfAttentionCache, self_attention_backward, self_attention_forward


class EmbedCache(NamedTuple):
    patch_embed: DenseCache
    token_ids: np.ndarray | None  # (B, K) the patch tokens kept, or None: all of them


class BlockCache(NamedTuple):
    ln1: LayerNormCache
    attn: SelfAttentionCache
    ln2: LayerNormCache
    mlp: MlpCache


class ModelCache(NamedTuple):
    embed: EmbedCache
    blocks: list          # one BlockCache per block
    ln_f: LayerNormCache
    head: DenseCache


# ------------------------------------------------------------------------------------------ embedding

def patchify(images, patch_size):
    """(B, S, S, C) -> (B, N, P*P*C): patches row-major over the grid, each flattened (row, col, channel)."""
    batch, side, _, channels = images.shape
    grid = side // patch_size
    patches = images.reshape(batch, grid, patch_size, grid, patch_size, channels)  # (B, S/P, P, S/P, P, C)
    patches = patches.transpose(0, 1, 3, 2, 4, 5)  # (B, S/P, S/P, P, P, C): grid row, grid col first
    return patches.reshape(batch, grid * grid, patch_size * patch_size * channels)  # (B, N, P*P*C)


def embed_forward(images, params, cfg, token_ids=None):
    """Images (B, S, S, C) -> tokens (B, T, D): patch embedding, class token, position embedding. With
    token_ids (B, K), each image keeps only those patch tokens (token dropping): T = K, plus the class token."""
    patches = patchify(images, cfg.patch_size)  # (B, N, P*P*C)
    tokens, patch_cache = dense_forward(patches, params["patch_embed"])  # (B, N, D)
    if cfg.pool == "cls":
        cls = np.broadcast_to(params["cls_token"], (tokens.shape[0], 1, cfg.dim))  # (B, 1, D)
        tokens = np.concatenate([cls, tokens], axis=1)  # (B, T, D), the class token is token 0
    tokens = tokens + params["pos_embed"]  # (B, T, D)
    if token_ids is not None:
        first = 1 if cfg.pool == "cls" else 0
        kept = np.take_along_axis(tokens[:, first:], token_ids[:, :, None], axis=1)  # (B, K, D)
        tokens = np.concatenate([tokens[:, :first], kept], axis=1)  # (B, K [+ 1], D)
    return tokens, EmbedCache(patch_cache, token_ids)


def embed_backward(dtokens, cache, cfg):
    """Returns the grads {"pos_embed", ["cls_token"], "patch_embed"} (the images need no gradient)."""
    patch_cache, token_ids = cache
    if token_ids is not None:
        # Differentiates the gather of the kept tokens: each goes back to its place, dropped ones get 0.
        first = 1 if cfg.pool == "cls" else 0
        full = np.zeros((dtokens.shape[0], cfg.num_tokens, dtokens.shape[2]), dtype=dtokens.dtype)  # (B, T, D)
        full[:, :first] = dtokens[:, :first]
        np.put_along_axis(full[:, first:], token_ids[:, :, None], dtokens[:, first:], axis=1)
        dtokens = full  # (B, T, D)
    # Differentiates tokens + pos_embed: the position embedding is shared by the batch.
    grads = {"pos_embed": dtokens.sum(axis=0)}  # (T, D)
    if cfg.pool == "cls":
        # Differentiates the concatenation: token 0 came from the class token.
        grads["cls_token"] = dtokens[:, 0].sum(axis=0)  # (D,)
        dtokens = dtokens[:, 1:]  # (B, N, D)
    # Differentiates the patch dense layer; the images need no gradient, so its dx is dropped.
    _, grads["patch_embed"] = dense_backward(dtokens, patch_cache)
    return grads


# ---------------------------------------------------------------------------------------------- block

def block_forward(x, params, cfg):
    """One pre-LN block on x (B, T, D); also returns its attention weights (B, H, T, T)."""
    normed, ln1_cache = layernorm_forward(x, params["ln1"])  # (B, T, D)
    attended, weights, attn_cache = self_attention_forward(normed, params["attn"], cfg.attention, cfg.heads)
    x = x + attended  # (B, T, D)
    normed, ln2_cache = layernorm_forward(x, params["ln2"])  # (B, T, D)
    mixed, mlp_cache = mlp_forward(normed, params["mlp"], cfg.mlp_activation)  # (B, T, D)
    return x + mixed, weights, BlockCache(ln1_cache, attn_cache, ln2_cache, mlp_cache)


def block_backward(dout, cache, cfg, extra_dweights=None):
    """Returns (dx (B, T, D), grads {"ln1", "attn", "ln2", "mlp"}). extra_dweights (B, H, T, T): the
    regulariser's gradient on this block's attention weights, or None."""
    ln1_cache, attn_cache, ln2_cache, mlp_cache = cache
    grads = {}
    # Differentiates x + mlp(LN2(x)): the residual passes dout straight through, plus the MLP path.
    dnormed, grads["mlp"] = mlp_backward(dout, mlp_cache, cfg.mlp_activation)  # (B, T, D)
    dnormed, grads["ln2"] = layernorm_backward(dnormed, ln2_cache)  # (B, T, D)
    dx = dout + dnormed  # (B, T, D)
    # Differentiates x + attn(LN1(x)) the same way.
    dnormed, grads["attn"] = self_attention_backward(dx, attn_cache, cfg.attention, cfg.heads,
                                                     extra_dweights=extra_dweights)  # (B, T, D)
    dnormed, grads["ln1"] = layernorm_backward(dnormed, ln1_cache)  # (B, T, D)
    return dx + dnormed, grads


# ------------------------------------------------------------------------------------------ the model

def forward(params, images, cfg, token_ids=None):
    """Logits (B, K), the attention weights of every block [(B, H, T, T)] and the cache for `backward`.
    token_ids (B, K) int: keep only those patch tokens of each image (see embed_forward). No input checks
    here: `apply` and `loss_and_grad` do them."""
    x, embed_cache = embed_forward(images, params, cfg, token_ids)  # (B, T, D)
    block_caches, attention_weights = [], []
    for block_params in params["blocks"]:
        x, weights, block_cache = block_forward(x, block_params, cfg)  # (B, T, D)
        block_caches.append(block_cache)
        attention_weights.append(weights)
    x, ln_f_cache = layernorm_forward(x, params["ln_f"])  # (B, T, D)
    pooled = x[:, 0] if cfg.pool == "cls" else x.mean(axis=1)  # (B, D), class token or mean of tokens
    logits, head_cache = dense_forward(pooled, params["head"])  # (B, K)
    return logits, attention_weights, ModelCache(embed_cache, block_caches, ln_f_cache, head_cache)


def backward(dlogits, cache, cfg, extra_dweights=None):
    """Returns the gradients of every parameter, in the same tree as the parameters. extra_dweights: one
    (B, H, T, T) array per block, the regulariser's gradient on the attention weights, or None."""
    embed_cache, block_caches, ln_f_cache, head_cache = cache
    grads = {}
    # Differentiates logits = dense(pooled, head).
    dpooled, grads["head"] = dense_backward(dlogits, head_cache)  # (B, D)
    batch, dim = dpooled.shape
    # Differentiates the pooling: all of it to token 0, or an equal share to every token.
    kept = embed_cache.token_ids  # (B, K) or None
    tokens = cfg.num_tokens if kept is None else kept.shape[1] + (cfg.pool == "cls")  # T: fewer after dropping
    dx = np.zeros((batch, tokens, dim), dtype=dpooled.dtype)  # (B, T, D)
    if cfg.pool == "cls":
        dx[:, 0] = dpooled
    else:
        dx[:] = dpooled[:, None, :] / tokens
    dx, grads["ln_f"] = layernorm_backward(dx, ln_f_cache)  # (B, T, D)
    grads["blocks"] = [None] * len(block_caches)
    for index in reversed(range(len(block_caches))):
        extra = None if extra_dweights is None else extra_dweights[index]
        dx, grads["blocks"][index] = block_backward(dx, block_caches[index], cfg, extra_dweights=extra)  # (B, T, D)
    grads.update(embed_backward(dx, embed_cache, cfg))
    return grads


# ---------------------------------------------------------------------------------- the public functions

def _prepare(params, images, cfg, labels=None):
    """Check everything, then return the parameters and images in the parameters' (floating) dtype."""
    if not isinstance(cfg, ViTConfig):
        raise ValueError(f"cfg must be a ViTConfig, got {type(cfg).__name__}")
    check_call(params, images, cfg, labels)
    dtype = np.result_type(*tree_leaves(params))
    if not np.issubdtype(dtype, np.floating):
        raise ValueError(f"params must be floating-point arrays, got dtype {dtype}")
    params = tree_map(lambda leaf: np.asarray(leaf, dtype=dtype), params)  # no copy when already dtype
    return params, np.asarray(images, dtype=dtype)


def apply(params, images, cfg, *, return_attention=False):
    """Logits (B, K) for images (B, S, S, C); with return_attention=True, (logits, [weights (B, H, T, T)
    of each block])."""
    params, images = _prepare(params, images, cfg)
    logits, attention_weights, _ = forward(params, images, cfg)
    return (logits, attention_weights) if return_attention else logits


def regulariser_forward(attention_weights, attn_cfg):
    """The model's attention regulariser R: the mean over blocks of each block's R (regulariser.py),
    and the blocks' caches."""
    values, caches = zip(*(attention_regulariser_forward(weights, attn_cfg) for weights in attention_weights))
    return float(np.mean(values)), list(caches)


def regulariser_backward(dvalue, caches):
    """Returns the gradient of dvalue * R on each block's weights, [(B, H, T, T)]."""
    # Differentiates the mean over blocks: each block gets an equal share.
    return [attention_regulariser_backward(dvalue / len(caches), cache) for cache in caches]


def forward_backward(params, images, labels, cfg, *, label_smoothing=0.0):
    """(loss, grads, logits, terms): `loss_and_grad` plus the logits, which training needs for its
    accuracy, and the loss's terms {"cross_entropy", "attention_regulariser"} when reg_weight > 0 (else {})."""
    check_label_smoothing(label_smoothing)
    params, images = _prepare(params, images, cfg, labels)
    logits, attention_weights, cache = forward(params, images, cfg)
    targets = targets_from_labels(labels, cfg.num_classes, label_smoothing, dtype=logits.dtype)  # (B, K)
    loss, loss_cache = cross_entropy_forward(logits, targets)
    dlogits = cross_entropy_backward(1.0, loss_cache)  # (B, K)
    reg_weight = cfg.attention.reg_weight
    if reg_weight == 0:
        return loss, backward(dlogits, cache, cfg), logits, {}
    # loss = cross-entropy + reg_weight * R (ReLUFormer's regulariser, a secondary reading).
    regulariser, regulariser_caches = regulariser_forward(attention_weights, cfg.attention)
    extra_dweights = regulariser_backward(reg_weight, regulariser_caches)  # [(B, H, T, T)]
    terms = {"cross_entropy": loss, "attention_regulariser": regulariser}
    grads = backward(dlogits, cache, cfg, extra_dweights=extra_dweights)
    return loss + reg_weight * regulariser, grads, logits, terms


def loss_and_grad(params, images, labels, cfg, *, label_smoothing=0.0):
    """The loss (a float) and its gradient, a tree shaped like params: the mean softmax cross-entropy, plus
    reg_weight * R when cfg.attention.reg_weight > 0 (R: `attention_regulariser`).
    labels: (B,) integers in [0, K) or (B, K) target probabilities."""
    loss, grads, _, _ = forward_backward(params, images, labels, cfg, label_smoothing=label_smoothing)
    return loss, grads


def attention_regulariser(params, images, cfg):
    """ReLUFormer's attention regulariser R of the model on `images` (a float; the mean over blocks, heads,
    images and queries of |log S_i| + max(0, H(p_i) - c log n_i), c = cfg.attention.entropy_margin), whatever
    reg_weight is: for logging. Kinds with signed weights (gelu, identity) have no R."""
    check_regulariser_kind(cfg.attention)
    params, images = _prepare(params, images, cfg)
    return regulariser_forward(forward(params, images, cfg)[1], cfg.attention)[0]
