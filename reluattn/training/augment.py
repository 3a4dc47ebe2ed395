"""Training-time augmentation, host and device side by side, and the one normalisation.

    normalize(images, mean, std)           uint8 -> (pixel / 255 - mean) / std per channel (a run's own
                                           training statistics, run_data.channel_statistics); NumPy
                                           arrays stay NumPy (host), anything else is computed with jax.numpy
    host (--backend numpy, NumPy):         crop_and_flip(images, rng, cfg)
    device (JAX, inside the jitted step):  augment_batch(key, images, labels, cfg, num_classes)
                                           = random_crop, random_flip, normalize, then mix_batch
                                           (mixup / cutmix, which turn labels into (B, K) soft targets)

What to do is an `AugmentationConfig` (config.py). The device functions are pure functions of an explicit
PRNG key, batched and vectorised (no Python loop over images); the host ships uint8 batches (4x fewer
bytes than float32) and everything else happens on the device. Evaluation uses `normalize` alone.

Shapes: B batch, S image side in pixels, C channels, K classes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .config import AugmentationConfig

def normalize(images, mean, std, dtype=np.float32):
    """uint8 images -> (pixel / 255 - mean) / std per channel, computed in float32 and returned in `dtype`.
    The one normalisation of training and evaluation, host and device: a NumPy array gives a NumPy array,
    a JAX array (or a tracer, inside jit) a JAX array."""
    mean, std = tuple(float(m) for m in mean), tuple(float(s) for s in std)
    if not mean or len(mean) != len(std) or not all(s > 0 for s in std):
        raise ValueError(f"normalize needs one mean and one positive std per channel; got {mean} and {std}")
    if images.shape[-1] != len(mean):
        raise ValueError(f"images have {images.shape[-1]} channels but mean/std give {len(mean)}")
    xp = np if isinstance(images, np.ndarray) else jnp
    scale = 1.0 / (255.0 * xp.asarray(std, xp.float32))             # (C,)
    shift = xp.asarray(mean, xp.float32) / xp.asarray(std, xp.float32)  # (C,)
    return (images.astype(xp.float32) * scale - shift).astype(dtype)  # (B, S, S, C)


# ------------------------------------------------------------------------------------------------ host

def crop_and_flip(images: np.ndarray, rng: np.random.Generator, cfg: AugmentationConfig) -> np.ndarray:
    """Random crop after zero-padding each side by `cfg.crop_padding` pixels, and random left-right flips
    (`cfg.flip`), drawn from `rng`. NumPy, on uint8 or float images."""
    batch, side = images.shape[0], images.shape[1]
    if cfg.crop_padding:
        padding = cfg.crop_padding
        padded = np.pad(images, ((0, 0), (padding, padding), (padding, padding), (0, 0)))  # (B, S+2p, S+2p, C)
        offsets = rng.integers(0, 2 * padding + 1, size=(batch, 2))  # (B, 2) top-left corners
        images = np.stack([padded[i, y:y + side, x:x + side] for i, (y, x) in enumerate(offsets)])
    if cfg.flip:
        mirrored = rng.random(batch) < 0.5  # (B,)
        images = np.where(mirrored[:, None, None, None], images[:, :, ::-1], images)
    return images


# ---------------------------------------------------------------------------------------------- device

def random_crop(key, images, padding: int = 4):
    """Pad each image with `padding` zero pixels on every side and cut out an S x S window at a random
    offset in [0, 2 * padding] (independent per image). Works on uint8 as well as floats."""
    batch, height, width, channels = images.shape
    padded = jnp.pad(images, ((0, 0), (padding, padding), (padding, padding), (0, 0)))  # (B, S+2p, S+2p, C)
    offsets = jax.random.randint(key, (batch, 2), 0, 2 * padding + 1)                   # (B, 2) row, column
    window = lambda image, offset: lax.dynamic_slice(image, (offset[0], offset[1], 0), (height, width, channels))
    return jax.vmap(window)(padded, offsets)  # (B, S, S, C)


def random_flip(key, images):
    """Mirror each image left-right with probability 1/2."""
    flips = jax.random.bernoulli(key, 0.5, (images.shape[0],))              # (B,)
    return jnp.where(flips[:, None, None, None], images[:, :, ::-1], images)  # (B, S, S, C)


def one_hot(labels, num_classes: int, dtype=jnp.float32):
    """(B,) integer labels -> (B, K) one-hot targets; (B, K) targets pass through unchanged."""
    if labels.ndim == 2:
        return labels.astype(dtype)
    return jax.nn.one_hot(labels, num_classes, dtype=dtype)  # (B, K)


def _cutmix_keep_mask(key, height: int, width: int, alpha: float):
    """(S, S) mask: 0 inside a random box covering about 1 - lambda of the image, 1 elsewhere."""
    lam_key, row_key, column_key = jax.random.split(key, 3)
    lam = jax.random.beta(lam_key, alpha, alpha)
    cut = jnp.sqrt(1.0 - lam)  # box side as a fraction of the image side
    half_height = (cut * height / 2).astype(jnp.int32)
    half_width = (cut * width / 2).astype(jnp.int32)
    center_row = jax.random.randint(row_key, (), 0, height)
    center_column = jax.random.randint(column_key, (), 0, width)
    rows, columns = jnp.arange(height), jnp.arange(width)                                    # (S,), (S,)
    in_rows = (rows >= center_row - half_height) & (rows < center_row + half_height)          # (S,)
    in_columns = (columns >= center_column - half_width) & (columns < center_column + half_width)  # (S,)
    return 1.0 - (in_rows[:, None] & in_columns[None, :]).astype(jnp.float32)               # (S, S)


def mix_batch(key, images, targets, mixup_alpha: float = 0.0, cutmix_alpha: float = 0.0):
    """Mix each image with another of the batch (a random permutation): mixup blends whole images with
    one weight lambda ~ Beta(alpha, alpha) per batch; cutmix pastes a box of the partner; with both alphas
    > 0 each batch gets one or the other. Targets (B, K) mix in the proportion of pixels kept, so each row
    still sums to 1. Returns float images and targets."""
    if mixup_alpha <= 0 and cutmix_alpha <= 0:
        return images, targets
    batch, height, width, _ = images.shape
    permutation_key, mixup_key, cutmix_key, choice_key = jax.random.split(key, 4)
    partner = jax.random.permutation(permutation_key, batch)  # (B,)
    masks = []
    if mixup_alpha > 0:
        masks.append(jnp.full((height, width), jax.random.beta(mixup_key, mixup_alpha, mixup_alpha)))  # (S, S)
    if cutmix_alpha > 0:
        masks.append(_cutmix_keep_mask(cutmix_key, height, width, cutmix_alpha))                       # (S, S)
    keep = masks[0] if len(masks) == 1 else jnp.where(jax.random.bernoulli(choice_key), masks[0], masks[1])
    keep_pixels = keep[None, :, :, None].astype(images.dtype)                        # (1, S, S, 1)
    mixed = keep_pixels * images + (1 - keep_pixels) * images[partner]                # (B, S, S, C)
    kept = jnp.mean(keep).astype(targets.dtype)  # the share of each image that is its own
    return mixed, kept * targets + (1 - kept) * targets[partner]                      # (B, K)


def augment_batch(key, images, labels, cfg: AugmentationConfig, num_classes: int, dtype=jnp.float32, *, mean, std):
    """A training batch: uint8 (B, S, S, C) images and (B,) labels -> normalised `dtype` images and the
    labels, which become (B, K) float32 targets when mixup or cutmix is on. Call it inside the jitted step
    with `cfg`, `num_classes`, `mean` and `std` static (tuples)."""
    crop_key, flip_key, mix_key = jax.random.split(key, 3)
    if cfg.crop_padding:
        images = random_crop(crop_key, images, cfg.crop_padding)  # (B, S, S, C) uint8: pads with black
    if cfg.flip:
        images = random_flip(flip_key, images)
    images = normalize(images, mean, std)  # (B, S, S, C) float32
    if cfg.mixes:
        images, labels = mix_batch(mix_key, images, one_hot(labels, num_classes), cfg.mixup_alpha, cfg.cutmix_alpha)
    return images.astype(dtype), labels
