"""JAX blocked attention (custom_vjp) equals dense attention, forward and gradients, and holds no L x L array."""

import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reluattn.jax_backend as jb
import reluattn.numpy_backend as nb
from reluattn.config import ATTENTION_KINDS, AttentionConfig, ViTConfig
from reluattn.jax_backend.long_sequences import blocked_attention
from reluattn.numpy_backend.long_sequences import causal_attention_weights_backward, causal_attention_weights_forward
from reluattn.numpy_backend.multihead_attention import heads_attention_backward, heads_attention_forward
from reluattn.params import flatten, init_params


def qkv(seed, batch, length, heads, head_dim, spread=1.5, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return tuple((spread * rng.normal(size=(batch, length, heads, head_dim))).astype(dtype) for _ in range(4))


def numpy_dense(q, k, v, dout, attn_cfg, causal, causal_length):
    """The NumPy dense core and its hand-written backward, in the tokens-first layout."""
    heads_first = [x.transpose(0, 2, 1, 3) for x in (q, k, v, dout)]
    if causal:
        def weights_forward(scores, attn_cfg):
            return causal_attention_weights_forward(scores, attn_cfg, causal_length)
        out, _, cache = heads_attention_forward(*heads_first[:3], attn_cfg, weights_forward)
        grads = heads_attention_backward(heads_first[3], cache, attn_cfg, causal_attention_weights_backward)
    else:
        out, _, cache = heads_attention_forward(*heads_first[:3], attn_cfg)
        grads = heads_attention_backward(heads_first[3], cache, attn_cfg)
    return out.transpose(0, 2, 1, 3), [g.transpose(0, 2, 1, 3) for g in grads]


def blocked_forward_and_grads(q, k, v, dout, attn_cfg, **options):
    def run(q, k, v, dout):
        out, pullback = jax.vjp(lambda q, k, v: blocked_attention(q, k, v, attn_cfg, **options), q, k, v)
        return out, pullback(dout)
    return jax.jit(run)(q, k, v, dout)


configs = st.builds(AttentionConfig, kind=st.sampled_from(ATTENTION_KINDS), alpha=st.sampled_from([0.0, 0.5, 1.0, 1.7]),
                    scale=st.sampled_from([1.0, 0.3, 2.5]))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2 ** 31), attn_cfg=configs, length=st.integers(1, 21), heads=st.integers(1, 3),
       head_dim=st.integers(1, 4), block_size=st.integers(1, 24), query_block_size=st.integers(1, 24),
       causal=st.booleans(), causal_length=st.sampled_from(["per_query", "global"]),
       heads_per_step=st.sampled_from([None, 1, "all"]))
def test_blocked_matches_the_numpy_dense_forward_and_backward_in_float64(
        seed, attn_cfg, length, heads, head_dim, block_size, query_block_size, causal, causal_length,
        heads_per_step):
    # Block sizes that divide the length, do not, and exceed it, for keys and queries independently;
    # the B * H = 2 * heads heads one per step, all in one step, or as many as the default picks.
    q, k, v, dout = qkv(seed, 2, length, heads, head_dim)
    expected_out, expected_grads = numpy_dense(q, k, v, dout, attn_cfg, causal, causal_length)
    with jax.enable_x64(True):
        out, grads = blocked_forward_and_grads(q, k, v, dout, attn_cfg, block_size=block_size,
                                               query_block_size=query_block_size, causal=causal,
                                               causal_length=causal_length,
                                               heads_per_step=2 * heads if heads_per_step == "all" else heads_per_step)
        assert out.dtype == jnp.float64
        np.testing.assert_allclose(out, expected_out, rtol=1e-10, atol=1e-12)
        for name, grad, expected in zip("qkv", grads, expected_grads):
            np.testing.assert_allclose(grad, expected, rtol=1e-9, atol=1e-11, err_msg=f"d{name}")


@pytest.mark.parametrize("kind", ["relu", "softmax", "sigmoid_bias"])
def test_float32_and_bfloat16_compute(kind):
    # float32 in, float32 out. With bfloat16 matmul inputs the reference is exact math on the
    # bfloat16-rounded inputs (rounding q and k alone flips the sign of near-zero scores, which moves
    # relu's dq and dk by ~5%); what is left is the rounding of the weight tiles, well under 1%.
    # Dh = 4: q / sqrt(Dh) = q / 2 rounds exactly like q, so the scores keep their signs.
    attn_cfg = AttentionConfig(kind=kind)
    arrays = [x.astype(np.float32) for x in qkv(1, 2, 40, 2, 4, spread=1.0)]
    rounded = [np.asarray(jnp.asarray(x, jnp.bfloat16).astype(jnp.float32), np.float64) for x in arrays]
    for compute_dtype, inputs, tolerance in ((None, arrays, 1e-5), (jnp.bfloat16, rounded, 1e-2)):
        expected_out, expected_grads = numpy_dense(*[x.astype(np.float64) for x in inputs], attn_cfg, True,
                                                   "per_query")
        out, grads = blocked_forward_and_grads(*arrays, attn_cfg, block_size=16, query_block_size=8, causal=True,
                                               compute_dtype=compute_dtype)
        assert out.dtype == jnp.float32 and all(g.dtype == jnp.float32 for g in grads)
        for got, expected in zip([out, *grads], [expected_out, *expected_grads]):
            error = np.linalg.norm(np.asarray(got) - expected) / np.linalg.norm(expected)
            assert error < tolerance, (compute_dtype, error)


@pytest.mark.parametrize("length", [64, 256, 700])
def test_bfloat16_runs_at_lengths_where_tiles_are_single_or_shared_by_heads(length):
    # At some lengths XLA once turned the dq^T matmul into one with a transposed operand, which XLA:CPU
    # can only run on a path without a bfloat16 -> float32 kernel (an UNIMPLEMENTED error at run time).
    # gelu: smooth, so rounding q and k to bfloat16 moves the gradients by ~1% only (relu's kinks: ~5%).
    q, k, v, dout = (np.asarray(x, np.float32) for x in qkv(7, 2, length, 4, 64, spread=0.3))
    out, grads = blocked_forward_and_grads(q, k, v, dout, AttentionConfig(kind="gelu"), compute_dtype=jnp.bfloat16)
    reference_out, reference_grads = blocked_forward_and_grads(q, k, v, dout, AttentionConfig(kind="gelu"))
    for got, expected in zip([out, *grads], [reference_out, *reference_grads]):
        assert np.linalg.norm(np.asarray(got) - expected) <= 3e-2 * np.linalg.norm(expected)


def test_block_size_defaults_come_from_the_config():
    q, k, v, dout = qkv(2, 1, 9, 1, 2, dtype=np.float32)
    from_config = blocked_attention(q, k, v, AttentionConfig(kind="softmax", block_size=2))
    explicit = blocked_attention(q, k, v, AttentionConfig(kind="softmax"), block_size=2)
    np.testing.assert_array_equal(from_config, explicit)


@pytest.mark.parametrize("bad, message", [
    (dict(causal_length="local"), "causal_length must be one of"),
    (dict(block_size=0), "block_size must be a positive int"),
    (dict(query_block_size=-2), "query_block_size must be a positive int"),
    (dict(heads_per_step=3), r"heads_per_step \(3\) must divide batch \* heads \(2\)"),
])
def test_bad_options_are_clear_errors(bad, message):
    q, k, v, _ = qkv(3, 1, 4, 2, 2, dtype=np.float32)
    with pytest.raises(ValueError, match=message):
        blocked_attention(q, k, v, AttentionConfig(), **bad)


# ------------------------------------------------------------------------------------------------ memory

def largest_array_and_temp_bytes(function, length, batch=1, heads=2, head_dim=16):
    """Compile forward + backward of `function` (q, k, v) -> out; return the element count of the largest
    array in the optimised HLO and XLA's temporary-buffer bytes."""
    def forward_backward(q, k, v, dout):
        out, pullback = jax.vjp(function, q, k, v)
        return out, pullback(dout)

    spec = jax.ShapeDtypeStruct((batch, length, heads, head_dim), jnp.float32)
    compiled = jax.jit(forward_backward).lower(spec, spec, spec, spec).compile()
    sizes = [math.prod(int(d) for d in dims.split(",") if d)
             for dims in re.findall(r"\b(?:f|bf|s|u|pred)\d*\[([\d,]*)\]", compiled.as_text())]
    return max(sizes), compiled.memory_analysis().temp_size_in_bytes


@pytest.mark.parametrize("kind, causal", [("relu", False), ("softmax", True)])
def test_blocked_forward_and_backward_hold_no_length_by_length_array(kind, causal):
    length, block = 2048, 128
    attn_cfg = AttentionConfig(kind=kind)
    largest, temp_bytes = largest_array_and_temp_bytes(
        lambda q, k, v: blocked_attention(q, k, v, attn_cfg, block_size=block, query_block_size=block, causal=causal),
        length)
    assert largest <= max(2 * length * 16, 2 * block * block)  # q, k, v themselves or one (B, H, bq, bk) tile
    assert temp_bytes < length * length * 4 / 4  # O(L Dh) buffers, a quarter of one float32 L x L matrix

    def dense(q, k, v):  # the same check sees the L x L weights of the plain form
        weights = jax.nn.relu(jnp.einsum("bqhd,bkhd->bhqk", q, k)) / length
        return jnp.einsum("bhqk,bkhd->bqhd", weights, v)

    largest, temp_bytes = largest_array_and_temp_bytes(dense, length)
    assert largest >= length * length and temp_bytes > length * length * 4


# ----------------------------------------------------------------------- the backend's attention() and model

def public_forward_and_grads(q, k, v, dout, attn_cfg, **options):
    out, pullback = jax.vjp(lambda q, k, v: jb.attention(q, k, v, attn_cfg, **options), q, k, v)
    return out, pullback(dout)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2 ** 31), attn_cfg=configs, length=st.integers(1, 40), block_size=st.integers(1, 48),
       causal=st.booleans(), causal_length=st.sampled_from(["per_query", "global"]))
def test_public_blocked_equals_jax_grad_of_the_dense_path_in_float32(seed, attn_cfg, length, block_size, causal,
                                                                     causal_length):
    # jax.grad of the plain dense formula against the custom VJP, float32 as the model runs it.
    q, k, v, dout = qkv(seed, 2, length, 2, 8, spread=1.0, dtype=np.float32)
    options = dict(causal=causal, causal_length=causal_length)
    dense_out, dense_grads = public_forward_and_grads(q, k, v, dout, attn_cfg, impl="dense", **options)
    out, grads = public_forward_and_grads(q, k, v, dout, attn_cfg, impl="blocked", block_size=block_size, **options)
    for got, expected in zip([out, *grads], [dense_out, *dense_grads]):
        assert got.dtype == jnp.float32
        error = np.linalg.norm(np.asarray(got) - np.asarray(expected)) / max(np.linalg.norm(expected), 1e-30)
        assert error < 2e-5


@pytest.mark.parametrize("kind", ["relu", "softmax", "sigmoid_bias", "gelu"])
@pytest.mark.parametrize("causal_length", ["per_query", "global"])
def test_jax_dense_causal_equals_numpy_dense_causal(kind, causal_length):
    attn_cfg = AttentionConfig(kind=kind, alpha=0.6, scale=1.4)
    q, k, v, dout = qkv(4, 2, 9, 2, 3)
    expected_out, expected_grads = numpy_dense(q, k, v, dout, attn_cfg, True, causal_length)
    with jax.enable_x64(True):
        for impl in ("dense", "blocked"):
            out, grads = public_forward_and_grads(q, k, v, dout, attn_cfg, impl=impl, block_size=4, causal=True,
                                                  causal_length=causal_length)
            np.testing.assert_allclose(out, expected_out, rtol=1e-10, atol=1e-12)
            for grad, expected in zip(grads, expected_grads):
                np.testing.assert_allclose(grad, expected, rtol=1e-9, atol=1e-11)


def test_public_attention_takes_impl_from_the_config_and_returns_causal_weights():
    q, k, v, _ = qkv(5, 1, 6, 2, 4, dtype=np.float32)
    attn_cfg = AttentionConfig(kind="relu", impl="blocked", block_size=2)
    out, weights = jb.attention(q, k, v, attn_cfg, causal=True, return_weights=True)
    expected_out = nb.attention(q, k, v, attn_cfg, causal=True)
    np.testing.assert_allclose(out, expected_out, rtol=1e-5, atol=1e-6)
    assert weights.shape == (1, 2, 6, 6) and not np.any(np.triu(np.asarray(weights), k=1))


@pytest.mark.parametrize("bad, message", [
    (dict(impl="sparse"), "impl must be one of"),
    (dict(block_size=0), "block_size must be a positive int"),
    (dict(causal=1), "causal must be True or False"),
    (dict(causal=True, causal_length="local"), "causal_length must be one of"),
])
def test_public_attention_rejects_bad_options(bad, message):
    q, k, v, _ = qkv(6, 1, 4, 1, 2, dtype=np.float32)
    with pytest.raises(ValueError, match=message):
        jb.attention(q, k, v, AttentionConfig(), **bad)


@pytest.mark.parametrize("kind, qk_norm, gated", [("relu", False, False), ("softmax", True, True),
                                                  ("sigmoid_bias", False, True)])
def test_model_with_blocked_attention_equals_dense(kind, qk_norm, gated):
    # 17 tokens in tiles of 5 keys: padded last tile; logits, loss and every gradient leaf agree.
    def config(impl):
        return ViTConfig(image_size=8, patch_size=2, dim=16, depth=2, heads=2, mlp_dim=16, num_classes=4,
                         attention=AttentionConfig(kind=kind, impl=impl, block_size=5, qk_norm=qk_norm,
                                                   gated=gated))
    params = init_params(config("dense"), seed=3, dtype=np.float32)
    rng = np.random.default_rng(0)
    images, labels = rng.normal(size=(3, 8, 8, 3)).astype(np.float32), np.array([0, 3, 1])
    for impl, uses_the_tiled_kernel in (("dense", False), ("blocked", True)):  # the model really switches
        program = str(jax.make_jaxpr(lambda p, impl=impl: jb.forward(p, images, config(impl)))(params))
        # the tiled custom_vjp of fast/blocked_attention.py
        assert (re.search(r"custom_vjp_call\[\s*name=_core\b", program) is not None) == uses_the_tiled_kernel
    dense_logits = jb.apply(params, images, config("dense"))
    np.testing.assert_allclose(jb.apply(params, images, config("blocked")), dense_logits, rtol=1e-5, atol=1e-5)
    dense_loss, dense_grads = jb.loss_and_grad(params, images, labels, config("dense"))
    blocked_loss, blocked_grads = jb.loss_and_grad(params, images, labels, config("blocked"))
    assert float(blocked_loss) == pytest.approx(float(dense_loss), rel=1e-5)
    for name, grad in flatten(dense_grads).items():
        got = np.asarray(flatten(blocked_grads)[name])
        assert np.linalg.norm(got - grad) <= 1e-4 * max(np.linalg.norm(grad), 1e-6), name
