"""JAX blocked attention (custom_vjp) equals dense attention, forward and gradients, and holds no L x L array.
The equalities run through the testing kit (reluattn.testing: check_blocked, compare_attention), against
the float64 NumPy reference and its hand-written backward."""

import dataclasses
import functools
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import strategies as st

import reluattn.jax_backend as jb
import reluattn.numpy_backend as nb
import reluattn.testing as rt
from reluattn.config import AttentionConfig, ViTConfig
from reluattn.jax_backend.long_sequences import blocked_attention
from reluattn.params import flatten, init_params


def qkv(seed, batch, length, heads, head_dim, spread=1.5, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return tuple((spread * rng.normal(size=(batch, length, heads, head_dim))).astype(dtype) for _ in range(4))


def blocked_forward_and_grads(q, k, v, dout, attn_cfg, **options):
    def run(q, k, v, dout):
        out, pullback = jax.vjp(lambda q, k, v: blocked_attention(q, k, v, attn_cfg, **options), q, k, v)
        return out, pullback(dout)
    return jax.jit(run)(q, k, v, dout)


@functools.partial(jax.jit, static_argnames=("attn_cfg", "block_size", "query_block_size", "causal", "causal_length",
                                             "heads_per_step", "compute_dtype"))
def tiled(q, k, v, attn_cfg, *, heads_per_step=None, **options):
    """blocked_attention in the testing kit's signature; heads_per_step="all": every (batch, head) in one step."""
    if heads_per_step == "all":
        heads_per_step = q.shape[0] * q.shape[2]
    return blocked_attention(q, k, v, attn_cfg, heads_per_step=heads_per_step, **options)


def test_blocked_matches_the_numpy_dense_forward_and_backward_in_float64():
    # The kit's check_blocked: key block sizes that divide the length, do not, and exceed it; query block
    # sizes drawn apart from them; the B * H heads one per step, all in one step, or as many as the default
    # picks; causal masks of both lengths; gradients by jax.vjp against the hand-written backward. The
    # float64 tolerance is named, so a result that is not float64 fails it.
    with jax.enable_x64(True):
        rt.check_blocked(tiled, grad=True, dtype=np.float64, tolerance="float64", max_examples=25,
                         options={"query_block_size": st.integers(1, 24), "heads_per_step": [None, 1, "all"]})


# The bfloat16 tiles keep their float32 sums and round only the matmul inputs: held to a third of the kit's
# bfloat16 allowance (3e-2 of each entry's rounding bound), as tight as this test has always been.
BFLOAT16_TILES = dataclasses.replace(rt.TOLERANCES["bfloat16"], name="bfloat16 tiles", rtol=1e-2)


@pytest.mark.parametrize("kind", ["relu", "softmax", "sigmoid_bias"])
def test_float32_and_bfloat16_compute(kind):
    # float32 in, float32 out. With bfloat16 matmul inputs the reference is exact math on the
    # bfloat16-rounded inputs (rounding q and k alone flips the sign of near-zero scores, which moves
    # relu's dq and dk by ~5%); what is left is the rounding of the weight tiles, well under 1%.
    # Dh = 4: q / sqrt(Dh) = q / 2 rounds exactly like q, so the scores keep their signs.
    shape = rt.AttentionShape(batch=2, queries=40, keys=40, heads=2, head_dim=4)
    for compute_dtype, rounding, tolerance in ((None, np.float32, "float32"),
                                               (jnp.bfloat16, "bfloat16", BFLOAT16_TILES)):
        rounded = rt.make_inputs(shape, "normal", seed=1, dtype=rounding)
        inputs = rounded._replace(**{name: getattr(rounded, name).astype(np.float32)
                                     for name in ("q", "k", "v", "dout")})
        case = rt.AttentionCase(inputs, AttentionConfig(kind=kind), causal=True, block_size=16,
                                extra=(("query_block_size", 8), ("compute_dtype", compute_dtype)))
        rt.compare_attention(tiled, case, grad=True, tolerance=tolerance)
        out, pullback = jax.vjp(lambda q, k, v: tiled(q, k, v, case.attn_cfg, **case.options()), *inputs[:3])
        assert out.dtype == jnp.float32 and all(g.dtype == jnp.float32 for g in pullback(out))


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


PADDING_MASK = np.arange(2048)[None, None, None, :] < 1500  # (1, 1, 1, L): 1500 real keys


@pytest.mark.parametrize("kind, hiding", [
    ("relu", {}), ("softmax", {"causal": True}),
    ("relu", {"window": (256, 0), "key_lengths": np.array([1500])}),  # hidden by position: nothing stored
    ("softmax", {"mask": PADDING_MASK}),  # a padding mask is stored per head as (1, L), never L x L
])
def test_blocked_forward_and_backward_hold_no_length_by_length_array(kind, hiding):
    length, block = 2048, 128
    attn_cfg = AttentionConfig(kind=kind)
    largest, temp_bytes = largest_array_and_temp_bytes(
        lambda q, k, v: blocked_attention(q, k, v, attn_cfg, block_size=block, query_block_size=block, **hiding),
        length)
    assert largest <= max(2 * length * 16, 2 * block * block)  # q, k, v themselves or one (B, H, bq, bk) tile
    assert temp_bytes < length * length * 4 / 4  # O(L Dh) buffers, a quarter of one float32 L x L matrix

    def dense(q, k, v):  # the same check sees the L x L weights of the plain form
        weights = jax.nn.relu(jnp.einsum("bqhd,bkhd->bhqk", q, k)) / length
        return jnp.einsum("bhqk,bkhd->bqhd", weights, v)

    largest, temp_bytes = largest_array_and_temp_bytes(dense, length)
    assert largest >= length * length and temp_bytes > length * length * 4


# ----------------------------------------------------------------------- the backend's attention() and model

def public_blocked(q, k, v, attn_cfg, **options):
    return jb.attention(q, k, v, attn_cfg, impl="blocked", **options)


def test_public_blocked_attention_in_float32():
    # The custom VJP in float32, as the model runs it, against the reference (jb.attention's dense path is
    # held to the same reference by tests/testing_kit); lengths up to 40, tiles dividing them or not.
    rt.check_blocked(public_blocked, grad=True, tolerance="float32",
                     shapes=rt.attention_shapes(lengths=st.integers(1, 40)), max_examples=10)


@pytest.mark.parametrize("kind", ["relu", "softmax", "sigmoid_bias", "gelu"])
@pytest.mark.parametrize("causal_length", ["per_query", "global"])
def test_jax_dense_causal_equals_numpy_dense_causal(kind, causal_length):
    inputs = rt.make_inputs(rt.AttentionShape(batch=2, queries=9, keys=9, heads=2, head_dim=3), "normal", seed=4,
                            dtype=np.float64)
    attn_cfg = AttentionConfig(kind=kind, alpha=0.6, scale=1.4)
    with jax.enable_x64(True):
        for impl in ("dense", "blocked"):
            case = rt.AttentionCase(inputs, attn_cfg, causal=True, causal_length=causal_length, block_size=4,
                                    extra=(("impl", impl),))
            rt.compare_attention(jb.attention, case, grad=True, tolerance="float64")


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
