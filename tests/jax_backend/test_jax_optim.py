"""The optax optimizer of the JAX backend against the NumPy backend's AdamW: the same updates, states, gradient
norms and learning rates for the same gradients and hyperparameters (clipping on and off, with and
without warm-up, over several steps), in float64 (x64 on only inside each test)."""

import jax
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import reluattn as ra
from reluattn.config import AttentionConfig, ViTConfig
from reluattn.numpy_backend import optim as numpy_optim
from reluattn.params import flatten, init_params, tree_map
from reluattn.testing import assert_trees_close, optimizer_configs, relative_error

jb, nb = ra.backend("jax"), ra.backend("numpy")
# A real parameter tree (dicts and lists; weights that decay, biases, scales and embeddings that do not).
CFG = ViTConfig(image_size=4, patch_size=2, channels=1, num_classes=3, dim=4, depth=1, heads=2, mlp_dim=6,
                attention=AttentionConfig(qk_norm=True, gated=True))


@settings(max_examples=30, deadline=None)
@given(opt_cfg=optimizer_configs(), steps=st.integers(1, 5), seed=st.integers(0, 2**16),
       gradient_scale=st.sampled_from([1e-3, 1.0, 30.0]))
def test_optax_update_equals_numpy_adamw(opt_cfg, steps, seed, gradient_scale):
    rng = np.random.default_rng(seed)
    params = tree_map(lambda leaf: leaf + rng.normal(0.0, 0.1, leaf.shape), init_params(CFG, seed, np.float64))
    numpy_params, numpy_state = params, nb.init_optimizer(params, opt_cfg)
    with jax.enable_x64(True):
        jax_params, jax_state = params, jb.init_optimizer(params, opt_cfg)
        for _ in range(steps):
            grads = tree_map(lambda leaf: gradient_scale * rng.normal(size=leaf.shape), params)
            new_numpy_params, numpy_state, numpy_norm, numpy_rate = numpy_optim.adamw_update(
                numpy_params, grads, numpy_state, opt_cfg)
            new_jax_params, jax_state, jax_norm, jax_rate = jb.adamw_update(jax_params, grads, jax_state, opt_cfg)
            assert relative_error(jax_norm, numpy_norm) <= 1e-12
            assert relative_error(jax_rate, numpy_rate) <= 1e-12
            # Compare the updates (new - old), which the parameters themselves would drown.
            assert_trees_close(tree_map(np.subtract, new_jax_params, jax_params),
                               tree_map(np.subtract, new_numpy_params, numpy_params), 1e-9, "updates")
            numpy_params, jax_params = new_numpy_params, new_jax_params
        assert int(jax_state["step"]) == int(numpy_state["step"]) == steps
        assert_trees_close(jax_state["mu"], numpy_state["mu"], 1e-12, "first moments")
        assert_trees_close(jax_state["nu"], numpy_state["nu"], 1e-12, "second moments")


@settings(max_examples=25, deadline=None)
@given(opt_cfg=optimizer_configs())
def test_learning_rate_schedule_equals_numpy(opt_cfg):
    with jax.enable_x64(True):
        for step in range(opt_cfg.total_steps + 3):
            assert relative_error(jb.learning_rate(step, opt_cfg), nb.learning_rate(step, opt_cfg)) <= 1e-12
    # float32 by default, and still right to float32 precision.
    assert jb.learning_rate(0, opt_cfg).dtype == np.float32
    final = jb.learning_rate(opt_cfg.total_steps, opt_cfg)
    assert relative_error(final, nb.learning_rate(opt_cfg.total_steps, opt_cfg)) <= 1e-6


def test_weight_decay_reaches_dense_weights_only():
    """With zero gradients, only weight decay moves parameters: exactly the `w` leaves."""
    opt_cfg = ra.OptimizerConfig(learning_rate=0.1, total_steps=10, weight_decay=0.5, clip_norm=None)
    params = init_params(CFG, 0, np.float32)
    params = tree_map(lambda leaf: leaf + 1.0, params)
    zeros = tree_map(np.zeros_like, params)
    new_params, _, _, _ = jb.adamw_update(params, zeros, jb.init_optimizer(params, opt_cfg), opt_cfg)
    for path, leaf in flatten(new_params).items():
        moved = not np.array_equal(np.asarray(leaf), flatten(params)[path])
        assert moved == path.endswith("/w"), path
