"""Augmentation (reluattn/training/augment.py): crops are true windows of the zero-padded image (on the
device and on the host), flips mirror, mixup/cutmix mix the right images with targets that sum to 1,
normalisation matches NumPy and is the same on host and device, and a key fixes everything."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from reluattn.training import augment
from reluattn.training.augment import crop_and_flip, mix_batch, one_hot, random_crop, random_flip
from reluattn.training.config import AugmentationConfig

# Per-channel mean and standard deviation of pixel / 255 over the 50,000 training images of the JPEG copy of
# CIFAR-10 (a run normalises with its own training images' statistics, run_data.channel_statistics; these
# are realistic values for the tests), measured with RELUATTN_DATA pointing at that copy:
#   python -c "import numpy as np; from reluattn.data import load_dataset;
#     x = load_dataset().images.reshape(-1, 3) / 255.0; print(x.mean(0).round(4), x.std(0).round(4))"
# (The canonical archive gives 0.4914 0.4822 0.4465 / 0.2470 0.2435 0.2616; JPEG smooths the copy a little.)
CIFAR10_MEAN = (0.4913, 0.4821, 0.4465)
CIFAR10_STD = (0.2452, 0.2428, 0.2606)


def normalize(images, mean=CIFAR10_MEAN, std=CIFAR10_STD, dtype=np.float32):
    return augment.normalize(images, mean, std, dtype)


def augment_batch(key, images, labels, cfg, num_classes, dtype=jnp.float32):
    return augment.augment_batch(key, images, labels, cfg, num_classes, dtype, mean=CIFAR10_MEAN, std=CIFAR10_STD)


def to_float(images, dtype=jnp.float32):
    """uint8 pixels in [0, 255] -> floats in [0, 1]: what normalize gives with mean 0 and std 1."""
    return augment.normalize(images, (0.0,) * images.shape[-1], (1.0,) * images.shape[-1], dtype)


def mixup(key, images, targets, alpha: float):
    """Mixup (Zhang et al. 2018) of float images and (B, K) targets."""
    return mix_batch(key, images, targets, mixup_alpha=alpha)


def cutmix(key, images, targets, alpha: float):
    """CutMix (Yun et al. 2019) of float images and (B, K) targets."""
    return mix_batch(key, images, targets, cutmix_alpha=alpha)


def random_images(batch=16, side=8, channels=3, seed=0):
    return np.random.default_rng(seed).integers(1, 256, (batch, side, side, channels), dtype=np.uint8)


def test_random_crop_gives_windows_of_the_zero_padded_image():
    images = random_images(batch=64)
    crops = np.asarray(jax.jit(random_crop, static_argnums=2)(jax.random.key(0), images, 2))
    assert crops.shape == images.shape and crops.dtype == np.uint8
    padded = np.pad(images, ((0, 0), (2, 2), (2, 2), (0, 0)))
    offsets = []
    for image, crop in zip(padded, crops):
        matches = [(row, column) for row in range(5) for column in range(5)
                   if np.array_equal(image[row:row + 8, column:column + 8], crop)]
        assert len(matches) == 1  # exactly one window of the padded image (pixels are >= 1, padding is 0)
        offsets.append(matches[0])
    assert len(set(offsets)) > 10  # offsets are drawn per image
    assert {row for row, _ in offsets} == set(range(5)) and {column for _, column in offsets} == set(range(5))


def test_crop_without_padding_is_identity():
    images = random_images()
    np.testing.assert_array_equal(random_crop(jax.random.key(1), images, 0), images)


def test_random_flip_mirrors_width():
    images = random_images(batch=64)
    flipped = np.asarray(random_flip(jax.random.key(2), images))
    mirrored = [np.array_equal(out, image[:, ::-1]) for out, image in zip(flipped, images)]
    kept = [np.array_equal(out, image) for out, image in zip(flipped, images)]
    assert all(m or k for m, k in zip(mirrored, kept))
    assert 10 < sum(mirrored) < 54  # about half


def test_normalize_matches_numpy():
    images = random_images(seed=3)
    expected = (images / 255.0 - np.array(CIFAR10_MEAN)) / np.array(CIFAR10_STD)
    np.testing.assert_allclose(np.asarray(normalize(images)), expected, atol=2e-6)
    out = normalize(images, (0.5, 0.25, 0.0), (0.5, 0.5, 1.0), dtype=jnp.bfloat16)
    assert out.dtype == jnp.bfloat16
    expected = (images / 255.0 - np.array([0.5, 0.25, 0.0])) / np.array([0.5, 0.5, 1.0])
    np.testing.assert_allclose(np.asarray(out, np.float32), expected, atol=2e-2)
    np.testing.assert_allclose(np.asarray(to_float(images)), images / 255.0, atol=1e-7)
    with pytest.raises(ValueError, match="channels"):
        normalize(random_images(channels=1))


def test_mixup_mixes_the_right_images():
    batch = 12
    images = jnp.asarray(random_images(batch=batch), jnp.float32)
    targets = one_hot(jnp.arange(batch), batch)  # image i has class i, so targets show the partner
    mixed, soft = jax.jit(mixup, static_argnums=3)(jax.random.key(4), images, targets, 0.4)
    soft, mixed, images = np.asarray(soft), np.asarray(mixed), np.asarray(images)
    np.testing.assert_allclose(soft.sum(axis=1), 1.0, rtol=1e-6)
    lam = None
    for i in range(batch):
        own = soft[i, i]
        partner = int(np.argmax(np.where(np.arange(batch) == i, -1, soft[i]))) if own < 1 else i
        lam = own if partner != i else lam
        weight = soft[i, i] if partner != i else 1.0
        np.testing.assert_allclose(mixed[i], weight * images[i] + (1 - weight) * images[partner], rtol=1e-5, atol=1e-3)
    assert lam is not None and 0 < lam < 1
    partners = [int(np.argmax(np.where(np.arange(batch) == i, -1, soft[i]))) for i in range(batch) if soft[i, i] < 1]
    assert sorted(partners) == sorted(set(partners))  # a permutation: every image is someone's partner once


def test_cutmix_pastes_a_box_and_weights_targets_by_area():
    batch, side = 10, 16
    images = jnp.asarray(random_images(batch=batch, side=side, seed=5), jnp.float32)
    targets = one_hot(jnp.arange(batch), batch)
    found_box = False
    jitted_cutmix = jax.jit(cutmix, static_argnums=3)
    for seed in range(5):
        mixed, soft = jitted_cutmix(jax.random.key(seed), images, targets, 1.0)
        mixed, soft, original = np.asarray(mixed), np.asarray(soft), np.asarray(images)
        np.testing.assert_allclose(soft.sum(axis=1), 1.0, rtol=1e-6)
        for i in range(batch):
            if soft[i, i] == 1.0:
                np.testing.assert_array_equal(mixed[i], original[i])
                continue
            partner = int(np.argmax(np.where(np.arange(batch) == i, -1, soft[i])))
            from_partner = np.all(mixed[i] == original[partner], axis=-1)  # (S, S)
            from_self = np.all(mixed[i] == original[i], axis=-1)
            assert np.all(from_partner | from_self)
            rows, columns = np.nonzero(from_partner & ~from_self)
            box = np.zeros((side, side), bool)
            box[rows.min():rows.max() + 1, columns.min():columns.max() + 1] = True
            assert np.array_equal(box, from_partner & ~from_self)  # one rectangle
            np.testing.assert_allclose(soft[i, partner], box.mean(), rtol=1e-6)
            found_box = True
    assert found_box


def test_mix_batch_without_alphas_changes_nothing():
    images = jnp.asarray(random_images(), jnp.float32)
    targets = one_hot(jnp.arange(16) % 5, 5)
    same_images, same_targets = mix_batch(jax.random.key(0), images, targets)
    assert same_images is images and same_targets is targets


# One jitted step shared by the tests below, so each (config, shape, dtype) compiles once.
augment_step = jax.jit(augment_batch, static_argnums=(3, 4, 5))
MIXING = AugmentationConfig(mixup_alpha=0.2, cutmix_alpha=1.0)
BATCH_IMAGES = random_images(batch=8, side=32, seed=7)
BATCH_LABELS = np.arange(8, dtype=np.int32) % 10


def test_augment_batch_shapes_and_types():
    out, out_labels = augment_step(jax.random.key(0), BATCH_IMAGES, BATCH_LABELS, AugmentationConfig(), 10, jnp.float32)
    assert out.shape == (8, 32, 32, 3) and out.dtype == jnp.float32
    np.testing.assert_array_equal(out_labels, BATCH_LABELS)  # no mixing: integer labels pass through
    out, soft = augment_step(jax.random.key(0), BATCH_IMAGES, BATCH_LABELS, MIXING, 10, jnp.bfloat16)
    assert out.shape == (8, 32, 32, 3) and out.dtype == jnp.bfloat16
    assert soft.shape == (8, 10) and soft.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(soft).sum(axis=1), 1.0, rtol=1e-6)


def test_augment_batch_is_crop_flip_then_normalise():
    out = augment_step(jax.random.key(9), BATCH_IMAGES, BATCH_LABELS, AugmentationConfig(), 10, jnp.float32)[0]
    out = np.asarray(out)
    crop_key, flip_key, _ = jax.random.split(jax.random.key(9), 3)
    by_hand = random_flip(flip_key, random_crop(crop_key, BATCH_IMAGES, 4))
    np.testing.assert_allclose(out, np.asarray(normalize(by_hand)), atol=1e-6)
    padding_value = (0 - np.array(CIFAR10_MEAN)) / np.array(CIFAR10_STD)  # black padding, then normalised
    assert np.isclose(out, padding_value, atol=1e-5).all(axis=-1).any()


def test_same_key_same_batch_other_key_other_batch():
    first = augment_step(jax.random.key(11), BATCH_IMAGES, BATCH_LABELS, MIXING, 10, jnp.bfloat16)
    second = augment_step(jax.random.key(11), BATCH_IMAGES, BATCH_LABELS, MIXING, 10, jnp.bfloat16)
    other = augment_step(jax.random.key(12), BATCH_IMAGES, BATCH_LABELS, MIXING, 10, jnp.bfloat16)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))
    assert not np.array_equal(np.asarray(first[0], np.float32), np.asarray(other[0], np.float32))


def test_normalize_is_the_same_on_host_and_device():
    images = random_images(side=32)
    host = normalize(images, (0.5, 0.25, 0.1), (0.2, 0.3, 0.4))
    device = normalize(jnp.asarray(images), (0.5, 0.25, 0.1), (0.2, 0.3, 0.4))
    assert isinstance(host, np.ndarray) and host.dtype == np.float32 and isinstance(device, jax.Array)
    np.testing.assert_allclose(host, np.asarray(device), rtol=0, atol=1e-6)


def test_host_crop_and_flip_gives_windows_of_the_zero_padded_image():
    images = random_images(batch=64)
    out = crop_and_flip(images, np.random.default_rng(0), AugmentationConfig(crop_padding=2, flip=True))
    assert out.shape == images.shape and out.dtype == np.uint8
    padded = np.pad(images, ((0, 0), (2, 2), (2, 2), (0, 0)))
    mirrored = 0
    for image, crop in zip(padded, out):
        windows = [image[row:row + 8, column:column + 8] for row in range(5) for column in range(5)]
        straight = any(np.array_equal(window, crop) for window in windows)
        flipped = any(np.array_equal(window[:, ::-1], crop) for window in windows)
        assert straight or flipped
        mirrored += flipped and not straight
    assert 10 < mirrored < 54  # about half
    np.testing.assert_array_equal(crop_and_flip(images, np.random.default_rng(0), AugmentationConfig(0, False)),
                                  images)


def test_one_hot_passes_soft_targets_through():
    soft = jnp.full((3, 4), 0.25)
    np.testing.assert_array_equal(one_hot(soft, 4), soft)
    np.testing.assert_array_equal(one_hot(jnp.array([2, 0]), 3), [[0, 0, 1], [1, 0, 0]])


def test_augmentation_config_validation_and_hashing():
    assert hash(AugmentationConfig()) == hash(AugmentationConfig(mixup_alpha=0, cutmix_alpha=0))
    mixing = AugmentationConfig(mixup_alpha=0.2)
    assert AugmentationConfig.from_json(mixing.to_json()) == mixing
    for bad in ({"crop_padding": -1}, {"crop_padding": 1.5}, {"flip": 1}, {"mixup_alpha": -0.1},
                {"cutmix_alpha": float("nan")}):
        with pytest.raises(ValueError, match="AugmentationConfig"):
            AugmentationConfig(**bad)
    assert AugmentationConfig(mixup_alpha=0.1).mixes and not AugmentationConfig().mixes
    for mean, std in (((0.5, 0.5, 0.5), (0.1, 0.0, 0.2)), ((0.5,), (0.2, 0.2, 0.2))):
        with pytest.raises(ValueError, match="one mean and one positive std per channel"):
            normalize(random_images(), mean, std)
