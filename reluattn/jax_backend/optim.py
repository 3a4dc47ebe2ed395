"""AdamW with global-norm clipping and a warm-up + cosine schedule (optax), and one jitted training step.

The optimizer is exactly the optax chain that `OptimizerConfig`'s docstring states (reluattn/config.py;
the clipping is left out when clip_norm is None), which the NumPy backend's AdamW reproduces.

Two levels:
  * `make_train_step(cfg, opt_cfg, ...)` returns the pure, un-jitted step function
    `step(params, opt_state, images, labels, key=None) -> (params, opt_state, metrics)`. A training loop
    can wrap it (e.g. with on-device augmentation `augment(key, images, labels)`, passed here, or around
    it) and jit the whole thing once, or hand it to `sharding.make_sharded_train_step`.
  * `train_step(params, opt_state, images, labels, cfg, opt_cfg, ...)` is the checked, jitted, cached
    version with the same signature as the NumPy backend's. It leaves its inputs alone; donate=True
    donates the params and optimizer-state buffers (the old ones are consumed: use the returned ones).

The optimizer state is the NumPy backend's dict `{"step", "mu", "nu"}` (updates made so far, Adam's first
and second moments shaped like params), so a state -- or a checkpoint -- moves between the backends;
inside the jitted step it is rearranged into optax's own state structure and back (no copies).

metrics: {"loss", "accuracy", "grad_norm" (before clipping), "learning_rate" (the one this step used)},
plus the loss's terms "cross_entropy" and "attention_regulariser" (R) when reg_weight > 0; each a 0-d JAX
array (`float(m)` gives a Python float); they stay on device so that steps dispatch
asynchronously until a loop actually reads them.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..checks import check_label_smoothing, check_optimizer_state
from ..config import OptimizerConfig, ViTConfig
from ..params import decay_mask
from .layers import canonical_compute_dtype
from .model import check_inputs, loss_terms, random_token_ids


def schedule(opt_cfg: OptimizerConfig) -> optax.Schedule:
    """Linear warm-up from 0 to learning_rate over warmup_steps, then cosine to end_learning_rate at
    total_steps (constant after). Returns JAX's default float: float64 when x64 is on."""
    warmup_cosine = optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=opt_cfg.learning_rate, warmup_steps=opt_cfg.warmup_steps,
        decay_steps=opt_cfg.total_steps, end_value=opt_cfg.end_learning_rate)
    # optax's int32 step count would make the rate float32 even with x64 on; a float count keeps float64.
    return lambda count: warmup_cosine(jnp.asarray(count, dtype=float))


def learning_rate(step, opt_cfg: OptimizerConfig):
    """The learning rate of update number `step` (0 for the first), as a 0-d JAX array (jit-traceable)."""
    return schedule(opt_cfg)(step)


def make_optimizer(opt_cfg: OptimizerConfig) -> optax.GradientTransformation:
    """The optax chain above; weight decay only where `reluattn.params.decay_mask` is True."""
    if not isinstance(opt_cfg, OptimizerConfig):
        raise ValueError(f"opt_cfg must be an OptimizerConfig, got {type(opt_cfg).__name__}")
    adamw = optax.adamw(schedule(opt_cfg), b1=opt_cfg.b1, b2=opt_cfg.b2, eps=opt_cfg.eps,
                        weight_decay=opt_cfg.weight_decay, mask=decay_mask)
    if opt_cfg.clip_norm is None:
        return adamw
    return optax.chain(optax.clip_by_global_norm(opt_cfg.clip_norm), adamw)


def init_optimizer(params, opt_cfg: OptimizerConfig) -> dict:
    """Fresh optimizer state: `{"step": 0, "mu": zeros like params, "nu": zeros like params}`, the NumPy
    backend's layout (arrays only: it saves to .npz, and moves between backends)."""
    if not isinstance(opt_cfg, OptimizerConfig):
        raise ValueError(f"opt_cfg must be an OptimizerConfig, got {type(opt_cfg).__name__}")
    return {"step": jnp.zeros((), jnp.int32), "mu": jax.tree.map(jnp.zeros_like, params),
            "nu": jax.tree.map(jnp.zeros_like, params)}


def to_optax_state(optimizer: optax.GradientTransformation, params, opt_state: dict):
    """Our {"step", "mu", "nu"} as the state of `optimizer` (the chain above). Traced inside jit, the
    template's zeros are never materialised."""
    template = optimizer.init(params)
    # Every `count` in the chain (Adam's bias correction, the schedule) is the number of updates made.
    return optax.tree_utils.tree_set(template, mu=opt_state["mu"], nu=opt_state["nu"],
                                     count=jnp.asarray(opt_state["step"], jnp.int32))


def from_optax_state(state) -> dict:
    """Inverse of `to_optax_state`: Adam's count and moments."""
    is_adam = lambda node: isinstance(node, optax.ScaleByAdamState)  # noqa: E731
    (adam,) = [node for node in jax.tree.leaves(state, is_leaf=is_adam) if is_adam(node)]
    return {"step": adam.count, "mu": adam.mu, "nu": adam.nu}


def adamw_update(params, grads, opt_state: dict, opt_cfg: OptimizerConfig):
    """One optimizer update from gradients: (new params, new state, gradient norm before clipping, learning
    rate used). Pure and jit-traceable; the same contract as the NumPy backend's `optim.adamw_update`."""
    optimizer = make_optimizer(opt_cfg)
    updates, new_state = optimizer.update(grads, to_optax_state(optimizer, params, opt_state), params)
    rate = schedule(opt_cfg)(opt_state["step"])
    return optax.apply_updates(params, updates), from_optax_state(new_state), optax.tree.norm(grads), rate


def accuracy(logits, labels):
    """Fraction of images whose top logit is the label (for soft labels: their most likely class)."""
    targets = labels if labels.ndim == 1 else jnp.argmax(labels, axis=-1)  # (B,)
    return jnp.mean((jnp.argmax(logits, axis=-1) == targets).astype(logits.dtype))


def make_train_step(cfg: ViTConfig, opt_cfg: OptimizerConfig, *, label_smoothing=0.0, compute_dtype=None,
                    augment=None, fast=False, keep_tokens=None):
    """The pure step function `step(params, opt_state, images, labels, key=None)` (not jitted).

    fast=True: the speed paths of jax_backend/fast/ (what the training presets use).
    `augment`, if given, is a pure function `(key, images, labels) -> (images, labels)` run first inside
    the step (so it is compiled together with it); `key` is then a `jax.random` key the caller advances.
    keep_tokens=K: token dropping, each image of the step keeps a random K of its patch tokens (needs `key`).
    """
    check_label_smoothing(label_smoothing)
    compute_dtype = canonical_compute_dtype(compute_dtype)
    make_optimizer(opt_cfg)  # checks opt_cfg now rather than at the first trace

    if keep_tokens is not None and not 1 <= keep_tokens <= cfg.num_patches:
        raise ValueError(f"keep_tokens must be in [1, {cfg.num_patches}] (the patches per image), got {keep_tokens}")

    def step(params, opt_state, images, labels, key=None):
        token_ids = None
        if keep_tokens is not None:
            key, drop_key = jax.random.split(key)
            token_ids = random_token_ids(drop_key, images.shape[0], cfg.num_patches, keep_tokens)  # (B, K)
        if augment is not None:
            images, labels = augment(key, images, labels)
        (loss, (logits, terms)), grads = jax.value_and_grad(loss_terms, has_aux=True)(
            params, images, labels, cfg, label_smoothing, compute_dtype, fast=fast, token_ids=token_ids)
        params, opt_state, grad_norm, rate = adamw_update(params, grads, opt_state, opt_cfg)
        metrics = {"loss": loss, "accuracy": accuracy(logits, labels), "grad_norm": grad_norm, "learning_rate": rate,
                   **terms}  # terms: cross_entropy and attention_regulariser when reg_weight > 0
        return params, opt_state, metrics

    return step


@functools.lru_cache(maxsize=32)
def _jitted_train_step(cfg, opt_cfg, label_smoothing, compute_dtype, fast, donate):
    step = make_train_step(cfg, opt_cfg, label_smoothing=label_smoothing, compute_dtype=compute_dtype, fast=fast)
    return jax.jit(step, donate_argnums=(0, 1) if donate else ())


def train_step(params, opt_state, images, labels, cfg: ViTConfig, opt_cfg: OptimizerConfig, *,
               label_smoothing=0.0, compute_dtype=None, fast=False, donate=False):
    """One AdamW step on one batch: `(params, opt_state, metrics)`, see the module docstring.
    donate=True: `params` and `opt_state` are donated (their buffers reused for the results, so the old
    ones are gone: use the returned ones), saving a copy per step. fast: as in make_train_step."""
    if not isinstance(opt_cfg, OptimizerConfig):  # checked in the NumPy backend's order, so errors match
        raise ValueError(f"opt_cfg must be an OptimizerConfig, got {type(opt_cfg).__name__}")
    check_label_smoothing(label_smoothing)
    check_inputs(params, images, cfg, labels)
    check_optimizer_state(opt_state, params)
    if fast:
        from .fast import cpu_setup  # the speed paths live apart; only fast=True reaches them
        cpu_setup.hint_if_not_configured()
    step = _jitted_train_step(cfg, opt_cfg, float(label_smoothing), canonical_compute_dtype(compute_dtype), bool(fast),
                              bool(donate))
    return step(params, opt_state, images, labels)
