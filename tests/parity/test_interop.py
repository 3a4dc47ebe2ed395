"""The drop-in: jax_backend.dot_product_attention (jax.nn.dot_product_attention's arguments) and attention_fn
(Flax's attention_fn), against jax.nn, reluattn's own attention and the NumPy reference; then inside real
Flax NNX and Linen blocks (the `interop` extra: those tests are skipped, with the reason, without it)."""

from __future__ import annotations

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reluattn.testing as rt
from reluattn import numpy_backend
from reluattn.config import ATTENTION_KINDS, AttentionConfig, ViTConfig
from reluattn.jax_backend import attention, attention_fn, dot_product_attention
from reluattn.jax_backend import model as jax_model
from reluattn.jax_backend import interop
from reluattn.testing import compiling, relative_error

# Example counts: every example runs the drop-in on a new kind, alpha or shape, and what is new compiles (the
# eager operations once per shape, the jitted kernels once per config); the shapes are drawn from small fixed
# sets so that the operations compile once and the examples' time goes to the values. The per-kind maths
# is the reference's own (held equal to NumPy for every kind in tests/parity/test_jax_vs_numpy.py): what
# these add is the drop-in's argument mapping, the same code for every kind.
few_examples = settings(compiling, max_examples=15)
KIT_SHAPES = rt.attention_shapes(batch=[1, 2], heads=2, lengths=[1, 6, 11], head_dims=[1, 4])
FLAX_MISSING = "flax is not installed: the interop tests need the extra, pip install -e '.[interop]'"


def drop_in_as_core(implementation):
    """The drop-in in the testing kit's attention signature, fn(q, k, v, attn_cfg, causal=, causal_length=)."""
    def core(q, k, v, attn_cfg, causal=False, causal_length="per_query"):
        assert causal_length == "per_query"  # the drop-in's L under is_causal is each query's own count
        return dot_product_attention(q, k, v, kind=attn_cfg.kind, alpha=attn_cfg.alpha, weight_scale=attn_cfg.scale,
                                     is_causal=causal, implementation=implementation)
    return core


# ------------------------------------------------------------------------ against reluattn's own attention

@pytest.mark.parametrize("implementation", ["dense", "blocked"])
def test_every_kind_matches_the_reference_with_and_without_causal_masks(implementation):
    rt.check_attention(drop_in_as_core(implementation), causal=True, causal_lengths=("per_query",), shapes=KIT_SHAPES,
                       max_examples=8, settings=compiling)


def test_gradients_match_the_reference():
    rt.check_attention_grad(drop_in_as_core("dense"), kinds=["relu", "softmax", "sigmoid_bias"], causal=True,
                            causal_lengths=("per_query",), shapes=KIT_SHAPES, max_examples=6, settings=compiling)


# (batch, queries, keys, key/value heads, query heads per key/value head, head width): the edge cases (one
# query, one key, width 1, more keys than queries and fewer, grouped-query heads) as a fixed set, since the
# drop-in's operations compile once per shape: drawn from 2,304 shapes, nearly every example compiled anew.
MASKED_SHAPES = [(1, 1, 1, 1, 1, 1), (2, 6, 6, 2, 2, 8), (1, 3, 6, 1, 2, 4), (2, 6, 3, 2, 1, 3), (2, 5, 1, 1, 1, 2),
                 (1, 4, 5, 2, 2, 1)]


@st.composite
def masked_cases(draw, kinds):
    """Random q, k, v (grouped-query heads too), bias, boolean mask and causal flag, with the drop-in's options."""
    batch, queries, keys, kv_heads, group, head_dim = draw(st.sampled_from(MASKED_SHAPES))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    q = rng.normal(size=(batch, queries, kv_heads * group, head_dim)).astype(np.float32)
    k, v = (rng.normal(size=(batch, keys, kv_heads, head_dim)).astype(np.float32) for _ in range(2))
    heads = kv_heads * group
    bias_shape = draw(st.sampled_from([None, (batch, heads, queries, keys), (1, 1, queries, keys)]))
    bias = None if bias_shape is None else rng.normal(size=bias_shape).astype(np.float32)
    mask_shape = draw(st.sampled_from([None, (batch, heads, queries, keys), (batch, 1, 1, keys)]))
    mask = None if mask_shape is None else rng.random(mask_shape) < draw(st.sampled_from([0.3, 0.7, 1.0]))
    options = dict(kind=draw(st.sampled_from(kinds)), is_causal=draw(st.booleans()),
                   scale=draw(st.sampled_from([None, 0.3, 1.7])))
    return q, k, v, bias, mask, options


@few_examples
@given(case=masked_cases(["softmax"]))
def test_softmax_kind_is_jax_nn_dot_product_attention(case):
    q, k, v, bias, mask, options = case
    expected = jax.nn.dot_product_attention(q, k, v, bias, mask, scale=options["scale"], is_causal=options["is_causal"])
    actual = dot_product_attention(q, k, v, bias, mask, **options)
    assert relative_error(actual, expected) <= 1e-5


@few_examples
@given(case=masked_cases(list(ATTENTION_KINDS)), alpha=st.floats(0.0, 2.0), weight_scale=st.sampled_from([1.0, 0.5]))
def test_every_kind_matches_the_numpy_reference_under_masks_and_biases(case, alpha, weight_scale):
    q, k, v, bias, mask, options = case
    expected = numpy_backend.dot_product_attention(q, k, v, bias, mask, alpha=alpha, weight_scale=weight_scale,
                                                   **options)
    actual = dot_product_attention(q, k, v, bias, mask, alpha=alpha, weight_scale=weight_scale, **options)
    assert relative_error(actual, expected) <= 2e-5


def random_qkv(shape, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(jnp.asarray(rng.normal(size=shape), jnp.float32) for _ in range(3))


@pytest.mark.parametrize("kind", ["relu", "sigmoid_bias"])
def test_masked_keys_neither_weigh_nor_count_in_L(kind):
    """Padding keys away (a mask, or key_value_seq_lengths) gives attention over the real keys alone: L is the
    number of real keys, not the padded length."""
    q, k, v = random_qkv((2, 5, 3, 4))
    real = [3, 5]
    mask = jnp.arange(5)[None, None, None, :] < jnp.asarray(real)[:, None, None, None]  # (B, 1, 1, S)
    by_mask = dot_product_attention(q, k, v, mask=mask, kind=kind)
    by_lengths = dot_product_attention(q, k, v, kind=kind, key_value_seq_lengths=jnp.asarray(real, jnp.int32))
    for b, length in enumerate(real):
        alone = dot_product_attention(q[b:b + 1], k[b:b + 1, :length], v[b:b + 1, :length], kind=kind)
        assert relative_error(by_mask[b:b + 1], alone) <= 1e-6
        assert relative_error(by_lengths[b:b + 1], alone) <= 1e-6
    unmasked = dot_product_attention(q, k, v, kind=kind)
    assert relative_error(by_mask[:1], unmasked[:1]) > 1e-2  # the mask changed something


def test_under_is_causal_L_is_each_querys_visible_keys():
    q, k, v = random_qkv((1, 6, 2, 4), seed=1)
    out = dot_product_attention(q, k, v, is_causal=True)
    for i in range(6):  # query i alone, over keys 0..i: relu / (i + 1)
        alone = dot_product_attention(q[:, i:i + 1], k[:, :i + 1], v[:, :i + 1])
        assert relative_error(out[:, i:i + 1], alone) <= 1e-6
    assert relative_error(out, attention(q, k, v, AttentionConfig(), causal=True)) <= 1e-6


def test_sequence_lengths_and_windows_match_jax_nn_for_softmax():
    q, k, v = random_qkv((2, 7, 2, 4), seed=2)
    options = dict(query_seq_lengths=jnp.asarray([5, 7], jnp.int32),
                   key_value_seq_lengths=jnp.asarray([3, 6], jnp.int32), local_window_size=(2, 1))
    expected = jax.nn.dot_product_attention(q, k, v, **options)
    assert relative_error(dot_product_attention(q, k, v, kind="softmax", **options), expected) <= 1e-6
    relu = dot_product_attention(q, k, v, **options)
    assert float(jnp.abs(relu[0, 5:]).max()) == 0.0  # padded queries read nothing, as in jax.nn


def test_implementation_none_picks_the_blocked_kernel_for_long_plain_inputs_only(monkeypatch):
    calls = []
    real_blocked = interop.blocked_attention

    def recording(*args, **kwargs):
        calls.append(args[0].shape)
        return real_blocked(*args, **kwargs)

    monkeypatch.setattr(interop, "blocked_attention", recording)
    long = interop.BLOCKED_FROM_KEYS
    q, k, v = random_qkv((1, long, 1, 4))
    out = dot_product_attention(q, k, v, is_causal=True)
    assert calls == [(1, long, 1, 4)]
    assert relative_error(out, dot_product_attention(q, k, v, is_causal=True, implementation="dense")) <= 1e-5
    dot_product_attention(q, k, v, mask=jnp.ones((1, 1, long, long), bool))  # a mask needs dense
    dot_product_attention(q[:, :8], k[:, :8], v[:, :8])  # short: dense
    assert len(calls) == 1


def test_values_may_be_wider_than_queries_as_in_flax():
    q, k, _ = random_qkv((2, 5, 2, 4), seed=3)
    v = jax.random.normal(jax.random.key(4), (2, 5, 2, 6))
    out = dot_product_attention(q, k, v, is_causal=True)
    assert out.shape == (2, 5, 2, 6)
    assert relative_error(out, numpy_backend.dot_product_attention(q, k, v, is_causal=True)) <= 1e-5


def test_clear_errors():
    q, k, v = random_qkv((1, 4, 2, 4))
    with pytest.raises(NotImplementedError, match="return_residual"):
        dot_product_attention(q, k, v, return_residual=True)
    with pytest.raises(ValueError, match="implementation must be"):
        dot_product_attention(q, k, v, implementation="cudnn")
    with pytest.raises(ValueError, match="does not support this call"):
        dot_product_attention(q, k, v, alpha=jnp.asarray(1.0), implementation="blocked")  # an array alpha
    if jax.default_backend() != "gpu":
        with pytest.raises(ValueError, match="'pallas' needs a GPU"):
            dot_product_attention(q, k, v, implementation="pallas")
    with pytest.raises(ValueError, match="N a multiple of K"):
        dot_product_attention(q, k[:, :, :1].repeat(3, axis=2), v[:, :, :1].repeat(3, axis=2))
    with pytest.raises(ValueError, match="kind"):
        attention_fn("rleu")
    with pytest.raises(ValueError, match="dropout_rng"):
        attention_fn("relu")(q, k, v, dropout_rate=0.1)


def test_the_package_never_imports_flax():
    code = ("import sys, jax.numpy as jnp, reluattn.jax_backend as jb\n"
            "q = jnp.ones((1, 3, 2, 4)); jb.attention_fn('relu')(q, q, q); jb.dot_product_attention(q, q, q)\n"
            "assert not {'flax', 'equinox'} & {name.split('.')[0] for name in sys.modules}, 'flax was imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)  # reluattn as installed


# ---------------------------------------------------------------- inside Flax (the interop extra)

def reluattn_block_params(ln1, query, key, value, out, ln2, fc1, fc2):
    """reluattn's block parameters from Flax's: each argument a {"kernel"/"scale": ..., "bias": ...} dict. The
    fused qkv columns are [q | k | v], head h's entries at h * Dh + i, Flax's (D, H, Dh) kernels flattened."""
    dim = query["kernel"].shape[0]

    def flat(p, rows):
        return {"w": jnp.reshape(p["kernel"], (rows, -1)), "b": jnp.reshape(p["bias"], (-1,))}
    qkv = [flat(p, dim) for p in (query, key, value)]
    return {"ln1": dict(ln1), "ln2": dict(ln2),
            "attn": {"qkv": {"w": jnp.concatenate([p["w"] for p in qkv], axis=1),
                             "b": jnp.concatenate([p["b"] for p in qkv])},
                     "proj": flat(out, dim)},
            "mlp": {"fc1": flat(fc1, dim), "fc2": flat(fc2, fc1["kernel"].shape[1])}}


def moved(tree, seed):
    """Every leaf moved off its initial value (zero biases and unit scales would hide wiring mistakes)."""
    leaves, treedef = jax.tree.flatten(tree)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    return jax.tree.unflatten(treedef, [leaf + 0.3 * jax.random.normal(key, leaf.shape, leaf.dtype)
                                        for leaf, key in zip(leaves, keys)])


DIM, HEADS, MLP_DIM = 16, 2, 32
KINDS_IN_BLOCKS = [("relu", 1.0), ("relu", 0.5), ("softmax", 1.0)]


def nnx_block_class():
    nnx = pytest.importorskip("flax.nnx", reason=FLAX_MISSING)

    class Block(nnx.Module):
        """A pre-LN ViT block, as a Flax user writes it."""

        def __init__(self, attention_function, rngs):
            self.ln1, self.ln2 = nnx.LayerNorm(DIM, rngs=rngs), nnx.LayerNorm(DIM, rngs=rngs)
            self.attn = nnx.MultiHeadAttention(HEADS, DIM, attention_fn=attention_function, decode=False, rngs=rngs)
            self.fc1, self.fc2 = nnx.Linear(DIM, MLP_DIM, rngs=rngs), nnx.Linear(MLP_DIM, DIM, rngs=rngs)

        def __call__(self, x, sow_weights=False):
            x = x + self.attn(self.ln1(x), sow_weights=sow_weights)
            return x + self.fc2(nnx.gelu(self.fc1(self.ln2(x))))
    return nnx, Block


@pytest.mark.parametrize("kind, alpha", KINDS_IN_BLOCKS)
def test_flax_nnx_block_with_the_drop_in_is_reluattns_block(kind, alpha):
    nnx, Block = nnx_block_class()
    block = Block(attention_fn(kind, alpha=alpha), nnx.Rngs(0))
    nnx.update(block, moved(nnx.state(block, nnx.Param), seed=1))
    x = jax.random.normal(jax.random.key(2), (3, 9, DIM))
    p = nnx.to_pure_dict(nnx.state(block, nnx.Param))
    params = reluattn_block_params(p["ln1"], p["attn"]["query"], p["attn"]["key"], p["attn"]["value"],
                                   p["attn"]["out"], p["ln2"], p["fc1"], p["fc2"])
    cfg = ViTConfig(dim=DIM, heads=HEADS, mlp_dim=MLP_DIM, attention=AttentionConfig(kind=kind, alpha=alpha))
    expected, _ = jax_model.block(x, params, cfg)
    assert relative_error(block(x), expected) <= 1e-5


@pytest.mark.parametrize("kind, alpha", KINDS_IN_BLOCKS)
def test_flax_linen_block_with_the_drop_in_is_reluattns_block(kind, alpha):
    nn = pytest.importorskip("flax.linen", reason=FLAX_MISSING)

    class Block(nn.Module):
        attention_function: object

        @nn.compact
        def __call__(self, x):
            x = x + nn.MultiHeadDotProductAttention(HEADS, attention_fn=self.attention_function, name="attn")(
                nn.LayerNorm(name="ln1")(x))
            return x + nn.Dense(DIM, name="fc2")(nn.gelu(nn.Dense(MLP_DIM, name="fc1")(nn.LayerNorm(name="ln2")(x))))

    block = Block(attention_fn(kind, alpha=alpha))
    x = jax.random.normal(jax.random.key(2), (3, 9, DIM))
    variables = {"params": moved(block.init(jax.random.key(0), x)["params"], seed=1)}
    p = variables["params"]
    params = reluattn_block_params(p["ln1"], p["attn"]["query"], p["attn"]["key"], p["attn"]["value"],
                                   p["attn"]["out"], p["ln2"], p["fc1"], p["fc2"])
    cfg = ViTConfig(dim=DIM, heads=HEADS, mlp_dim=MLP_DIM, attention=AttentionConfig(kind=kind, alpha=alpha))
    expected, _ = jax_model.block(x, params, cfg)
    assert relative_error(block.apply(variables, x), expected) <= 1e-5


def test_softmax_attention_fn_is_flaxs_own_with_masks_dropout_and_sown_weights():
    """With kind="softmax", Flax's keywords (mask, dropout from the same rng, sow_weights) give Flax's results."""
    nnx = pytest.importorskip("flax.nnx", reason=FLAX_MISSING)
    outputs, sown = [], []
    for function in (nnx.dot_product_attention, attention_fn("softmax")):
        layer = nnx.MultiHeadAttention(HEADS, DIM, attention_fn=function, dropout_rate=0.3, decode=False,
                                       rngs=nnx.Rngs(0, dropout=5))
        x = jax.random.normal(jax.random.key(2), (2, 7, DIM))
        mask = jax.random.bernoulli(jax.random.key(3), 0.6, (2, 1, 7, 7))
        outputs.append(layer(x, mask=mask, deterministic=False, sow_weights=True))
        sown.append(jax.tree.leaves(nnx.state(layer, nnx.Intermediate))[0])
    assert relative_error(outputs[1], outputs[0]) <= 1e-5
    assert relative_error(sown[1], sown[0]) <= 1e-5


def test_an_nnx_model_switches_to_relu_by_one_argument_and_trains():
    """A small NNX ViT on CIFAR-shaped random images: attention_fn=attention_fn("relu") is the only change
    from softmax, it changes the output, and nnx.grad trains through it (the loss falls)."""
    nnx, Block = nnx_block_class()
    optax = pytest.importorskip("optax")

    class TinyViT(nnx.Module):
        def __init__(self, rngs, attention_function=nnx.dot_product_attention):
            self.patches = nnx.Conv(3, DIM, kernel_size=(8, 8), strides=(8, 8), rngs=rngs)  # 16 tokens
            self.block = Block(attention_function, rngs)
            self.head = nnx.Linear(DIM, 10, rngs=rngs)

        def __call__(self, images):
            tokens = self.patches(images).reshape(images.shape[0], -1, DIM)  # (B, 16, D)
            return self.head(self.block(tokens).mean(axis=1))  # (B, 10)

    images = jax.random.normal(jax.random.key(0), (16, 32, 32, 3))
    labels = jax.random.randint(jax.random.key(1), (16,), 0, 10)
    softmax_model = TinyViT(nnx.Rngs(0))
    model = TinyViT(nnx.Rngs(0), attention_function=attention_fn("relu"))  # the one argument
    assert relative_error(model(images), softmax_model(images)) > 1e-3

    def loss_fn(model):
        return optax.softmax_cross_entropy_with_integer_labels(model(images), labels).mean()

    optimizer = nnx.Optimizer(model, optax.adam(3e-3), wrt=nnx.Param)

    @nnx.jit
    def step(model, optimizer):
        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss, grads

    first_loss, grads = step(model, optimizer)
    assert float(jnp.abs(grads["block"]["attn"]["query"]["kernel"][...]).max()) > 0  # through the drop-in
    for _ in range(14):
        loss, _ = step(model, optimizer)
    assert float(loss) < 0.8 * float(first_loss), (float(first_loss), float(loss))


def test_attention_fn_reads_flax_float_masks_as_flax_does():
    """Linen's nn.make_attention_mask gives float32 0/1 masks; attention_fn reads them as Flax does (attend
    where nonzero) and gives the bool mask's answer, while the jax.nn-signature drop-in refuses float masks."""
    import jax.numpy as jnp
    import numpy as np
    from reluattn.jax_backend import attention_fn, dot_product_attention
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.standard_normal((2, 5, 2, 4)), jnp.float32) for _ in range(3))
    keep = jnp.asarray(rng.random((2, 1, 5, 5)) > 0.3)
    fn = attention_fn("relu")
    np.testing.assert_allclose(fn(q, k, v, mask=keep.astype(jnp.float32)), fn(q, k, v, mask=keep), rtol=1e-6)
    with pytest.raises(ValueError, match="pass an additive mask as `bias=`"):
        dot_product_attention(q, k, v, mask=keep.astype(jnp.float32), kind="relu")
