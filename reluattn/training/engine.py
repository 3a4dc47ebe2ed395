"""Engines: what the training loop (loop.py, step_loop.py) calls to run steps on one backend, and the one evaluation.

The Engine protocol, the whole interface between the loop and a backend:

    engine = make_engine(config, train_images, train_labels, mean, std)   # NumpyEngine or JaxEngine
    engine.devices, engine.device_description   # how many devices share a batch; in words, for the log
    engine.params                               # the current parameter tree (on the device with JAX)
    engine.start(params)                        # fresh parameters (a NumPy tree) and a fresh optimizer state
    engine.restore(params, opt_state, source)   # or a checkpoint's (opt_state flat, as run_dir saves it)
    metrics = engine.step(step, indices)        # one optimizer step on train_images[indices]; the metrics
                                                # may stay on the device (JAX dispatches asynchronously)
    records = engine.fetch([metrics, ...])      # -> [{"loss", "accuracy", "grad_norm", "learning_rate"}]
                                                # as Python floats (this waits for the device)
    engine.evaluate(images, labels)             # -> {"loss", "accuracy", "n"} on uint8 images
    engine.attention_weights(images)            # -> [(B, H, T, L) NumPy array per block] on uint8 images
                                                # (the plain float32 model; attention_statistics.py reads them)
    engine.host_params(), engine.host_opt_state()   # NumPy copies for a checkpoint (opt_state flat)

A step is a pure function of (params, optimizer state, seed, step, indices): its augmentation comes from
the seed and the step alone, so a resumed run repeats an uninterrupted one bit for bit.

    NumpyEngine  the reference model on the host (--backend numpy; small runs): gathers the batch, crops
                 and flips it with np.random.default_rng([seed, step]), normalises and calls the NumPy
                 backend's train_step. No mixup / cutmix.
    JaxEngine    the whole training split on every device as uint8 (CIFAR-10: 150 MB); a step receives
                 only the batch's indices and the step number, and ONE jit gathers the batch, augments it
                 with the key fold_in(key(seed), step), normalises and runs `jax_backend.make_train_step`
                 (forward, backward, AdamW) with the parameter and optimizer buffers donated: the step is
                 `sharding.make_sharded_train_step`'s, the one place it is jitted. With several
                 local devices the indices are split over a 1-D mesh; parameters, optimizer state and
                 dataset are replicated and XLA inserts the gradient all-reduce (jax_backend/sharding.py).

Both evaluate with `evaluate_arrays`, over a per-batch scorer of their backend (`numpy_scorer`,
`jax_scorer`), in fixed-size batches (the last one padded and masked, so one compilation serves all).
"""

from __future__ import annotations

from typing import Protocol

import jax
import jax.numpy as jnp
import numpy as np

from .. import backend
from .augment import augment_batch, crop_and_flip, normalize
from .config import TrainConfig
from .run_dir import flatten_opt_state, restore_opt_state


class Engine(Protocol):
    """The interface the loop calls (see the module docstring)."""

    devices: int
    device_description: str
    params: object

    def start(self, params) -> None: ...
    def restore(self, params, opt_state_flat: dict, source: str) -> None: ...
    def step(self, step: int, indices: np.ndarray): ...
    def fetch(self, metrics: list) -> list[dict]: ...
    def evaluate(self, images: np.ndarray, labels: np.ndarray, batch_size: int = 500) -> dict: ...
    def attention_weights(self, images: np.ndarray) -> list: ...
    def host_params(self): ...
    def host_opt_state(self) -> dict: ...


def make_engine(config: TrainConfig, train_images, train_labels, mean, std) -> Engine:
    """The engine of `config.backend` (a resolved config), holding the run's training images."""
    kind = NumpyEngine if config.backend == "numpy" else JaxEngine
    return kind(config, train_images, train_labels, mean, std)


def configure_jax_cpu() -> dict:
    """The JAX backend's process setup for XLA:CPU (glibc malloc settings). Called by the trainer and by
    evaluation, never on import; it must run before data decoding starts threads. Returns what it set."""
    from ..jax_backend.fast import cpu_setup
    return cpu_setup.configure()


def fetch_metrics(metrics: list) -> list[dict]:
    """Per-step metric dicts (on the host or the device) as Python floats; waits for the device."""
    return [{name: float(value) for name, value in record.items()} for record in jax.device_get(metrics)]


# --------------------------------------------------------------------------------------------- NumPy

class NumpyEngine:
    def __init__(self, config: TrainConfig, train_images: np.ndarray, train_labels: np.ndarray, mean, std):
        if config.augmentation.mixes:
            raise ValueError("mixup and cutmix need --backend jax; pass --mixup 0 --cutmix 0 with --backend numpy")
        self.backend = backend("numpy")
        self.config = config
        self.images, self.labels = train_images, np.asarray(train_labels, dtype=np.int64)
        self.mean, self.std = mean, std
        self.devices = 1
        self.device_description = "the host CPU"
        self.score = numpy_scorer(config.model, mean, std)
        self.params = self.opt_state = None

    def start(self, params) -> None:
        self.params = params
        self.opt_state = self.backend.init_optimizer(params, self.config.optimizer)

    def restore(self, params, opt_state_flat: dict, source: str) -> None:
        template = self.backend.init_optimizer(params, self.config.optimizer)
        self.params, self.opt_state = params, restore_opt_state(opt_state_flat, template, source)

    def step(self, step: int, indices: np.ndarray) -> dict:
        rng = np.random.default_rng([self.config.seed, step])
        images = crop_and_flip(self.images[indices], rng, self.config.augmentation)  # (B, S, S, C) uint8
        with np.errstate(all="ignore"):  # overflow shows up as a non-finite loss, which the loop reports
            self.params, self.opt_state, metrics = self.backend.train_step(
                self.params, self.opt_state, normalize(images, self.mean, self.std), self.labels[indices],
                self.config.model, self.config.optimizer, label_smoothing=self.config.label_smoothing)
        return metrics

    fetch = staticmethod(fetch_metrics)

    def evaluate(self, images: np.ndarray, labels: np.ndarray, batch_size: int = 500) -> dict:
        return evaluate_arrays(self.score, self.params, images, labels, batch_size)

    def attention_weights(self, images: np.ndarray) -> list:
        _, weights = self.backend.apply(self.params, normalize(images, self.mean, self.std), self.config.model,
                                        return_attention=True)
        return [np.asarray(block) for block in weights]

    def host_params(self):
        return self.params

    def host_opt_state(self) -> dict:
        return flatten_opt_state(self.opt_state)


# ----------------------------------------------------------------------------------------------- JAX

def backend_options(config: TrainConfig) -> dict:
    """The keywords with which the JAX engine calls its backend (`make_train_step`, `forward`): the compute
    dtype and `fast` (the opt-in speed paths of jax_backend/fast/)."""
    return {"compute_dtype": jnp.bfloat16 if config.compute_dtype == "bfloat16" else None, "fast": config.fast}


def device_mesh():
    from ..jax_backend import sharding
    return sharding.data_mesh(jax.local_devices())


class JaxEngine:
    """Owns the device copies of the data, the parameters and the optimizer state of one run."""

    def __init__(self, config: TrainConfig, train_images: np.ndarray, train_labels: np.ndarray, mean, std):
        from ..jax_backend import sharding
        self.backend = backend("jax")
        self.config = config
        self.mesh = device_mesh()
        self.devices = self.mesh.size
        platform = self.mesh.devices.flat[0].platform
        self.device_description = f"{self.devices} {platform} device{'s' if self.devices > 1 else ''}"
        if config.batch_size % self.devices:
            raise ValueError(f"--batch-size {config.batch_size} must be a multiple of the {self.devices} devices")
        self._whole = sharding.replicated(self.mesh)
        self.images = jax.device_put(np.ascontiguousarray(train_images, dtype=np.uint8), self._whole)
        self.labels = jax.device_put(np.asarray(train_labels, dtype=np.int32), self._whole)
        mean, std = tuple(mean), tuple(std)
        self.mean, self.std = mean, std
        settings, num_classes, seed = config.augmentation, config.model.num_classes, config.seed

        def augment(key, images, labels):
            return augment_batch(key, images, labels, settings, num_classes, mean=mean, std=std)

        def gather(all_images, all_labels, indices, step):
            images = jnp.take(all_images, indices, axis=0)  # (B, S, S, C) uint8
            labels = jnp.take(all_labels, indices, axis=0)  # (B,)
            return images, labels, jax.random.fold_in(jax.random.key(seed), step)

        # The one jit site of the training step: the data-parallel step of jax_backend/sharding.py, with the
        # batch gathered by its indices (the only argument split over the devices) inside it.
        def make_step(keep_tokens):
            return sharding.make_sharded_train_step(
                self.mesh, config.model, config.optimizer, label_smoothing=config.label_smoothing, augment=augment,
                batch=(gather, (False, False, True, False)), keep_tokens=keep_tokens, **backend_options(config))

        # One jitted step per number of tokens kept (token dropping draws it per step; without it, one).
        self._make_step, self._steps = make_step, {}
        self.score = jax_scorer(config, mean, std, self.mesh)
        self.params = self.opt_state = None

    def start(self, params) -> None:
        self.params = jax.device_put(params, self._whole)
        self.opt_state = jax.device_put(self.backend.init_optimizer(params, self.config.optimizer), self._whole)

    def restore(self, params, opt_state_flat: dict, source: str) -> None:
        template = self.backend.init_optimizer(params, self.config.optimizer)
        opt_state = restore_opt_state(opt_state_flat, jax.device_get(template), source)
        self.params = jax.device_put(params, self._whole)
        self.opt_state = jax.device_put(opt_state, self._whole)

    def step(self, step: int, indices: np.ndarray):
        from ..jax_backend.sharding import shard_batch
        indices = shard_batch(np.asarray(indices, dtype=np.int32), self.mesh)
        keep = self.config.tokens_kept(step)
        if keep not in self._steps:
            self._steps[keep] = self._make_step(keep)
        self.params, self.opt_state, metrics = self._steps[keep](self.params, self.opt_state, self.images,
                                                                 self.labels, indices, np.int32(step))
        return metrics

    fetch = staticmethod(fetch_metrics)

    def evaluate(self, images: np.ndarray, labels: np.ndarray, batch_size: int = 500) -> dict:
        return evaluate_arrays(self.score, self.params, images, labels, batch_size, self.devices)

    def attention_weights(self, images: np.ndarray) -> list:
        # The plain model in float32 (no bfloat16, no speed paths): the weights, not the training arithmetic.
        _, weights = self.backend.apply(self.params, normalize(images, self.mean, self.std), self.config.model,
                                        return_attention=True)
        return [np.asarray(block) for block in jax.device_get(weights)]

    def host_params(self):
        return jax.device_get(self.params)

    def host_opt_state(self) -> dict:
        return flatten_opt_state(self.opt_state)


# ----------------------------------------------------------------------------------------- evaluation

def numpy_scorer(cfg, mean, std):
    """`score(params, uint8 images, labels, mask) -> (summed loss, number correct)` over the masked batch,
    with the NumPy backend (log-probabilities in float64)."""
    numpy_backend = backend("numpy")

    def score(params, images, labels, mask):
        logits = np.asarray(numpy_backend.apply(params, normalize(images, mean, std), cfg), np.float64)  # (B, K)
        shifted = logits - logits.max(axis=-1, keepdims=True)  # (B, K)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))  # (B, K)
        nll = -log_probs[np.arange(len(labels)), labels]  # (B,)
        correct = (logits.argmax(axis=-1) == labels).astype(np.float64)  # (B,)
        return float(np.sum(nll * mask)), float(np.sum(correct * mask))

    return score


def jax_scorer(config: TrainConfig, mean, std, mesh=None):
    """The same score, jitted with the JAX backend (the run's compute dtype and speed paths); with `mesh`,
    the batch is split over its devices."""
    from ..jax_backend import forward, sharding
    cfg, mean, std = config.model, tuple(mean), tuple(std)
    options = backend_options(config)

    def score(params, images, labels, mask):
        logits = forward(params, normalize(images, mean, std), cfg, **options).astype(jnp.float32)  # (B, K)
        log_probs = jax.nn.log_softmax(logits, axis=-1)  # (B, K)
        nll = -jnp.take_along_axis(log_probs, labels[:, None], axis=-1)[:, 0]  # (B,)
        correct = (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)  # (B,)
        return jnp.sum(nll * mask), jnp.sum(correct * mask)

    if mesh is None:
        return jax.jit(score)
    whole, split = sharding.replicated(mesh), sharding.batch_sharded(mesh)
    return jax.jit(score, in_shardings=(whole, split, split, split), out_shardings=(whole, whole))


def evaluate_arrays(score, params, images, labels, batch_size: int = 500, devices: int = 1) -> dict:
    """{"loss": mean cross-entropy (no label smoothing), "accuracy", "n"} of `params` on uint8 `images`, in
    fixed-size batches scored by `score` (the last batch padded with copies of its first image, masked out)."""
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
        if missing:
            batch_images = np.concatenate([batch_images, np.repeat(batch_images[:1], missing, axis=0)])
            batch_labels = np.concatenate([batch_labels, np.repeat(batch_labels[:1], missing)])
            mask = np.concatenate([mask, np.zeros(missing, np.float32)])
        totals.append(score(params, batch_images, batch_labels, mask))  # dispatched; fetched below
    totals = np.asarray(jax.device_get(totals), dtype=np.float64)  # (batches, 2)
    return {"loss": float(totals[:, 0].sum() / count), "accuracy": float(totals[:, 1].sum() / count), "n": count}
