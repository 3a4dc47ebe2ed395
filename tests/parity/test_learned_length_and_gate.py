"""The JAX backend equal to the NumPy one for two attention options: the learned length factor
(AttentionConfig.learn_alpha / learn_scale; dense and blocked, whole models, float64) and the gate's activation
(AttentionConfig.gate_activation; the layer). Their NumPy sides are tested in tests/numpy_backend/
(test_learned_length.py, test_gate_activation.py)."""

import jax
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import reluattn as ra
from reluattn.config import ATTENTION_KINDS, KINDS_WITHOUT_LENGTH_FACTOR, AttentionConfig, ViTConfig
from reluattn.jax_backend.multihead_attention import self_attention
from reluattn.numpy_backend.multihead_attention import self_attention_forward
from reluattn.params import flatten, init_params
from reluattn.testing import compiling, make_batch, make_parameters, relative_error

nb, jb = ra.backend("numpy"), ra.backend("jax")


def tiny(kind="relu", **attention):
    return ViTConfig(image_size=8, patch_size=4, channels=3, num_classes=3, dim=8, depth=2, heads=2, mlp_dim=12,
                     attention=AttentionConfig(kind=kind, **attention))


# Each example compiles two float64 JAX programs for its config (about 25 s on the loaded 2-core machine),
# so: two fixed examples that always cover both impls, both learned parameters together and the scale alone,
# and two drawn ones (a kind, impl and learned parameters each). What this test adds is the learned factor, the
# same code for every kind; every kind's attention weights are held equal across the backends by
# tests/parity/test_jax_vs_numpy.py::test_attention_core_and_weights_equal_numpy.
@settings(compiling, max_examples=2)
@example(kind="relu", impl="blocked", learn_alpha=True, seed=2)  # alpha and the scale learned
@example(kind="gelu", impl="dense", learn_alpha=False, seed=3)  # the scale alone
@given(kind=st.sampled_from([kind for kind in ATTENTION_KINDS if kind not in KINDS_WITHOUT_LENGTH_FACTOR]),
       impl=st.sampled_from(["dense", "blocked"]), learn_alpha=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_learned_length_jax_equals_numpy(kind, impl, learn_alpha, seed):
    cfg = tiny(kind, alpha=0.7, scale=1.5, learn_alpha=learn_alpha, learn_scale=not learn_alpha or seed % 2 == 0,
               impl=impl, block_size=3 if impl == "blocked" else None)
    params = make_parameters(cfg, seed, np.float64)
    images, labels = make_batch(cfg, seed + 1, np.float64)
    logits, maps = nb.apply(params, images, cfg, return_attention=True)
    loss, grads = nb.loss_and_grad(params, images, labels, cfg)
    with jax.enable_x64(True):
        jax_logits, jax_maps = jb.apply(params, images, cfg, return_attention=True)
        jax_loss, jax_grads = jb.loss_and_grad(params, images, labels, cfg)
        jax_grads = flatten(jax.tree.map(np.asarray, jax_grads))
    assert relative_error(jax_logits, logits) <= 1e-10
    for got, expected in zip(jax_maps, maps):
        assert relative_error(got, expected) <= 1e-10
    assert relative_error(jax_loss, loss) <= 1e-10
    for path, leaf in flatten(grads).items():
        assert relative_error(jax_grads[path], leaf) <= 1e-8, path


@pytest.mark.parametrize("gate_activation", ["silu", "identity"])
def test_jax_gate_equals_numpy(gate_activation):
    cfg = AttentionConfig(kind="relu", gated=True, gate_activation=gate_activation)
    heads, dim = 2, 6
    x = np.random.default_rng(5).normal(size=(2, 4, dim))  # (B, T, D)
    model = ViTConfig(dim=dim, heads=heads, attention=cfg)
    params = init_params(model, seed=6, dtype=np.float64)["blocks"][0]["attn"]  # qkv, proj and the gate
    params["gate"]["b"] = np.random.default_rng(7).normal(size=dim)  # a bias that is not zero
    expected = self_attention_forward(x, params, cfg, heads)[0]
    with jax.enable_x64(True):
        got = np.asarray(self_attention(x, params, cfg, heads)[0])
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
