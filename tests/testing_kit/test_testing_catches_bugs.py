"""reluattn.testing catches broken implementations, each with a report that says where, what was expected
and what came: a wrong relu derivative at 0, 1/L instead of L^-alpha, softmax without max-subtraction, a
dropped 1/sqrt(Dh), transposed k, an off-by-one causal mask, a blocked kernel that drops its last partial
tile. And it passes the same implementation without the bug (so what is caught is the bug).

The implementations are small NumPy ones (no compilation: many draws cost little); one JAX one shows the
jax.vjp path catching the derivative jnp.maximum gives at the kink (1/2 where relu' = 0).
"""

import math

import numpy as np
import pytest

import reluattn.testing as rt

BUGS = ("relu_derivative_at_zero", "one_over_L", "softmax_overflow", "no_inv_sqrt_dh", "transposed_k",
        "causal_off_by_one", "drops_last_tile")


def attention(q, k, v, attn_cfg, *, causal=False, causal_length="per_query", block_size=None, bug=None):
    """relu / L^alpha and softmax attention, (B, T, H, Dh) -> (B, T, H, Dh), with one bug switched on."""
    head_dim, num_queries, num_keys = q.shape[-1], q.shape[1], k.shape[1]
    scores = np.einsum("bkhd,bqhd->bhqk" if bug == "transposed_k" else "bqhd,bkhd->bhqk", q, k)  # (B, H, T, L)
    if bug != "no_inv_sqrt_dh":
        scores = scores / math.sqrt(head_dim)
    reach = 1 if bug == "causal_off_by_one" else 0  # query i sees keys j <= i (+ 1 with the bug)
    visible = np.arange(num_keys)[None, :] <= np.arange(num_queries)[:, None] + reach if causal else \
        np.ones((num_queries, num_keys), bool)  # (T, L)
    counts = visible.sum(axis=-1, keepdims=True) if causal and causal_length == "per_query" else num_keys  # (T, 1)
    if attn_cfg.kind == "softmax":
        shift = 0.0 if bug == "softmax_overflow" else np.max(np.where(visible, scores, -np.inf), -1, keepdims=True)
        with np.errstate(over="ignore", invalid="ignore"):
            exps = np.where(visible, np.exp(scores - shift), 0.0)  # (B, H, T, L)
            weights = exps / exps.sum(axis=-1, keepdims=True)
    else:
        exponent = 1.0 if bug == "one_over_L" else attn_cfg.alpha
        weights = attn_cfg.scale * np.power(counts, -exponent) * np.maximum(scores, 0.0) * visible  # (B, H, T, L)
    if block_size is not None:  # a blocked read of the keys: the tiles' partial sums
        last = num_keys - num_keys % block_size if bug == "drops_last_tile" else num_keys
        starts = range(0, last, block_size)
        out = sum((np.einsum("bhqk,bkhd->bqhd", weights[..., s:s + block_size], v[:, s:s + block_size])
                   for s in starts), np.zeros(q.shape))  # (B, T, H, Dh)
        return out.astype(q.dtype)
    return np.einsum("bhqk,bkhd->bqhd", weights, v).astype(q.dtype)  # (B, T, H, Dh)


def relu_vjp(bug=None):
    """Hand-written backward of relu / L^alpha, relu'(0) = 1 with the bug (s >= 0 instead of s > 0)."""
    def vjp(q, k, v, attn_cfg, dout, **options):
        q, k, v, dout = (x.astype(np.float64) for x in (q, k, v, dout))
        inv_sqrt_dh = 1.0 / math.sqrt(q.shape[-1])
        scores = np.einsum("bqhd,bkhd->bhqk", q, k) * inv_sqrt_dh  # (B, H, T, L)
        factor = attn_cfg.scale * k.shape[1] ** -attn_cfg.alpha
        weights = factor * np.maximum(scores, 0.0)
        derivative = (scores >= 0) if bug == "relu_derivative_at_zero" else (scores > 0)
        dweights = np.einsum("bqhd,bkhd->bhqk", dout, v)  # (B, H, T, L)
        dscores = factor * derivative * dweights
        return (np.einsum("bhqk,bkhd->bqhd", dscores, k) * inv_sqrt_dh,
                np.einsum("bhqk,bqhd->bkhd", dscores, q) * inv_sqrt_dh,
                np.einsum("bhqk,bqhd->bkhd", weights, dout))
    return vjp


def catch(check, *args, **options):
    """The report of a check that must fail."""
    with pytest.raises(AssertionError) as caught:
        check(*args, **options)
    message = str(caught.value)
    assert "expected" in message and "got" in message and " at " in message, message  # what and where
    assert "case: kind=" in message, message  # which drawn case
    return message


def with_bug(bug):
    return lambda q, k, v, attn_cfg, **options: attention(q, k, v, attn_cfg, bug=bug, **options)


@pytest.mark.parametrize("bug", [None, "one_over_L", "softmax_overflow", "no_inv_sqrt_dh", "transposed_k"])
def test_forward_bugs_are_caught_and_the_fixed_code_passes(bug):
    kinds = ["softmax"] if bug == "softmax_overflow" else ["relu", "softmax"] if bug in (None, "transposed_k") \
        else ["relu"]
    profiles = ["large_scores"] if bug == "softmax_overflow" else rt.INPUT_PROFILES
    if bug is None:
        rt.check_attention(with_bug(None), kinds=["relu", "softmax"], causal=True, max_examples=60)
        rt.check_blocked(with_bug(None), kinds=["relu", "softmax"], max_examples=60)
        return
    message = catch(rt.check_attention, with_bug(bug), kinds=kinds, profiles=profiles, max_examples=60)
    assert message.startswith("output:")
    if bug == "one_over_L":
        assert "1/L where L^-alpha is meant" in message
    if bug == "no_inv_sqrt_dh":
        assert "a dropped 1/sqrt(Dh)" in message
    if bug == "softmax_overflow":
        assert "NaN or infinite (an overflow?)" in message


def test_off_by_one_causal_mask_is_caught_only_when_causal_cases_are_asked_for():
    rt.check_attention(with_bug("causal_off_by_one"), kinds=["relu"], causal=False, max_examples=20)
    message = catch(rt.check_attention, with_bug("causal_off_by_one"), kinds=["relu", "softmax"], causal=True,
                    max_examples=60)
    assert "causal=True" in message


def test_blocked_kernel_dropping_its_last_partial_tile_is_caught():
    message = catch(rt.check_blocked, with_bug("drops_last_tile"), kinds=["relu"], max_examples=60)
    assert "block_size=" in message and "feature" in message


def test_wrong_relu_derivative_at_zero_is_caught_on_exact_zero_scores():
    rt.check_attention_grad(vjp=relu_vjp(), kinds=["relu"], max_examples=40)  # the right one passes, kinks too
    message = catch(rt.check_attention_grad, vjp=relu_vjp("relu_derivative_at_zero"), kinds=["relu"],
                    profiles=["kinks"], max_examples=40)
    # caught on the fixed edge inputs, before any draw
    assert "gradient d" in message and "inputs 'edge'" in message and "exactly on a kink of relu" in message


def test_jnp_maximum_derivative_at_zero_is_caught_through_jax_vjp():
    jnp = pytest.importorskip("jax.numpy")  # jax is a dependency of reluattn; here for the worked example's shape

    def relu_attention(q, k, v, attn_cfg, maximum=jnp.maximum):
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
        weights = attn_cfg.scale * k.shape[1] ** -attn_cfg.alpha * maximum(scores, 0.0)
        return jnp.einsum("bhqk,bkhd->bqhd", weights, v)

    from hypothesis import strategies as st
    shapes = rt.attention_shapes(batch=1, heads=2, lengths=5, head_dims=2)  # one shape: JAX compiles each op once
    import jax
    rt.check_attention_grad(lambda *args: relu_attention(*args, maximum=lambda s, _: jax.nn.relu(s)), kinds=["relu"],
                            profiles=["kinks"], shapes=shapes, max_examples=5)  # relu'(0) = 0 passes
    message = catch(rt.check_attention_grad, relu_attention, kinds=["relu"], profiles=["kinks"], shapes=shapes,
                    max_examples=10)
    assert "gradient d" in message and "jnp.maximum(s, 0) gives 1/2" in message


def test_a_train_step_without_weight_decay_is_caught_despite_the_update_allowance():
    # AdamW's division by sqrt(nu) frees the update of entries whose gradient is rounding noise; the decay
    # term moves every entry by lr * weight_decay * p, which must still show.
    import reluattn as ra
    nb = ra.backend("numpy")

    class NoWeightDecay:
        apply, loss_and_grad, init_optimizer = nb.apply, nb.loss_and_grad, nb.init_optimizer

        @staticmethod
        def train_step(params, opt_state, images, labels, cfg, opt_cfg):
            return nb.train_step(params, opt_state, images, labels, cfg, opt_cfg.replace(weight_decay=0.0))

    with pytest.raises(AssertionError, match=r"train_step \d: parameter update \(new - initial\) \S+: \d+ of \d+ "
                                             r"entries differ .*\n  expected \S+, got \S+"):
        rt.check_backend(NoWeightDecay, max_examples=30)
