"""AdamW with global-norm clipping and a warm-up + cosine schedule, in NumPy.

Exactly the optax chain that `OptimizerConfig`'s docstring states (reluattn/config.py), written out for a
step t = step + 1 (step counts the updates already made):
    g      = g * clip / norm              only when norm = ||g|| (over every leaf) >= clip
    mu     = b1 mu + (1 - b1) g           nu = b2 nu + (1 - b2) g^2
    update = mu / (1 - b1^t) / (sqrt(nu / (1 - b2^t)) + eps) + weight_decay * mask * p
    p      = p - learning_rate(step) * update
The optimizer state is {"step": int array, "mu": tree, "nu": tree}: arrays only, so it fits in an .npz.
"""

from __future__ import annotations

import math

import numpy as np

from ..checks import check_optimizer_state
from ..config import OptimizerConfig
from ..params import decay_mask, tree_leaves, tree_map
from .model import forward_backward


def learning_rate(step, opt_cfg: OptimizerConfig) -> float:
    """The learning rate of update number `step` (0-based): linear warm-up from 0, then a cosine from the
    peak down to end_learning_rate at total_steps, constant after it."""
    step = int(step)
    peak, end = opt_cfg.learning_rate, opt_cfg.end_learning_rate
    if step < opt_cfg.warmup_steps:
        return peak * step / opt_cfg.warmup_steps
    decay_steps = opt_cfg.total_steps - opt_cfg.warmup_steps
    progress = min(step - opt_cfg.warmup_steps, decay_steps) / decay_steps
    return end + (peak - end) * 0.5 * (1.0 + math.cos(math.pi * progress))


def init_optimizer(params, opt_cfg: OptimizerConfig) -> dict:
    """Zero moments shaped like params, and step 0."""
    if not isinstance(opt_cfg, OptimizerConfig):
        raise ValueError(f"opt_cfg must be an OptimizerConfig, got {type(opt_cfg).__name__}")
    def zeros(leaf):
        return np.zeros(np.shape(leaf), dtype=np.asarray(leaf).dtype)

    return {"step": np.array(0, dtype=np.int64), "mu": tree_map(zeros, params), "nu": tree_map(zeros, params)}


def global_norm(tree) -> float:
    """The L2 norm of all leaves taken together."""
    return math.sqrt(sum(float(np.sum(np.square(leaf, dtype=np.float64))) for leaf in tree_leaves(tree)))


def adamw_update(params, grads, opt_state, opt_cfg: OptimizerConfig):
    """One AdamW update from gradients: (new params, new state, grad norm before clipping, learning rate)."""
    check_optimizer_state(opt_state, params)
    step = int(opt_state["step"])
    norm = global_norm(grads)
    if opt_cfg.clip_norm is not None and norm >= opt_cfg.clip_norm:
        # Rescale to the clip norm (optax leaves gradients below the threshold alone).
        grads = tree_map(lambda g: g * (opt_cfg.clip_norm / norm), grads)
    b1, b2, t = opt_cfg.b1, opt_cfg.b2, step + 1
    mu = tree_map(lambda m, g: b1 * m + (1 - b1) * g, opt_state["mu"], grads)
    nu = tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, opt_state["nu"], grads)
    rate = learning_rate(step, opt_cfg)

    def update(p, m, v, decays):
        adam = (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + opt_cfg.eps)
        if decays:  # decoupled weight decay, on dense weights only (params.decay_mask)
            adam = adam + opt_cfg.weight_decay * p
        return (p - rate * adam).astype(np.asarray(p).dtype)

    new_params = tree_map(update, params, mu, nu, decay_mask(params))
    new_state = {"step": np.array(step + 1, dtype=np.int64), "mu": mu, "nu": nu}
    return new_params, new_state, norm, rate


def train_step(params, opt_state, images, labels, cfg, opt_cfg, *, label_smoothing=0.0):
    """Loss, gradients and one AdamW update: (new params, new state, metrics). The metrics are floats:
    loss, accuracy (against the labels, or the argmax of soft labels), grad_norm (before clipping) and
    learning_rate (the one this update used); with cfg.attention.reg_weight > 0 also the loss's terms,
    cross_entropy and attention_regulariser (R)."""
    if not isinstance(opt_cfg, OptimizerConfig):
        raise ValueError(f"opt_cfg must be an OptimizerConfig, got {type(opt_cfg).__name__}")
    loss, grads, logits, terms = forward_backward(params, images, labels, cfg, label_smoothing=label_smoothing)
    labels = np.asarray(labels)
    true_class = labels if labels.ndim == 1 else labels.argmax(axis=-1)  # (B,)
    accuracy = float(np.mean(logits.argmax(axis=-1) == true_class))
    params, opt_state, norm, rate = adamw_update(params, grads, opt_state, opt_cfg)
    metrics = {"loss": loss, "accuracy": accuracy, "grad_norm": norm, "learning_rate": rate, **terms}
    return params, opt_state, metrics
