"""The learned length factor (AttentionConfig.learn_alpha / learn_scale) on the tiled blocked path in float32:
loss and gradients as close to the exact (float64 NumPy) ones as every other combination's, over drawn
models, plain and fast=True; and a broken factor fails the same check.

The bound is test_jax_vs_numpy.py's float32 one (loss within 1e-4; all gradient leaves as one vector within
1e-4 of its norm), checked again on the attn.length leaves alone (relative to their own norm: they are a
small share of the whole, so a wrong derivative of alpha could hide in it), with one clause more: where
rounding the parameters and images to float32 -- before any float32 arithmetic -- already moves the exact
gradient by s of its norm, the float32 result may be CONDITION_FACTOR * s away.

Why the clause (issue 12; numbers from benchmarks/investigations/float32_gradient_error.py): CI drew relu +
learn_alpha + block 5, seed 276 (the first @example below) and missed 1e-4 by 6x (6.0e-4). The learned factor
and the tiles are not the cause: that draw misses by the same 6.0e-4 to 6.2e-4 on the dense path, plain and
fast, with block sizes 2, 3, 5 (one tile) and 64, and with the factor not learned at all (alpha and scale fixed
at the learned values: the same function). The cause is the draw: its first LayerNorm (width 3) sees a token
whose three features are nearly equal (1 / std = 30), so rounding the inputs alone to float32 moves the exact
gradient by s = 1.2e-4 of its norm, past 1e-4 before any float32 arithmetic. Over 75 drawn blocked models with
a learned factor (the script's sweep with --seed 0, and a second sweep of 62) the float32 error was at most 9.9
times s over the whole gradient and 28 times over the length leaves, so CONDITION_FACTOR = 60 leaves twice the
largest; on well-conditioned draws (s below 1.7e-6) the clause adds nothing and the plain 1e-4 bound holds.
"""

import jax
import jax.numpy as jnp
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from reluattn.config import AttentionConfig, ViTConfig
from reluattn.jax_backend import multihead_attention
from reluattn.testing import FLOAT32_CONDITION_FACTOR as CONDITION_FACTOR
from reluattn.testing import ILL_CONDITIONED_DRAW, compiling, float32_against_exact, vit_configs

FLOAT32_TOLERANCE = 1e-4  # test_jax_vs_numpy.py's float32 gradient bound; float32 rounding is 6e-8 relative


def float32_bound_misses(cfg, seed, fast):
    """What misses the float32 bound of the module docstring on random parameters of cfg and a random batch:
    {"loss" / "gradients" / "length": message}, empty when everything holds."""
    errors = float32_against_exact(cfg, seed, fast)
    allowed = {"loss": FLOAT32_TOLERANCE,
               "gradients": max(FLOAT32_TOLERANCE, CONDITION_FACTOR * errors["sensitivity"]),
               "length": max(FLOAT32_TOLERANCE, CONDITION_FACTOR * errors["length sensitivity"])}
    return {name: f"relative error {errors[name]:.2e} > allowed {allowed[name]:.2e} ({errors})"
            for name in allowed if not errors[name] <= allowed[name]}


def learned_blocked_configs():
    """vit_configs() with impl="blocked" and at least one of learn_alpha, learn_scale on."""
    return vit_configs(impls=("blocked",)).filter(lambda cfg: cfg.attention.learn_alpha or cfg.attention.learn_scale)


# 17 tokens, block 5: three full key tiles and a partial one of 2.
BREAKABLE = ViTConfig(image_size=8, patch_size=2, channels=3, num_classes=3, dim=8, depth=2, heads=2, mlp_dim=12,
                      attention=AttentionConfig(kind="relu", impl="blocked", block_size=5, learn_alpha=True,
                                                learn_scale=True))


@settings(compiling, max_examples=4)
@given(cfg=learned_blocked_configs(), seed=st.integers(0, 2**16), fast=st.booleans())
@example(cfg=ILL_CONDITIONED_DRAW, seed=276, fast=True)
@example(cfg=BREAKABLE, seed=3, fast=True)  # the model the breaks below run on, unbroken
def test_learned_factor_on_the_blocked_path_meets_the_float32_bound(cfg, seed, fast):
    misses = float32_bound_misses(cfg, seed, fast)
    assert not misses, misses


BREAKS = {  # name: (what it does to the factor, what must then miss the bound)
    # A precision slip: the factor rounded to bfloat16 (the forward moves by up to 2^-9 relative).
    "factor in bfloat16": (lambda factor: factor.astype(jnp.bfloat16).astype(factor.dtype), "gradients"),
    # The right forward, alpha's and log_scale's derivative 1 % off: only the length leaves move.
    "derivative 1 % off": (lambda factor: jax.lax.stop_gradient(factor)
                           + 1.01 * (factor - jax.lax.stop_gradient(factor)), "length"),
}


@pytest.mark.parametrize("name", sorted(BREAKS))
def test_a_broken_learned_factor_fails_the_bound(monkeypatch, name):
    broken, must_miss = BREAKS[name]
    length_factor = multihead_attention.length_factor  # what the blocked path multiplies each head's output by
    monkeypatch.setattr(multihead_attention, "length_factor",
                        lambda *args, **kwargs: broken(length_factor(*args, **kwargs)))
    jax.clear_caches()  # loss_and_grad is jitted: without this the unbroken compilation would run again
    try:
        assert must_miss in float32_bound_misses(BREAKABLE, 3, fast=True)
    finally:
        monkeypatch.undo()
        jax.clear_caches()
