"""Padding invariance of the drop-in (jax_backend.dot_product_attention) and its NumPy reference: a key that
a query cannot see does not exist for it. Pad the keys (and, where the way of hiding needs it, the queries)
with random tokens, hide them, and the real tokens' outputs and gradients are the unpadded ones -- for every
attention kind in the registry, every way of hiding a key, dense and blocked. Float64 (x64 on inside each
test, with `jax.enable_x64`)."""

from __future__ import annotations

import contextlib
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reluattn import numpy_backend
from reluattn.config import ATTENTION_KINDS, HIDING_BIAS
from reluattn.jax_backend import attention_fn, dot_product_attention, long_sequences
from reluattn.jax_backend.fast import blocked_attention
from reluattn.testing import compiling, relative_error

# The ways of hiding the padding keys. "causal" and "window" pad the queries too (they hide by position, so
# the padded keys must come after every real query); the others pad the keys only.
WAYS = ("mask", "bias_-inf", "bias_finfo_min", "bias_threshold", "key_value_seq_lengths", "causal", "window")
PADS_QUERIES = ("causal", "window")
# (batch, real tokens, padding, kv heads, query heads per kv head, head width): a fixed set, since every new
# shape compiles the drop-in's operations again.
SHAPES = [(1, 1, 2, 1, 1, 3), (2, 4, 3, 1, 2, 4), (1, 5, 1, 2, 1, 2)]
few = settings(compiling, max_examples=4)
fewer = settings(compiling, max_examples=3)  # the blocked kernel compiles its loops again for each draw


@contextlib.contextmanager
def small_tiles(implementation, queries=2, keys=3):
    """The drop-in's blocked kernel in tiles of 2 queries x 3 keys, so that the padding straddles tiles and
    whole tiles are skipped (its defaults, 1024 each, would hold these short sequences in one tile)."""
    if implementation != "blocked":
        yield
        return
    with (mock.patch.object(long_sequences, "DEFAULT_BLOCK_SIZE", keys),
          mock.patch.object(blocked_attention, "DEFAULT_QUERY_BLOCK_SIZE", queries)):
        yield


def hide(way, real, padded, batch, heads):
    """The drop-in's keyword arguments that hide keys real..padded-1 (and a window that keeps every real one)."""
    key_pos = np.arange(padded)
    if way == "mask":
        return dict(mask=np.broadcast_to(key_pos < real, (batch, 1, 1, padded)))
    if way.startswith("bias"):
        hidden = {"bias_-inf": -np.inf, "bias_finfo_min": np.finfo(np.float32).min,
                  "bias_threshold": HIDING_BIAS}[way]
        return dict(bias=np.where(key_pos < real, 0.0, hidden)[None, None, None, :].repeat(heads, axis=1))
    if way == "key_value_seq_lengths":
        return dict(key_value_seq_lengths=np.full((batch,), real, np.int32))
    if way == "causal":
        return dict(is_causal=True)
    return dict(local_window_size=(padded, 0))  # (left, right): query i reads keys i - padded .. i


@st.composite
def padded_cases(draw):
    batch, real, pad, kv_heads, group, head_dim = draw(st.sampled_from(SHAPES))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    heads = kv_heads * group
    q = rng.normal(size=(batch, real + pad, heads, head_dim))  # the padding is random, not zeros: it must not count
    k, v = (rng.normal(size=(batch, real + pad, kv_heads, head_dim)) for _ in range(2))
    cotangent = rng.normal(size=(batch, real, heads, head_dim))
    return q, k, v, cotangent, real, draw(st.sampled_from([0.0, 0.5, 1.0, 2.0]))


def outputs_and_grads(call, q, k, v, cotangent, jit=False):
    """call(q, k, v) (B, T, N, H) and the gradients of sum(out[:, :real] * cotangent) with respect to q, k, v.
    jit=True compiles it whole (the blocked kernel's loops would each compile on their own anyway)."""
    real = cotangent.shape[1]

    def run(q, k, v, cotangent):
        out, vjp = jax.vjp(lambda q, k, v: call(q, k, v)[:, :real], q, k, v)
        return out, vjp(cotangent)
    return (jax.jit(run) if jit else run)(q, k, v, jnp.asarray(cotangent))


def gradient_error(got, expected):
    """relative_error, but over at least 1, the size of the O(1) inputs: a gradient that is 0 in exact
    arithmetic (softmax reading a single key gives dq = 0) is judged against the inputs, not its own rounding."""
    got, expected = np.asarray(got), np.asarray(expected)
    scale = max(1.0, float(np.abs(got).max(initial=0.0)), float(np.abs(expected).max(initial=0.0)))
    return float(np.abs(got - expected).max(initial=0.0)) / scale


def check_padding(kind, way, implementation, case):
    """The padded call (implementation "dense" or "blocked") against the dense drop-in on the real tokens
    alone (unpadded, blocked equals dense: tests/fast_paths/test_blocked_attention_jax.py)."""
    q, k, v, cotangent, real, alpha = case
    batch, padded, heads = q.shape[0], k.shape[1], q.shape[2]
    padded_queries = padded if way in PADS_QUERIES else real
    options = dict(kind=kind, alpha=alpha, implementation=implementation)
    unpadded_options = dict(options, implementation="dense", **({"is_causal": True} if way in PADS_QUERIES else {}))
    with jax.enable_x64(True), small_tiles(implementation):
        q, k, v = (jnp.asarray(x) for x in (q, k, v))
        hidden = hide(way, real, padded, batch, heads)
        if way == "window":  # the window and causal masks agree on the real tokens: compare with causal
            unpadded_options = dict(unpadded_options, local_window_size=(padded, 0))
        out, grads = outputs_and_grads(lambda q, k, v: dot_product_attention(q, k, v, **hidden, **options),
                                       q[:, :padded_queries], k, v, cotangent, jit=implementation == "blocked")
        expected_out, expected_grads = outputs_and_grads(
            lambda q, k, v: dot_product_attention(q, k, v, **unpadded_options),
            q[:, :real], k[:, :real], v[:, :real], cotangent)
        assert relative_error(out, expected_out) <= 1e-12, f"{kind}, {way}: outputs differ"
        for name, grad, expected in zip("qkv", grads, expected_grads):
            assert np.all(np.isfinite(grad)), f"{kind}, {way}: d{name} is not finite"
            assert gradient_error(grad[:, :real], expected) <= 1e-12, f"{kind}, {way}: d{name} of the real tokens"
            # The padding tokens get no gradient from the real queries (they are not there for them).
            assert float(jnp.abs(grad[:, real:]).max(initial=0.0)) == 0.0, f"{kind}, {way}: d{name} pad"
    # The NumPy reference hides keys the same way (forward).
    reference = numpy_backend.dot_product_attention(np.asarray(q[:, :padded_queries]), np.asarray(k), np.asarray(v),
                                                    kind=kind, alpha=alpha, **hidden)[:, :real]
    assert relative_error(reference, out) <= 1e-12, f"{kind}, {way}: the NumPy reference differs"


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("kind", ATTENTION_KINDS)
@few
@given(case=padded_cases())
def test_hidden_padding_keys_do_not_exist_dense(kind, way, case):
    check_padding(kind, way, "dense", case)


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("kind", ATTENTION_KINDS)
@fewer
@given(case=padded_cases())
def test_hidden_padding_keys_do_not_exist_blocked(kind, way, case):
    """The same through the blocked kernel (implementation="blocked"), in small tiles."""
    check_padding(kind, way, "blocked", case)


# ------------------------------------------------------------------ -inf bias, float masks, fully hidden rows

def test_a_float_mask_is_refused_not_inverted():
    q = jnp.ones((1, 3, 1, 2))
    additive = jnp.zeros((1, 1, 3, 3)).at[..., 2].set(-1e9)  # a PyTorch-style additive mask
    for call in (dot_product_attention, attention_fn("relu"), numpy_backend.dot_product_attention):
        with pytest.raises(ValueError, match=r"mask dtype should be bool, but got float32: pass an additive mask as `bias=`"):
            call(q, q, q, mask=additive)


def test_a_row_with_no_visible_key_reads_zero_and_softmax_matches_jax_nn():
    """jax.nn gives a row masked by `mask` the mean of the values (its large negative stand-in makes the softmax
    uniform) and NaN for a row that is all -inf bias; the drop-in gives the mean for softmax, either way, and 0
    for the point-wise kinds, never NaN."""
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.normal(size=(1, 3, 2, 4)), jnp.float32) for _ in range(3))
    mask = jnp.ones((1, 1, 3, 3), bool).at[..., 0, :].set(False)
    bias = jnp.where(mask, 0.0, -jnp.inf)
    by_jax_nn = jax.nn.dot_product_attention(q, k, v, mask=mask)
    assert relative_error(by_jax_nn[:, 0], jnp.broadcast_to(v.mean(axis=1), by_jax_nn[:, 0].shape)) <= 1e-6
    for hidden in (dict(mask=mask), dict(bias=bias)):
        softmax = dot_product_attention(q, k, v, kind="softmax", **hidden)
        assert relative_error(softmax, by_jax_nn) <= 1e-6
        for kind in ATTENTION_KINDS[1:]:
            out = dot_product_attention(q, k, v, kind=kind, **hidden)
            assert float(jnp.abs(out[:, 0]).max()) == 0.0, kind
            reference = numpy_backend.dot_product_attention(q, k, v, kind=kind, **hidden)
            assert relative_error(out, reference) <= 1e-5, kind


@pytest.mark.parametrize("implementation", ["dense", "blocked"])
@pytest.mark.parametrize("kind", ATTENTION_KINDS)
def test_minus_inf_bias_never_gives_nan(kind, implementation):
    """Output and gradients (the bias's too) are finite, dense and blocked (in small tiles)."""
    rng = np.random.default_rng(1)
    q, k, v = (jnp.asarray(rng.normal(size=(2, 4, 2, 3)), jnp.float32) for _ in range(3))
    bias = jnp.asarray(np.where(rng.random((2, 2, 4, 4)) < 0.5, -np.inf, rng.normal(size=(2, 2, 4, 4))), jnp.float32)
    bias = bias.at[0, 0, 1].set(-jnp.inf)  # one row with no visible key

    def loss(q, k, v, bias):
        return jnp.sum(dot_product_attention(q, k, v, bias, kind=kind, implementation=implementation) ** 2)

    with small_tiles(implementation):
        values = [loss(q, k, v, bias)] + list(jax.grad(loss, argnums=(0, 1, 2, 3))(q, k, v, bias))
        assert all(bool(jnp.all(jnp.isfinite(x))) for x in values), kind
        if kind == "softmax":  # where jax.nn is finite (no all -inf row), the drop-in equals it
            finite_bias = bias.at[0, 0, 1].set(0.0)
            expected = jax.nn.dot_product_attention(q, k, v, finite_bias)
            got = dot_product_attention(q, k, v, finite_bias, kind=kind, implementation=implementation)
            assert relative_error(got, expected) <= 1e-6


def test_linen_einsum_hooks_are_refused():
    q = jnp.ones((1, 3, 1, 2))
    for hook in ("qk_attn_weights_einsum", "attn_weights_value_einsum"):
        with pytest.raises(NotImplementedError, match=hook):
            attention_fn("relu")(q, q, q, **{hook: jnp.einsum})


def test_traced_scale_and_array_alpha():
    rng = np.random.default_rng(2)
    q, k, v = (jnp.asarray(rng.normal(size=(1, 4, 2, 3)), jnp.float32) for _ in range(3))

    @jax.jit
    def call(scale, alpha):
        return dot_product_attention(q, k, v, scale=scale, alpha=alpha, is_causal=True)

    expected = numpy_backend.dot_product_attention(q, k, v, scale=0.3, alpha=0.5, is_causal=True)
    assert relative_error(call(0.3, jnp.asarray(0.5)), expected) <= 1e-6
    grad_alpha = jax.grad(lambda a: jnp.sum(call(0.3, a)))(jnp.asarray(0.5))  # a learned alpha trains
    assert bool(jnp.isfinite(grad_alpha)) and float(grad_alpha) != 0.0
    with pytest.raises(ValueError, match="alpha must be finite and >= 0"):
        dot_product_attention(q, k, v, alpha=jnp.asarray(-1.0))
