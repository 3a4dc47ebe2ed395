"""Token dropping (each image keeps a random subset of its patch tokens, so the attention sees fewer keys):
the NumPy backward against finite differences, the JAX twin equal to it in float64, keeping every token in
order equal to no dropping, and the training step's keep_tokens."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gradcheck import check_gradients
from reluattn.config import AttentionConfig, OptimizerConfig, ViTConfig
from reluattn.jax_backend import model as jax_model
from reluattn.jax_backend.optim import init_optimizer, make_train_step
from reluattn.numpy_backend import model as numpy_model
from reluattn.numpy_backend.layers import cross_entropy_backward, cross_entropy_forward, targets_from_labels
from reluattn.params import flatten, init_params
from reluattn.testing import assert_trees_close, compiling, relative_error


def tiny(pool, kind="relu"):
    return ViTConfig(image_size=8, patch_size=2, channels=3, num_classes=3, dim=8, depth=2, heads=2, mlp_dim=12,
                     pool=pool, attention=AttentionConfig(kind=kind, alpha=1.0))


def batch(cfg, seed, keep):
    rng = np.random.default_rng(seed)
    images = rng.normal(size=(3, cfg.image_size, cfg.image_size, cfg.channels))  # (B, S, S, C)
    labels = rng.integers(0, cfg.num_classes, size=3)  # (B,)
    token_ids = np.stack([rng.permutation(cfg.num_patches)[:keep] for _ in range(3)])  # (B, K)
    return images, labels, token_ids


def numpy_loss_and_grads(params, images, labels, cfg, token_ids):
    logits, _, cache = numpy_model.forward(params, images, cfg, token_ids)
    loss, loss_cache = cross_entropy_forward(logits, targets_from_labels(labels, cfg.num_classes))
    return loss, numpy_model.backward(cross_entropy_backward(1.0, loss_cache), cache, cfg)


@pytest.mark.parametrize("pool", ["cls", "gap"])
def test_numpy_backward_with_dropped_tokens_matches_finite_differences(pool):
    cfg = tiny(pool, "gelu")  # smooth: no kinks for the finite differences to straddle
    params = init_params(cfg, seed=1, dtype=np.float64)
    for leaf in flatten(params).values():
        leaf += np.random.default_rng(leaf.size).normal(0.0, 0.3, leaf.shape)
    images, labels, token_ids = batch(cfg, 2, keep=5)
    loss, grads = numpy_loss_and_grads(params, images, labels, cfg, token_ids)
    targets = targets_from_labels(labels, cfg.num_classes)

    def loss_only():
        return cross_entropy_forward(numpy_model.forward(params, images, cfg, token_ids)[0], targets)[0]

    check_gradients(loss_only, flatten(params), flatten(grads), samples=6, seed=3)
    dropped = np.setdiff1d(np.arange(cfg.num_patches), token_ids.ravel())  # patches no image kept
    first = 1 if pool == "cls" else 0
    assert dropped.size and np.all(grads["pos_embed"][first + dropped] == 0)  # they got no gradient


# One compiled program a draw: op by op, each of the graph's small operations would compile on its own.
loss_terms_and_grads = jax.jit(jax.value_and_grad(jax_model.loss_terms, has_aux=True), static_argnames=("cfg",))


@settings(compiling, max_examples=10)
@given(pool=st.sampled_from(["cls", "gap"]), kind=st.sampled_from(["relu", "softmax", "gelu"]),
       keep=st.integers(1, 16), seed=st.integers(0, 2 ** 16))
def test_jax_equals_numpy_with_dropped_tokens(pool, kind, keep, seed):
    cfg = tiny(pool, kind)
    params = init_params(cfg, seed=seed, dtype=np.float64)
    images, labels, token_ids = batch(cfg, seed, keep)
    expected_loss, expected_grads = numpy_loss_and_grads(params, images, labels, cfg, token_ids)
    with jax.enable_x64(True):
        (loss, _), grads = loss_terms_and_grads(params, images, labels, cfg, token_ids=jnp.asarray(token_ids))
    assert relative_error(loss, expected_loss) <= 1e-10
    assert_trees_close(grads, expected_grads, 1e-8, "gradients")


@pytest.mark.parametrize("pool", ["cls", "gap"])
def test_keeping_every_token_in_order_is_no_dropping(pool):
    cfg = tiny(pool)
    params = init_params(cfg, seed=0, dtype=np.float64)
    images, _, _ = batch(cfg, 0, keep=1)
    every = np.tile(np.arange(cfg.num_patches), (3, 1))  # (B, N)
    np.testing.assert_allclose(numpy_model.forward(params, images, cfg, every)[0],
                               numpy_model.forward(params, images, cfg)[0], rtol=1e-12)
    shuffled = np.stack([np.random.default_rng(i).permutation(cfg.num_patches) for i in range(3)])  # (B, N)
    np.testing.assert_allclose(numpy_model.forward(params, images, cfg, shuffled)[0],  # order does not matter
                               numpy_model.forward(params, images, cfg)[0], rtol=1e-10)


def test_the_training_step_drops_tokens_from_its_key():
    cfg, opt_cfg = tiny("gap"), OptimizerConfig(learning_rate=1e-2, warmup_steps=0, total_steps=10)
    params = init_params(cfg, seed=0)
    images, labels, _ = batch(cfg, 0, keep=1)
    images = images.astype(np.float32)
    key = jax.random.key(0)
    outputs = {keep: make_train_step(cfg, opt_cfg, keep_tokens=keep)(params, init_optimizer(params, opt_cfg),
                                                                     images, labels, key)[2]["loss"]
               for keep in (4, 8, None)}
    assert len({float(v) for v in outputs.values()}) == 3  # each keep count is a different model input
    ids = jax_model.random_token_ids(key, 3, cfg.num_patches, 4)
    assert ids.shape == (3, 4) and all(len(set(row.tolist())) == 4 for row in np.asarray(ids))
    with pytest.raises(ValueError, match="keep_tokens must be in"):
        make_train_step(cfg, opt_cfg, keep_tokens=cfg.num_patches + 1)
