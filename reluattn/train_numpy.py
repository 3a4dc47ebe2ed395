"""The NumPy side of the training loop (`--backend numpy`): the reference model, for small runs.

Same contract as train_jax.JaxEngine, on the host: a step gathers its batch by index, crops and flips it
with `np.random.default_rng([seed, step])` (so it, too, is a pure function of seed and step), normalises
it like the JAX pipeline and calls the NumPy backend's `train_step`. Mixup and cutmix are JAX-only.
"""

from __future__ import annotations

import numpy as np

from .presets import TrainConfig


def normalize(images: np.ndarray, mean, std) -> np.ndarray:
    """uint8 (B, S, S, C) -> float32 (pixel / 255 - mean) / std per channel, as the JAX pipeline does."""
    mean, std = np.asarray(mean, np.float32), np.asarray(std, np.float32)  # (C,), (C,)
    return (images.astype(np.float32) / 255.0 - mean) / std  # (B, S, S, C)


def crop_and_flip(images: np.ndarray, rng: np.random.Generator, padding: int, flip: bool) -> np.ndarray:
    """Random crop after zero-padding each side by `padding` pixels, and random left-right flips."""
    batch, side = images.shape[0], images.shape[1]
    if padding:
        padded = np.pad(images, ((0, 0), (padding, padding), (padding, padding), (0, 0)))  # (B, S+2p, S+2p, C)
        offsets = rng.integers(0, 2 * padding + 1, size=(batch, 2))  # (B, 2) top-left corners
        images = np.stack([padded[i, y:y + side, x:x + side] for i, (y, x) in enumerate(offsets)])
    if flip:
        mirrored = rng.random(batch) < 0.5  # (B,)
        images = np.where(mirrored[:, None, None, None], images[:, :, ::-1], images)
    return images


class NumpyEngine:
    def __init__(self, config: TrainConfig, train_images: np.ndarray, train_labels: np.ndarray, mean, std):
        from . import backend
        settings = config.augmentation
        if settings.mixup_alpha or settings.cutmix_alpha:
            raise ValueError("mixup and cutmix need --backend jax; pass --mixup 0 --cutmix 0 with --backend numpy")
        self.backend = backend("numpy")
        self.config = config
        self.images, self.labels = train_images, np.asarray(train_labels, dtype=np.int64)
        self.mean, self.std = mean, std
        self.devices = 1
        self.device_description = "the host CPU"
        self.params = self.opt_state = None

    def start(self, params) -> None:
        self.params = params
        self.opt_state = self.backend.init_optimizer(params, self.config.optimizer)

    def restore(self, params, opt_state_flat: dict, source: str) -> None:
        from .run_files import restore_opt_state
        template = self.backend.init_optimizer(params, self.config.optimizer)
        self.params, self.opt_state = params, restore_opt_state(opt_state_flat, template, source)

    def host_params(self):
        return self.params

    def host_opt_state(self) -> dict:
        from .run_files import flatten_opt_state
        return flatten_opt_state(self.opt_state)

    def step(self, step: int, indices: np.ndarray) -> dict:
        settings = self.config.augmentation
        rng = np.random.default_rng([self.config.seed, step])
        images = crop_and_flip(self.images[indices], rng, settings.crop_padding, settings.flip)  # (B, S, S, C)
        with np.errstate(all="ignore"):  # overflow shows up as a non-finite loss, which the loop reports
            self.params, self.opt_state, metrics = self.backend.train_step(
                self.params, self.opt_state, normalize(images, self.mean, self.std), self.labels[indices],
                self.config.model, self.config.optimizer, label_smoothing=self.config.label_smoothing)
        return metrics

    @staticmethod
    def fetch(metrics: list) -> list[dict]:
        return [{name: float(value) for name, value in record.items()} for record in metrics]

    def evaluate(self, images: np.ndarray, labels: np.ndarray, batch_size: int = 500) -> dict:
        return evaluate_arrays(self.backend, self.params, images, labels, self.config.model, self.mean, self.std,
                               batch_size)


def evaluate_arrays(numpy_backend, params, images, labels, cfg, mean, std, batch_size: int = 500) -> dict:
    """{"loss", "accuracy", "n"} of `params` on uint8 `images` with the NumPy backend."""
    count = int(len(labels))
    if count == 0:
        raise ValueError("there are no images to evaluate")
    loss_sum = correct = 0.0
    for start in range(0, count, batch_size):
        batch_labels = np.asarray(labels[start:start + batch_size])
        logits = np.asarray(numpy_backend.apply(params, normalize(images[start:start + batch_size], mean, std), cfg),
                            dtype=np.float64)  # (B, K)
        shifted = logits - logits.max(axis=-1, keepdims=True)  # (B, K)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))  # (B, K)
        loss_sum -= float(log_probs[np.arange(len(batch_labels)), batch_labels].sum())
        correct += float((logits.argmax(axis=-1) == batch_labels).sum())
    return {"loss": loss_sum / count, "accuracy": correct / count, "n": count}
