"""The NumPy optimizer against optax (the chain OptimizerConfig documents), train_step's metrics and
state, and training end to end: overfitting 32 CIFAR-sized images."""

import io

import jax
import numpy as np
import optax
import pytest

from reluattn.config import AttentionConfig, OptimizerConfig, ViTConfig
from reluattn.numpy_backend import init_optimizer, learning_rate, loss_and_grad, train_step
from reluattn.numpy_backend.optim import adamw_update, global_norm
from reluattn.params import decay_mask, flatten, init_params, tree_map, unflatten

SCHEDULES = [
    OptimizerConfig(learning_rate=1e-3, warmup_steps=0, total_steps=10),
    OptimizerConfig(learning_rate=3e-3, end_learning_rate=1e-4, warmup_steps=4, total_steps=12),
]


def small_config():
    return ViTConfig(image_size=8, patch_size=4, channels=3, num_classes=3, dim=8, depth=1, heads=2,
                     mlp_dim=12, attention=AttentionConfig(kind="relu", qk_norm=True, gated=True))


@pytest.mark.parametrize("opt_cfg", SCHEDULES)
def test_learning_rate_schedule_matches_optax(opt_cfg):
    schedule = optax.warmup_cosine_decay_schedule(0.0, opt_cfg.learning_rate, opt_cfg.warmup_steps,
                                                  opt_cfg.total_steps, opt_cfg.end_learning_rate)
    for step in range(opt_cfg.total_steps + 5):
        assert learning_rate(step, opt_cfg) == pytest.approx(float(schedule(step)), rel=1e-5, abs=1e-12)
    assert learning_rate(opt_cfg.warmup_steps, opt_cfg) == pytest.approx(opt_cfg.learning_rate)
    assert learning_rate(10 * opt_cfg.total_steps, opt_cfg) == pytest.approx(opt_cfg.end_learning_rate)


@pytest.mark.parametrize("opt_cfg", [
    OptimizerConfig(learning_rate=1e-2, warmup_steps=2, total_steps=8, weight_decay=0.1, clip_norm=1.0),
    OptimizerConfig(learning_rate=1e-2, warmup_steps=0, total_steps=8, weight_decay=0.0, clip_norm=None,
                    b1=0.8, b2=0.95, eps=1e-6),
])
def test_adamw_matches_optax_step_by_step(opt_cfg):
    params = init_params(small_config(), seed=0)  # float32, like optax's computation
    schedule = optax.warmup_cosine_decay_schedule(0.0, opt_cfg.learning_rate, opt_cfg.warmup_steps,
                                                  opt_cfg.total_steps, opt_cfg.end_learning_rate)
    clip = [optax.clip_by_global_norm(opt_cfg.clip_norm)] if opt_cfg.clip_norm is not None else []
    reference = optax.chain(*clip, optax.adamw(schedule, opt_cfg.b1, opt_cfg.b2, opt_cfg.eps,
                                               weight_decay=opt_cfg.weight_decay, mask=decay_mask(params)))
    reference_params, reference_state = params, reference.init(params)

    @jax.jit  # one compiled step instead of many small eager operations per leaf
    def reference_step(grads, state, params):
        updates, state = reference.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    state = init_optimizer(params, opt_cfg)
    rng = np.random.default_rng(1)
    for step in range(6):
        size = [0.1, 3.0][step % 2]  # global norms below and above the clip threshold in turn
        grads = tree_map(lambda p: (size * rng.normal(size=p.shape) / np.sqrt(p.size)).astype(p.dtype), params)
        reference_params, reference_state = reference_step(grads, reference_state, reference_params)
        params, state, norm, rate = adamw_update(params, grads, state, opt_cfg)
        assert rate == pytest.approx(float(schedule(step)), rel=1e-6)
        assert norm == pytest.approx(float(optax.tree.norm(grads)), rel=1e-5)
        for path, expected in flatten(reference_params).items():
            np.testing.assert_allclose(flatten(params)[path], np.asarray(expected), rtol=2e-5, atol=2e-7,
                                       err_msg=f"step {step}, {path}")
    assert int(state["step"]) == 6


def test_train_step_metrics_and_state():
    cfg = small_config()
    opt_cfg = OptimizerConfig(learning_rate=1e-2, warmup_steps=1, total_steps=5, clip_norm=0.01)
    params = init_params(cfg, seed=0, dtype=np.float64)
    state = init_optimizer(params, opt_cfg)
    rng = np.random.default_rng(0)
    images, labels = rng.normal(size=(4, 8, 8, 3)), np.array([0, 1, 2, 1])
    for step in range(2):
        loss, grads = loss_and_grad(params, images, labels, cfg)
        params, state, metrics = train_step(params, state, images, labels, cfg, opt_cfg)
        assert set(metrics) == {"loss", "accuracy", "grad_norm", "learning_rate"}
        assert all(type(value) is float for value in metrics.values())
        assert metrics["loss"] == pytest.approx(loss, rel=1e-12)
        assert metrics["grad_norm"] == pytest.approx(global_norm(grads), rel=1e-12)  # before clipping
        assert metrics["grad_norm"] > opt_cfg.clip_norm
        assert metrics["learning_rate"] == learning_rate(step, opt_cfg)  # 0 on the first warm-up step
        assert metrics["accuracy"] in (0.0, 0.25, 0.5, 0.75, 1.0)
        assert int(state["step"]) == step + 1
    assert all(leaf.dtype == np.float64 for leaf in flatten(params).values())


def test_optimizer_state_round_trips_through_npz():
    cfg = small_config()
    opt_cfg = OptimizerConfig(learning_rate=1e-2, total_steps=5)
    params = init_params(cfg, seed=0)
    state = init_optimizer(params, opt_cfg)
    images, labels = np.random.default_rng(0).normal(size=(2, 8, 8, 3)), np.array([0, 2])
    params, state, _ = train_step(params, state, images, labels, cfg, opt_cfg)
    buffer = io.BytesIO()
    np.savez(buffer, **flatten(state))
    buffer.seek(0)
    with np.load(buffer, allow_pickle=False) as stored:
        restored = unflatten({key: stored[key] for key in stored.files})
    a = train_step(params, state, images, labels, cfg, opt_cfg)
    b = train_step(params, restored, images, labels, cfg, opt_cfg)
    assert a[2] == b[2]
    for path, leaf in flatten(a[0]).items():
        np.testing.assert_array_equal(leaf, flatten(b[0])[path])


def test_bad_optimizer_state_is_refused():
    cfg = small_config()
    opt_cfg = OptimizerConfig()
    params = init_params(cfg, seed=0)
    images, labels = np.zeros((2, 8, 8, 3)), np.array([0, 2])
    with pytest.raises(ValueError, match="opt_state must be the dict made by init_optimizer"):
        train_step(params, {"mu": {}}, images, labels, cfg, opt_cfg)
    other = init_optimizer(init_params(cfg.replace(dim=12), seed=0), opt_cfg)
    with pytest.raises(ValueError, match=r"opt_state\['mu'\] does not match the parameter tree"):
        train_step(params, other, images, labels, cfg, opt_cfg)
    with pytest.raises(ValueError, match="opt_cfg must be an OptimizerConfig"):
        train_step(params, init_optimizer(params, opt_cfg), images, labels, cfg, {"learning_rate": 1e-3})


def test_overfits_32_cifar_sized_images():
    # Random 32x32x3 images with random labels can only be learnt by memorising them: the whole chain
    # (forward, backward, AdamW) has to work for the loss to reach ~0.
    cfg = ViTConfig(image_size=32, patch_size=8, channels=3, num_classes=10, dim=32, depth=1, heads=2,
                    mlp_dim=64, attention=AttentionConfig(kind="relu", alpha=1.0, qk_norm=True))
    opt_cfg = OptimizerConfig(learning_rate=3e-3, warmup_steps=0, total_steps=300, weight_decay=0.0)
    rng = np.random.default_rng(0)
    # Standardised pixels, as the training pipeline feeds them (uniform [0, 1) inputs, all positive, let one
    # head's relu rows go all-zero at this initialisation and the loss stall at the label frequencies).
    images = rng.normal(size=(32, 32, 32, 3)).astype(np.float32)
    labels = rng.integers(0, 10, size=32)
    params = init_params(cfg, seed=0)
    state = init_optimizer(params, opt_cfg)
    losses = []
    for _ in range(opt_cfg.total_steps):
        params, state, metrics = train_step(params, state, images, labels, cfg, opt_cfg)
        losses.append(metrics["loss"])
        if metrics["loss"] < 0.05:
            break
    assert losses[0] > 2.0  # it starts near log(10): nothing memorised
    assert losses[-1] < 0.05, f"loss only fell from {losses[0]:.3f} to {losses[-1]:.3f} in {len(losses)} steps"
    assert metrics["accuracy"] == 1.0
