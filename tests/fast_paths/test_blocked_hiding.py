"""The blocked kernel hides keys every way the dense path does. For each way of hiding -- a bool mask, an
additive bias (finite, -inf, finfo.min, -1e9 and config.HIDING_BIAS entries), key_value_seq_lengths,
is_causal, a local window, and all of them at once -- the drop-in with implementation="blocked", in small
tiles, equals implementation="dense": outputs and the gradients with respect to q, k, v and the bias, in
float64, for softmax and for drawn point-wise kinds, rows that see no key included. Padding (hidden keys
after the real ones), every kind: tests/parity/test_padding_invariance.py."""

from __future__ import annotations

from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reluattn.config import ATTENTION_KINDS, HIDING_BIAS, AttentionConfig
from reluattn.jax_backend import dot_product_attention, long_sequences
from reluattn.jax_backend.fast import blocked_attention
from reluattn.testing import compiling, relative_error

WAYS = ("mask", "bias", "key_value_seq_lengths", "causal", "window", "everything")
# (batch, queries T, keys S, kv heads, query heads per kv head, head width); causal needs T == S.
SHAPES = [(1, 5, 5, 1, 1, 3), (2, 4, 7, 1, 2, 2), (2, 6, 6, 2, 1, 4)]
HIDING_VALUES = (-np.inf, np.finfo(np.float32).min, -1e9, HIDING_BIAS)  # each hides its key
# Softmax (the online update, jax.nn's answer for a row with no key), and the point-wise kinds (n_i), drawn.
FAMILIES = {"softmax": ["softmax"], "point-wise": [kind for kind in ATTENTION_KINDS if kind != "softmax"]}
examples = settings(compiling, max_examples=3)  # each draw compiles the kernel (~3 s)


def random_hiding_array(rng, way, shape, draw):
    """A mask (bool) or bias (float) of one of the shapes jax.nn takes, with one query row hidden whole."""
    batch, queries, keys, heads = shape
    layout = draw(st.sampled_from([(batch, 1, 1, keys), (batch, heads, queries, keys), (1, 1, queries, keys),
                                   (1, heads, queries, 1)]))
    hidden = rng.random(layout) < 0.4  # (layout)
    hidden[(0,) * (len(layout) - 2) + (0, slice(None))] = True  # a query that sees no key, where a row exists
    if way == "mask":
        return ~hidden
    values = rng.choice(HIDING_VALUES, size=layout)  # (layout)
    return np.where(hidden, values, rng.normal(size=layout))  # finite entries are added to the scores


@st.composite
def cases(draw, way, kinds):
    """(q, k, v, cotangent, kind, alpha, the drop-in's hiding arguments, (query, key) tile sizes)."""
    shapes = [s for s in SHAPES if s[1] == s[2]] if way in ("causal", "everything") else SHAPES
    batch, queries, keys, kv_heads, group, head_dim = draw(st.sampled_from(shapes))
    heads = kv_heads * group
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    q = rng.normal(size=(batch, queries, heads, head_dim))  # (B, T, N, H)
    k, v = (rng.normal(size=(batch, keys, kv_heads, head_dim)) for _ in range(2))  # (B, S, K, H)
    cotangent = rng.normal(size=q.shape)  # (B, T, N, H)
    options = {}
    if way in ("mask", "everything"):
        options["mask"] = random_hiding_array(rng, "mask", (batch, queries, keys, heads), draw)
    if way in ("bias", "everything"):
        options["bias"] = random_hiding_array(rng, "bias", (batch, queries, keys, heads), draw)
    if way in ("key_value_seq_lengths", "everything"):
        options["key_value_seq_lengths"] = rng.integers(0, keys + 1, size=batch).astype(np.int32)  # 0: none
    if way in ("causal", "everything"):
        options["is_causal"] = True
    if way in ("window", "everything"):
        window = st.integers(0, keys)
        options["local_window_size"] = draw(st.one_of(window, st.tuples(window, window)))
    if way == "everything":
        options["query_seq_lengths"] = rng.integers(0, queries + 1, size=batch).astype(np.int32)
    tiles = (draw(st.sampled_from([1, 2, 3, 16])), draw(st.sampled_from([1, 2, 3, 5, 16])))
    alpha = draw(st.sampled_from([0.0, 0.5, 1.0, 2.0]))
    return q, k, v, cotangent, draw(st.sampled_from(kinds)), alpha, options, tiles


def gradient_error(got, expected):
    """relative_error, but over at least 1, the size of the O(1) inputs: a gradient that is 0 in exact
    arithmetic (softmax reading a single key gives dq = 0) is judged against the inputs, not its own rounding."""
    got, expected = np.asarray(got), np.asarray(expected)
    scale = max(1.0, float(np.abs(got).max(initial=0.0)), float(np.abs(expected).max(initial=0.0)))
    return float(np.abs(got - expected).max(initial=0.0)) / scale


def outputs_and_grads(q, k, v, cotangent, kind, alpha, options, implementation):
    """The drop-in's output and the gradients of sum(out * cotangent) with respect to q, k, v (and the bias)."""
    bias = options.pop("bias", None)
    inputs = (q, k, v) if bias is None else (q, k, v, jnp.asarray(bias))

    def run(*inputs):
        def call(q, k, v, bias=None):
            return dot_product_attention(q, k, v, bias, kind=kind, alpha=alpha, implementation=implementation,
                                         **options)
        out, vjp = jax.vjp(call, *inputs)
        return out, vjp(jnp.asarray(cotangent))
    return (jax.jit(run) if implementation == "blocked" else run)(*inputs)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("way", WAYS)
@examples
@given(data=st.data())
def test_blocked_equals_dense_under_every_way_of_hiding(way, family, data):
    q, k, v, cotangent, kind, alpha, options, (query_block, key_block) = data.draw(cases(way, FAMILIES[family]))
    with (jax.enable_x64(True), mock.patch.object(long_sequences, "DEFAULT_BLOCK_SIZE", key_block),
          mock.patch.object(blocked_attention, "DEFAULT_QUERY_BLOCK_SIZE", query_block)):
        q, k, v = (jnp.asarray(x) for x in (q, k, v))
        out, grads = outputs_and_grads(q, k, v, cotangent, kind, alpha, dict(options), "blocked")
        expected_out, expected_grads = outputs_and_grads(q, k, v, cotangent, kind, alpha, dict(options), "dense")
    assert relative_error(out, expected_out) <= 1e-12, f"{kind}: outputs differ"
    for name, grad, expected in zip(("q", "k", "v", "bias"), grads, expected_grads):
        assert np.all(np.isfinite(grad)), f"{kind}: d{name} is not finite"
        assert gradient_error(grad, expected) <= 1e-12, f"{kind}: d{name} differs"


# --------------------------------------------------------------------------- the kernel's own arguments

def test_the_kernel_takes_the_ways_of_hiding_as_arguments():
    """long_sequences.blocked_attention(window=, key_lengths=, mask=, bias=) is the drop-in's blocked path."""
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.normal(size=(2, 6, 2, 4)), jnp.float32) for _ in range(3))
    mask = jnp.asarray(rng.random((2, 1, 6, 6)) < 0.7)
    bias = jnp.asarray(rng.normal(size=(1, 2, 6, 6)), jnp.float32)
    lengths = jnp.asarray([4, 6], jnp.int32)
    for kind in ("relu", "softmax", "sigmoid_bias"):
        got = long_sequences.blocked_attention(q, k, v, AttentionConfig(kind=kind), block_size=4, query_block_size=4,
                                               causal=True, window=(2, 0), key_lengths=lengths, mask=mask, bias=bias)
        expected = dot_product_attention(q, k, v, bias, mask, kind=kind, is_causal=True, local_window_size=(2, 0),
                                         key_value_seq_lengths=lengths, implementation="dense")
        assert relative_error(got, expected) <= 1e-6, kind


@pytest.mark.parametrize("bad, message", [
    (dict(causal=True, causal_length="global", key_lengths=jnp.asarray([3])), "takes no other way of hiding"),
    (dict(window=(1, 2, 3)), "window .* must be an int or a pair of ints"),
    (dict(window=1.5), "window .* must be an int or a pair of ints"),
    (dict(mask=jnp.ones((1, 1, 4, 4))), "mask dtype should be bool"),
])
def test_bad_ways_of_hiding_are_clear_errors(bad, message):
    q = jnp.ones((1, 4, 1, 2))
    with pytest.raises(ValueError, match=message):
        long_sequences.blocked_attention(q, q, q, AttentionConfig(), block_size=2, **bad)
