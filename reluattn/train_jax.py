"""The JAX side of the training loop: data kept on device, one jitted step, evaluation.

The whole training split lives on every device as uint8 (CIFAR-10: 150 MB). A step receives only the
batch's indices and the step number; inside ONE jit it gathers the batch, draws its augmentation from the
key `fold_in(key(seed), step)`, normalises, and runs the backend's pure train step (forward, backward,
AdamW), with the parameter and optimizer buffers donated. Nothing else crosses from the host, so a step
is a pure function of (params, optimizer state, seed, step) and a resumed run repeats an uninterrupted
one bit for bit.

With several local devices the batch indices are split over a 1-D mesh ("data"); parameters, optimizer
state and the dataset are replicated, and XLA inserts the gradient all-reduce (see jax_backend/sharding).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .presets import TrainConfig


def _compute_dtype(config: TrainConfig):
    return jnp.bfloat16 if config.compute_dtype == "bfloat16" else None


def augmentation(config: TrainConfig, mean, std):
    """(augment, normalize): `augment(key, uint8 images, labels) -> (float images, labels or targets)` for
    training, and `normalize(uint8 images) -> float images` for evaluation (the same normalisation)."""
    from .jax_backend.augment import AugmentConfig, augment_batch, prepare_eval_batch
    settings = config.augmentation
    aug_cfg = AugmentConfig(crop_padding=settings.crop_padding, flip=settings.flip, mixup_alpha=settings.mixup_alpha,
                            cutmix_alpha=settings.cutmix_alpha, mean=tuple(mean), std=tuple(std))
    num_classes = config.model.num_classes

    def augment(key, images, labels):
        return augment_batch(key, images, labels, aug_cfg, num_classes)

    def normalize(images):
        return prepare_eval_batch(images, aug_cfg)

    return augment, normalize


def device_mesh():
    from .jax_backend import sharding
    return sharding.data_mesh(jax.local_devices())


class JaxEngine:
    """Owns the device copies of the data, the parameters and the optimizer state of one run."""

    def __init__(self, config: TrainConfig, train_images: np.ndarray, train_labels: np.ndarray, mean, std):
        from . import backend
        from .jax_backend import sharding
        self.backend = backend("jax")
        self.config = config
        self.mesh = device_mesh()
        self.devices = self.mesh.size
        platform = self.mesh.devices.flat[0].platform
        self.device_description = f"{self.devices} {platform} device{'s' if self.devices > 1 else ''}"
        if config.batch_size % self.devices:
            raise ValueError(f"--batch-size {config.batch_size} must be a multiple of the {self.devices} devices")
        self._whole = sharding.replicated(self.mesh)
        self._split = sharding.batch_sharded(self.mesh)
        self.images = jax.device_put(np.ascontiguousarray(train_images, dtype=np.uint8), self._whole)
        self.labels = jax.device_put(np.asarray(train_labels, dtype=np.int32), self._whole)
        augment, self.normalize = augmentation(config, mean, std)
        pure_step = self.backend.make_train_step(config.model, config.optimizer,
                                                 label_smoothing=config.label_smoothing,
                                                 compute_dtype=_compute_dtype(config), augment=augment)
        seed = config.seed

        def fused_step(params, opt_state, all_images, all_labels, indices, step):
            images = jnp.take(all_images, indices, axis=0)  # (B, S, S, C) uint8
            labels = jnp.take(all_labels, indices, axis=0)  # (B,)
            key = jax.random.fold_in(jax.random.key(seed), step)
            return pure_step(params, opt_state, images, labels, key)

        whole, split = self._whole, self._split
        self._step = jax.jit(fused_step, in_shardings=(whole, whole, whole, whole, split, whole),
                             out_shardings=(whole, whole, whole), donate_argnums=(0, 1))
        self._evaluate = make_eval_batch(config.model, _compute_dtype(config), self.normalize, self.mesh)
        self.params = self.opt_state = None

    # ------------------------------------------------------------------------------------------ state

    def start(self, params) -> None:
        """Begin from fresh parameters (a NumPy tree) and a fresh optimizer state."""
        self.params = jax.device_put(params, self._whole)
        self.opt_state = jax.device_put(self.backend.init_optimizer(params, self.config.optimizer), self._whole)

    def restore(self, params, opt_state_flat: dict, source: str) -> None:
        from .run_files import restore_opt_state
        template = self.backend.init_optimizer(params, self.config.optimizer)
        opt_state = restore_opt_state(opt_state_flat, jax.device_get(template), source)
        self.params = jax.device_put(params, self._whole)
        self.opt_state = jax.device_put(opt_state, self._whole)

    def host_params(self):
        return jax.device_get(self.params)

    def host_opt_state(self) -> dict:
        from .run_files import flatten_opt_state
        return flatten_opt_state(self.opt_state)

    # ------------------------------------------------------------------------------------------- steps

    def step(self, step: int, indices: np.ndarray):
        """Dispatch one step (asynchronously); returns its metrics, still on device."""
        from .jax_backend.sharding import shard_batch
        indices = shard_batch(np.asarray(indices, dtype=np.int32), self.mesh)
        self.params, self.opt_state, metrics = self._step(self.params, self.opt_state, self.images, self.labels,
                                                          indices, np.int32(step))
        return metrics

    @staticmethod
    def fetch(metrics: list) -> list[dict]:
        """Bring a list of per-step metric dicts to the host as Python floats (this waits for them)."""
        return [{name: float(value) for name, value in record.items()} for record in jax.device_get(metrics)]

    def evaluate(self, images: np.ndarray, labels: np.ndarray, batch_size: int = 500) -> dict:
        return evaluate_arrays(self._evaluate, self.params, images, labels, batch_size, self.devices)


# --------------------------------------------------------------------------------------------- evaluation

def make_eval_batch(cfg, compute_dtype, normalize, mesh=None):
    """jit of (params, uint8 images, labels, mask) -> (summed loss, number correct) over the masked batch."""
    from .jax_backend import forward

    def eval_batch(params, images, labels, mask):
        logits = forward(params, normalize(images), cfg, compute_dtype).astype(jnp.float32)  # (B, K)
        log_probs = jax.nn.log_softmax(logits, axis=-1)  # (B, K)
        nll = -jnp.take_along_axis(log_probs, labels[:, None], axis=-1)[:, 0]  # (B,)
        correct = (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)  # (B,)
        return jnp.sum(nll * mask), jnp.sum(correct * mask)

    if mesh is None:
        return jax.jit(eval_batch)
    from .jax_backend import sharding
    whole, split = sharding.replicated(mesh), sharding.batch_sharded(mesh)
    return jax.jit(eval_batch, in_shardings=(whole, split, split, split), out_shardings=(whole, whole))


def evaluate_arrays(eval_batch, params, images, labels, batch_size: int = 500, devices: int = 1) -> dict:
    """{"loss": mean cross-entropy, "accuracy", "n"} of `params` on uint8 `images`, in fixed-size batches
    (the last one padded and masked, so one compilation serves every batch)."""
    count = int(len(labels))
    if count == 0:
        raise ValueError("there are no images to evaluate")
    batch_size = max(devices, min(batch_size, count) // devices * devices)
    totals = []
    for start in range(0, count, batch_size):
        batch_images = images[start:start + batch_size]
        batch_labels = np.asarray(labels[start:start + batch_size], dtype=np.int32)
        mask = np.ones(len(batch_labels), np.float32)
        missing = batch_size - len(batch_labels)
        if missing:  # pad with copies of the first image, masked out of the sums
            batch_images = np.concatenate([batch_images, np.repeat(batch_images[:1], missing, axis=0)])
            batch_labels = np.concatenate([batch_labels, np.repeat(batch_labels[:1], missing)])
            mask = np.concatenate([mask, np.zeros(missing, np.float32)])
        totals.append(eval_batch(params, batch_images, batch_labels, mask))
    totals = np.asarray(jax.device_get(totals), dtype=np.float64)  # (batches, 2)
    return {"loss": float(totals[:, 0].sum() / count), "accuracy": float(totals[:, 1].sum() / count), "n": count}
