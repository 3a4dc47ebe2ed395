"""The default JAX path is plain jnp + autodiff, so every JAX transform goes through the model: forward
mode (jax.jvp, jax.jacfwd), second order (jax.hessian), batching (jax.vmap) and gradients with respect to
the images (a saliency map), each checked against a number computed another way (central differences in
float64, reverse mode, the batch), in float32 and float64."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import reluattn as ra
from reluattn.config import AttentionConfig, ViTConfig

jb = ra.backend("jax")

# Small, so that each transform compiles quickly; qk-norm and the gate put every layer on the path.
TINY = ViTConfig(image_size=4, patch_size=2, channels=1, num_classes=3, dim=4, depth=1, heads=2, mlp_dim=6,
                 attention=AttentionConfig(kind="relu", qk_norm=True, gated=True))
SMALL = ViTConfig(image_size=4, patch_size=2, channels=3, num_classes=4, dim=8, depth=1, heads=2, mlp_dim=8,
                  attention=AttentionConfig(kind="softmax", qk_norm=True, gated=True))
# float32 results against float64 references: float32 rounding; float64 against central differences
# with step 1e-5: truncation ~1e-10 and rounding ~1e-11 relative.
TOLERANCE = {"float32": 2e-2, "float64": 1e-6}


@pytest.fixture(params=["float32", "float64"])
def dtype(request):
    with jax.enable_x64(request.param == "float64"):
        yield request.param


def batch(cfg, dtype, size=2, seed=0):
    rng = np.random.default_rng(seed)
    params = jax.tree.map(lambda leaf: leaf.astype(dtype), ra.init_params(cfg, seed=seed, dtype=np.float64))
    images = rng.normal(size=(size, cfg.image_size, cfg.image_size, cfg.channels)).astype(dtype)
    return params, images, rng.integers(0, cfg.num_classes, size=size)


def central_difference(function, params, x, direction, step=1e-5):
    """The derivative of function(params, x) along direction, by central differences in float64 (whatever
    the dtype of the test): the reference both dtypes are held to."""
    with jax.enable_x64(True):
        params, x, direction = jax.tree.map(lambda a: np.asarray(a, np.float64), (params, x, direction))
        return (np.asarray(function(params, x + step * direction))
                - np.asarray(function(params, x - step * direction))) / (2 * step)


def close(got, expected, dtype):
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    assert np.linalg.norm(got - expected) <= TOLERANCE[dtype] * max(np.linalg.norm(expected), 1e-12)


def test_saliency_grad_of_apply_with_respect_to_the_images(dtype):
    params, images, labels = batch(SMALL, dtype)
    top_logit = lambda p, x: jb.apply(p, x, SMALL)[jnp.arange(2), labels].sum()  # noqa: E731
    saliency = jax.grad(top_logit, argnums=1)(params, images)
    assert saliency.shape == images.shape and saliency.dtype == images.dtype
    direction = np.random.default_rng(1).normal(size=images.shape).astype(dtype)
    close(jnp.vdot(saliency, direction), central_difference(top_logit, params, images, direction), dtype)


def test_grad_of_the_loss_of_loss_and_grad_with_respect_to_the_images(dtype):
    params, images, labels = batch(SMALL, dtype)
    loss = lambda p, x: jb.loss_and_grad(p, x, labels, SMALL)[0]  # noqa: E731
    gradient = jax.grad(loss, argnums=1)(params, images)
    direction = np.random.default_rng(2).normal(size=images.shape).astype(dtype)
    close(jnp.vdot(gradient, direction), central_difference(loss, params, images, direction), dtype)


def test_jvp_with_respect_to_the_images(dtype):
    params, images, labels = batch(SMALL, dtype)
    direction = np.random.default_rng(3).normal(size=images.shape).astype(dtype)
    logits = lambda p, x: jb.apply(p, x, SMALL)  # noqa: E731
    value, tangent = jax.jvp(lambda x: logits(params, x), (images,), (direction,))
    close(value, logits(params, images), dtype)
    close(tangent, central_difference(logits, params, images, direction), dtype)


def test_jvp_with_respect_to_the_params_in_float32():
    params, images, labels = batch(SMALL, "float32")
    rng = np.random.default_rng(4)
    direction = jax.tree.map(lambda leaf: rng.normal(size=leaf.shape).astype(np.float32), params)
    loss = lambda p: jb.loss_and_logits(p, images, labels, SMALL)[0]  # noqa: E731
    _, tangent = jax.jvp(loss, (params,), (direction,))
    # Forward mode equals reverse mode: <grad, direction>.
    gradient = jb.loss_and_grad(params, images, labels, SMALL)[1]
    expected = sum(float(jnp.vdot(g, d)) for g, d in zip(jax.tree.leaves(gradient), jax.tree.leaves(direction)))
    close(tangent, expected, "float32")


def test_jacfwd_equals_jacrev_with_respect_to_the_images(dtype):
    params, images, _ = batch(TINY, dtype, size=1)
    logits = lambda x: jb.apply(params, x, TINY)  # noqa: E731
    forward, reverse = jax.jacfwd(logits)(images), jax.jacrev(logits)(images)
    assert forward.shape == (1, TINY.num_classes) + images.shape
    close(forward, reverse, dtype)


def test_hessian_of_the_loss_with_respect_to_the_images(dtype):
    params, images, labels = batch(TINY, dtype, size=1)
    loss = lambda p, x: jb.loss_and_logits(p, x, labels, TINY)[0]  # noqa: E731
    # Under jit: run op by op, the second-order graph took 50 s on a 2-core AMD EPYC; compiled once, 9 s.
    hessian = jax.jit(jax.hessian(loss, argnums=1))(params, images).reshape(images.size, images.size)
    close(hessian, hessian.T, dtype)  # symmetric
    # Hessian times a direction is the derivative of the gradient along it.
    direction = np.random.default_rng(5).normal(size=images.shape).astype(dtype)
    gradient = jax.jit(lambda p, x: jax.grad(loss, argnums=1)(p, x).ravel())
    close(hessian @ direction.ravel(), central_difference(gradient, params, images, direction), dtype)


def test_vmap_over_single_images_equals_the_batch(dtype):
    params, images, _ = batch(SMALL, dtype, size=3)
    one_at_a_time = jax.vmap(lambda x: jb.apply(params, x[None], SMALL)[0])(images)
    close(one_at_a_time, jb.apply(params, images, SMALL), dtype)


def test_vmap_of_per_example_gradients_sums_to_the_batch_gradient(dtype):
    params, images, labels = batch(SMALL, dtype, size=3)
    per_example = jax.vmap(lambda x, y: jb.loss_and_grad(params, x[None], y[None], SMALL)[1])(images, labels)
    batch_grads = jb.loss_and_grad(params, images, labels, SMALL)[1]
    for got, expected in zip(jax.tree.leaves(per_example), jax.tree.leaves(batch_grads)):
        close(got.mean(axis=0), expected, dtype)


def test_the_fast_path_is_reverse_mode_only_and_says_so():
    # fast=True opts into custom_vjp matmuls: gradients work, forward mode is refused by JAX.
    params, images, labels = batch(SMALL, "float32")
    fast_grads = jb.loss_and_grad(params, images, labels, SMALL, fast=True)[1]
    for got, expected in zip(jax.tree.leaves(fast_grads), jax.tree.leaves(jb.loss_and_grad(params, images, labels,
                                                                                           SMALL)[1])):
        close(got, expected, "float32")
    with pytest.raises(TypeError, match="custom_vjp"):
        jax.jvp(lambda x: jb.apply(params, x, SMALL, fast=True), (images,), (images,))
