"""Checks on what users hand to `apply` / `loss_and_grad`, shared by both backends (pure NumPy).

Each check raises a ValueError that says what was expected and what came. Shapes and dtypes are checked
on anything, JAX tracers included (so the JAX entry points stay transformable: jax.grad with respect to
the images, jax.vmap, ...); checks of values (labels in range) run only on concrete arrays.
"""

from __future__ import annotations

import numpy as np

from .config import ATTENTION_IMPLS, KINDS_WITH_SIGNED_WEIGHTS, AttentionConfig, ViTConfig
from .params import check_params, flatten

CAUSAL_LENGTHS = ("per_query", "global")  # the L of causal query i: its own i + 1 visible keys, or all L


def concrete_values(x):
    """x as a NumPy array, or None when its values are not known yet (a JAX tracer, inside jit or a
    transform: converting it would raise)."""
    try:
        return np.asarray(x)
    except TypeError:  # jax.errors.TracerArrayConversionError and ConcretizationTypeError are TypeErrors
        return None


def _dtype(x):
    return np.dtype(x.dtype) if hasattr(x, "dtype") else np.asarray(x).dtype


def check_images(images, cfg: ViTConfig) -> None:
    """Images must be (B, S, S, C) with S = cfg.image_size and C = cfg.channels, B >= 1."""
    if not isinstance(cfg, ViTConfig):
        raise ValueError(f"cfg must be a ViTConfig, got {type(cfg).__name__}")
    shape = tuple(np.shape(images))
    expected = f"(B, {cfg.image_size}, {cfg.image_size}, {cfg.channels})"
    if len(shape) != 4:
        raise ValueError(f"images must have shape {expected} (batch, height, width, channels); got shape {shape}")
    batch, height, width, channels = shape
    if batch < 1:
        raise ValueError(f"images must hold at least one image; got shape {shape}")
    if (height, width) != (cfg.image_size, cfg.image_size):
        raise ValueError(f"images must be {cfg.image_size}x{cfg.image_size} pixels, shape {expected}; "
                         f"got {height}x{width}, shape {shape}")
    if channels != cfg.channels:
        raise ValueError(f"images must have {cfg.channels} channels, shape {expected}; got {channels}, shape {shape}")
    dtype = _dtype(images)
    if not (np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.integer)) or dtype == np.bool_:
        raise ValueError(f"images must be a float (or integer) array, got dtype {dtype}")


def check_labels(labels, batch: int, num_classes: int) -> None:
    """Labels are (B,) integers in [0, K) or (B, K) target probabilities (mixup, label smoothing)."""
    shape = tuple(np.shape(labels))
    dtype = _dtype(labels)
    if len(shape) == 2:
        if shape != (batch, num_classes):
            raise ValueError(f"soft labels must have shape ({batch}, {num_classes}); got {shape}")
        if not np.issubdtype(dtype, np.floating):
            raise ValueError(f"soft labels must be floats, got dtype {dtype}")
        return
    if len(shape) != 1 or shape[0] != batch:
        raise ValueError(f"labels must have shape ({batch},) (one per image) or ({batch}, {num_classes}); got {shape}")
    if not np.issubdtype(dtype, np.integer):
        raise ValueError(f"labels must be integers in [0, {num_classes}), got dtype {dtype}")
    values = concrete_values(labels)
    if values is not None and values.size and (values.min() < 0 or values.max() >= num_classes):
        raise ValueError(f"labels must be in [0, {num_classes}); got values from {values.min()} to {values.max()}")


def check_call(params, images, cfg: ViTConfig, labels=None) -> None:
    """Everything `apply` (labels=None) or `loss_and_grad` needs to hold before it runs."""
    check_images(images, cfg)
    check_params(params, cfg)
    if labels is not None:
        check_labels(labels, np.shape(images)[0], cfg.num_classes)


def check_label_smoothing(label_smoothing) -> None:
    if not (isinstance(label_smoothing, (int, float)) and 0.0 <= label_smoothing < 1.0):
        raise ValueError(f"label_smoothing must be a number in [0, 1), got {label_smoothing!r}")


def check_attention_options(attn_cfg, impl, block_size, causal, causal_length) -> str:
    """The options of both backends' attention(q, k, v, attn_cfg, *, impl, block_size, causal,
    causal_length). Returns impl, with None meaning attn_cfg.impl (block_size None: the backend's default)."""
    if not isinstance(attn_cfg, AttentionConfig):
        raise ValueError(f"attn_cfg must be an AttentionConfig, got {type(attn_cfg).__name__}")
    if attn_cfg.learned_length:
        raise ValueError("attention(q, k, v, attn_cfg) takes a fixed alpha and scale; the learned length factor "
                         "(learn_alpha / learn_scale) lives in a ViT's parameters (attn.length): pass "
                         "attn_cfg.replace(learn_alpha=False, learn_scale=False)")
    impl = attn_cfg.impl if impl is None else impl
    if impl not in ATTENTION_IMPLS:
        raise ValueError(f"impl must be one of {', '.join(ATTENTION_IMPLS)}; got {impl!r}")
    if block_size is not None and (isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer))
                                   or block_size < 1):
        raise ValueError(f"block_size must be a positive int or None, got {block_size!r}")
    if not isinstance(causal, (bool, np.bool_)):
        raise ValueError(f"causal must be True or False, got {causal!r}")
    if causal_length not in CAUSAL_LENGTHS:
        raise ValueError(f"causal_length must be one of {', '.join(CAUSAL_LENGTHS)}; got {causal_length!r}")
    return impl


def check_attention_mask(mask) -> None:
    """dot_product_attention's mask must be bool (True: the query may read the key), as in jax.nn; a float
    mask cast to bool would invert an additive 0 / -1e9 mask."""
    if mask is not None and _dtype(mask) != np.bool_:
        raise ValueError(f"mask dtype should be bool, but got {_dtype(mask)}: pass an additive mask as `bias=`")


def check_regulariser_kind(attn_cfg) -> None:
    """The attention regulariser reads log row sums and entropies: it needs non-negative weights."""
    if attn_cfg.kind in KINDS_WITH_SIGNED_WEIGHTS:
        raise ValueError(f"the attention regulariser needs non-negative weights; kind {attn_cfg.kind!r} can give "
                         f"negative ones")


def check_attention_shapes(q, k, v) -> None:
    """q, k, v of attention(q, k, v, ...) must share one (B, L, H, Dh) shape."""
    shapes = [tuple(np.shape(x)) for x in (q, k, v)]
    if not (len(shapes[0]) == 4 and shapes[0] == shapes[1] == shapes[2]):
        raise ValueError("attention expects q, k, v of one shape (B, L, H, Dh); "
                         f"got {shapes[0]}, {shapes[1]}, {shapes[2]}")


def check_optimizer_state(opt_state, params) -> None:
    """opt_state must be the dict made by init_optimizer: step, and mu and nu shaped like params."""
    if not (isinstance(opt_state, dict) and {"step", "mu", "nu"} <= set(opt_state)):
        raise ValueError("opt_state must be the dict made by init_optimizer, with keys step, mu and nu; got "
                         f"{sorted(opt_state) if isinstance(opt_state, dict) else type(opt_state).__name__}")
    expected = {path: np.shape(leaf) for path, leaf in flatten(params).items()}
    for name in ("mu", "nu"):
        got = {path: np.shape(leaf) for path, leaf in flatten(opt_state[name]).items()}
        if got != expected:
            raise ValueError(f"opt_state[{name!r}] does not match the parameter tree (leaves or shapes differ)")
