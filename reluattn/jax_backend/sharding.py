"""Data parallelism with `jax.sharding`: the batch split over a 1-D mesh of devices, parameters and
optimizer state replicated.

    mesh = data_mesh()                                   # every device, one axis named "data"
    params, opt_state = replicate((params, opt_state), mesh)
    step = make_sharded_train_step(mesh, cfg, opt_cfg)   # jitted, shardings fixed, buffers donated
    for images, labels in batches:                        # host-local NumPy arrays
        params, opt_state, metrics = step(params, opt_state, *shard_batch((images, labels), mesh))

The step is the same pure function as the single-device one (`optim.make_train_step`): the loss is the
mean over the global batch, so when XLA partitions the jitted step along the batch it inserts the
all-reduce of the gradients itself; every device then applies the same update to its replica.

Multi-host (several processes, each owning some devices: TPU pod slices, multi-node GPU): call
`jax.distributed.initialize()` at the start of every process (arguments from the cluster environment, or
coordinator_address / num_processes / process_id given explicitly) before any other JAX call. Then
`jax.devices()` lists the devices of all processes, so `data_mesh()` spans the whole cluster, and every
process runs this same program on its own share of the data: `shard_batch` takes the process-local
batch (global batch / number of processes) and assembles the global array with
`jax.make_array_from_process_local_data`; `replicate` puts the same parameters on every device (every
process must start from the same params, e.g. the same seed). Metrics come back replicated, so every
process can read them; have only `jax.process_index() == 0` write logs and checkpoints.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ..checks import check_label_smoothing, check_optimizer_state
from ..config import OptimizerConfig, ViTConfig
from .layers import canonical_compute_dtype
from .model import check_inputs
from .optim import make_train_step

DATA_AXIS = "data"


def data_mesh(devices=None) -> Mesh:
    """A 1-D mesh named "data" over `devices` (default: all devices, of every process)."""
    devices = jax.devices() if devices is None else list(devices)
    return Mesh(np.asarray(devices), (DATA_AXIS,))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def batch_sharded(mesh: Mesh) -> NamedSharding:
    """Leading (batch) axis split over the mesh, other axes whole."""
    return NamedSharding(mesh, PartitionSpec(DATA_AXIS))


def replicate(tree, mesh: Mesh):
    """A copy of `tree` (params, optimizer state, ...) on every device of the mesh."""
    return jax.device_put(tree, replicated(mesh))


def shard_batch(batch, mesh: Mesh):
    """Place a tree of process-local arrays (e.g. `(images, labels)`) split along their first axis.

    Each process passes its own slice; the local batch must divide evenly by its local device count."""
    local_devices = len(mesh.local_devices)

    def place(x):
        x = np.asarray(x)
        if x.ndim == 0 or x.shape[0] % local_devices:
            raise ValueError(f"the batch axis ({x.shape[0] if x.ndim else 'none'}) must divide evenly over the "
                             f"{local_devices} local devices; got an array of shape {x.shape}")
        return jax.make_array_from_process_local_data(batch_sharded(mesh), x)

    return jax.tree.map(place, batch)


def make_sharded_train_step(mesh: Mesh, cfg: ViTConfig, opt_cfg: OptimizerConfig, *, label_smoothing=0.0,
                            compute_dtype=None, augment=None, fast=False, batch=None, keep_tokens=None):
    """`optim.make_train_step`, jitted with the batch sharded over `mesh` and params / optimizer state /
    metrics replicated; params and opt_state are donated. Call it with arrays from `replicate` and
    `shard_batch` (anything else is moved to those shardings first, at a cost). With `augment`, the step
    also takes a `key` (replicated).

    batch=(make_batch, split): the step takes `(params, opt_state, *args)` instead and first runs
    `make_batch(*args) -> (images, labels, key)` inside the same jit (the trainer gathers its batch by
    index from data kept on the devices); split[i] says whether args[i] is sharded along its first axis
    (else replicated). keep_tokens: token dropping, as in `optim.make_train_step`."""
    step = make_train_step(cfg, opt_cfg, label_smoothing=label_smoothing, compute_dtype=compute_dtype,
                           augment=augment, fast=fast, keep_tokens=keep_tokens)
    whole, split = replicated(mesh), batch_sharded(mesh)
    if batch is None:
        in_shardings = (whole, whole, split, split) + ((whole,) if augment is not None else ())
    else:
        make_batch, split_args = batch
        in_shardings = (whole, whole) + tuple(split if is_split else whole for is_split in split_args)
        pure_step = step

        def step(params, opt_state, *args):
            return pure_step(params, opt_state, *make_batch(*args))
    return jax.jit(step, in_shardings=in_shardings, out_shardings=(whole, whole, whole), donate_argnums=(0, 1))


def sharded_train_step(params, opt_state, images, labels, cfg: ViTConfig, opt_cfg: OptimizerConfig, *,
                       mesh: Mesh | None = None, label_smoothing=0.0, compute_dtype=None, fast=False):
    """One data-parallel step on a host-local batch: checks it, shards it over `mesh` (default: all
    devices) and runs the cached sharded step. Returns `(params, opt_state, metrics)` replicated."""
    check_label_smoothing(label_smoothing)
    check_inputs(params, images, cfg, labels)
    check_optimizer_state(opt_state, params)
    mesh = data_mesh() if mesh is None else mesh
    step = _cached_sharded_step(mesh, cfg, opt_cfg, float(label_smoothing), canonical_compute_dtype(compute_dtype),
                                bool(fast))
    images, labels = shard_batch((images, labels), mesh)
    return step(params, opt_state, images, labels)


@functools.lru_cache(maxsize=16)
def _cached_sharded_step(mesh, cfg, opt_cfg, label_smoothing, compute_dtype, fast):
    return make_sharded_train_step(mesh, cfg, opt_cfg, label_smoothing=label_smoothing,
                                   compute_dtype=compute_dtype, fast=fast)
