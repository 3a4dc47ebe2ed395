"""reluattn.grading: every checker passes reluattn's own implementation, fails typical wrong answers with
the message that names the mistake, and its finite-difference tools are right."""

from __future__ import annotations

import math

import numpy as np
import pytest

from reluattn import grading
from reluattn.config import AttentionConfig
from reluattn.grading import ExerciseFailed
from reluattn.numpy_backend import attention_weights, layers, mlp, model, multihead_attention


def fails_with(checker, student, *fragments):
    with pytest.raises(ExerciseFailed) as failure:
        checker(student)
    message = str(failure.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in:\n{message}"
    return message


# ------------------------------------------------------------------------------ the reference passes

@pytest.mark.parametrize("checker, reference", [
    (grading.check_dense_backward, layers.dense_backward),
    (grading.check_layernorm_backward, layers.layernorm_backward),
    (grading.check_gelu_backward, layers.gelu_backward),
    (grading.check_softmax_backward, layers.softmax_backward),
    (grading.check_attention_weights_backward, attention_weights.attention_weights_backward),
    (grading.check_attention_core_backward, multihead_attention.heads_attention_backward),
    (grading.check_self_attention_backward, multihead_attention.self_attention_backward),
    (grading.check_block_backward, model.block_backward),
    (grading.check_pointwise_weights, lambda scores, alpha, scale: scale * scores.shape[-1] ** -alpha
     * np.maximum(scores, 0)),
    (grading.check_expected_activation, grading.expected_activation),
    (grading.check_output_variance, grading.output_variance),
    (grading.check_memory_read, grading.memory_read),
    (grading.check_top_share, grading.top_share),
], ids=lambda item: getattr(item, "__name__", ""))
def test_reluattn_itself_passes(checker, reference, capsys):
    checker(reference)
    assert capsys.readouterr().out.startswith("\N{CHECK MARK}")


def test_gradient_errors_are_returned_and_tiny():
    errors = grading.check_layernorm_backward(layers.layernorm_backward)
    assert set(errors) == {"dx", "grads['scale']", "grads['bias']"}
    assert max(errors.values()) < 1e-8


# ------------------------------------------------------------------------ unfinished answers

def test_a_blank_and_a_bare_ellipsis_are_named():
    def blank(dout, cache):
        raise NotImplementedError("your code here")

    fails_with(grading.check_softmax_backward, blank, "softmax_backward is not written yet", "your code here")
    fails_with(grading.check_softmax_backward, lambda dout, cache: ..., "returned Ellipsis")
    fails_with(grading.check_softmax_backward, lambda dout, cache: None, "returned None")


def test_an_exception_in_the_students_code_is_reported_with_its_type():
    fails_with(grading.check_dense_backward, lambda dout, cache: cache[0] @ cache[0], "raised ValueError")


# --------------------------------------------------------------------------- named mistakes

def test_layernorm_slips_are_named():
    def without_mean_term(dout, cache):
        x_hat, inv_std, scale = cache
        dx_hat = dout * scale
        dx = inv_std * (dx_hat - x_hat * (dx_hat * x_hat).mean(-1, keepdims=True))
        return dx, layers.layernorm_backward(dout, cache)[1]

    def constants(dout, cache):
        x_hat, inv_std, scale = cache
        return dout * scale * inv_std, layers.layernorm_backward(dout, cache)[1]

    def unsummed(dout, cache):
        return layers.layernorm_backward(dout, cache)[0], {"scale": dout * cache[0], "bias": dout}

    fails_with(grading.check_layernorm_backward, without_mean_term, "the mean depends on x too")
    fails_with(grading.check_layernorm_backward, constants, "treats the mean and the variance as constants")
    fails_with(grading.check_layernorm_backward, unsummed, "grads['scale'] has shape (3, 4, 6), expected (6,)",
               "sum over the batch and token axes")


def test_dense_slips_are_named():
    def transposed_and_averaged(dout, cache):
        x, w = cache
        rows_in, rows_out = x.reshape(-1, 5), dout.reshape(-1, 4)
        return dout @ w.T, {"w": rows_out.T @ rows_in, "b": rows_out.mean(0)}

    fails_with(grading.check_dense_backward, transposed_and_averaged, "looks transposed",
               "not a mean", "0.166667 times")


def test_gelu_and_softmax_slips_are_named():
    fails_with(grading.check_gelu_backward, lambda dout, cache: dout * 0.5 * (1 + cache[1]), "product rule")
    fails_with(grading.check_gelu_backward, lambda dout, cache: layers.gelu_derivative(*cache),
               "multiply it by dout")
    fails_with(grading.check_softmax_backward, lambda dout, cache: cache[0] * dout, "only the diagonal")
    fails_with(grading.check_softmax_backward, lambda dout, cache: -layers.softmax_backward(dout, cache),
               "wrong sign")


def test_attention_weights_with_queries_for_keys_is_named_per_config():
    def queries_for_keys(dweights, cache, attn_cfg):
        scores, weights = cache
        if attn_cfg.kind == "softmax":
            return layers.softmax_backward(dweights, (weights,))
        return dweights * attn_cfg.scale * scores.shape[-2] ** -attn_cfg.alpha * (scores > 0)

    message = fails_with(grading.check_attention_weights_backward, queries_for_keys,
                         "relu, alpha=1", "the number of queries T", "right for: softmax; relu, alpha=0")
    assert "relu, alpha=0, scale=1)" not in message.split("right for")[0]


def test_attention_core_without_inverse_sqrt_dh_is_named():
    def doubled(dout, cache, attn_cfg):
        dq, dk, dv = multihead_attention.heads_attention_backward(dout, cache, attn_cfg)
        return 2 * dq, 2 * dk, dv

    fails_with(grading.check_attention_core_backward, doubled, "dq is off by a constant factor",
               "1/sqrt(Dh) of the scores is missing")


def test_self_attention_head_split_slip_points_past_the_projection():
    def wrong_merge(dout, cache, attn_cfg, heads):
        dx, grads = multihead_attention.self_attention_backward(dout, cache, attn_cfg, heads)
        return dx, {"qkv": {"w": grads["qkv"]["w"][:, ::-1], "b": grads["qkv"]["b"]}, "proj": grads["proj"]}

    fails_with(grading.check_self_attention_backward, wrong_merge, "grads['qkv']['w'] is wrong",
               "grads['proj'] is right")


def test_block_without_residual_names_the_branch():
    def no_inner_residual(dout, cache, cfg):
        ln1_cache, attn_cache, ln2_cache, mlp_cache = cache
        grads = {}
        dnormed, grads["mlp"] = mlp.mlp_backward(dout, mlp_cache, cfg.mlp_activation)
        dx1, grads["ln2"] = layers.layernorm_backward(dnormed, ln2_cache)  # forgot + dout
        dnormed, grads["attn"] = multihead_attention.self_attention_backward(dx1, attn_cache, cfg.attention,
                                                                             cfg.heads)
        dnormed, grads["ln1"] = layers.layernorm_backward(dnormed, ln1_cache)
        return dx1 + dnormed, grads

    def no_outer_residual(dout, cache, cfg):
        dx, grads = model.block_backward(dout, cache, cfg)
        return dx - dout, grads

    fails_with(grading.check_block_backward, no_inner_residual, "the MLP branch is right",
               "passes dout straight through")
    fails_with(grading.check_block_backward, no_outer_residual, "every parameter gradient is right but dx is not")


def test_notebook_01_slips_are_named():
    fails_with(grading.check_pointwise_weights,
               lambda scores, alpha, scale: scale * scores.shape[-2] ** -alpha * np.maximum(scores, 0),
               "not the number of queries")
    fails_with(grading.check_pointwise_weights, lambda scores, alpha, scale: scale * scores.shape[-1] ** -alpha
               * scores, "relu is missing")
    fails_with(grading.check_expected_activation, lambda kind: 0.5, "E[relu(z)]: got 0.5", "P(z > 0)")
    fails_with(grading.check_output_variance, lambda num_keys, alpha, scale: scale ** 2 * num_keys ** (1 - 2 * alpha),
               "E[relu(z)^2] = 1/2, not 1")
    fails_with(grading.check_output_variance, lambda num_keys, alpha, scale: scale * num_keys ** (1 - 2 * alpha) / 2,
               "the scale must be squared")


def test_notebook_05_slips_are_named():
    fails_with(grading.check_memory_read, lambda x, keys, values, activation: (
        np.maximum(x @ keys, 0) if activation == "relu" else layers.softmax(x @ keys)) @ values,
        "softmax_ln", "the LayerNorm is missing")
    fails_with(grading.check_top_share, lambda weights, fraction: np.sort(weights, -1)[
        ..., -max(1, round(fraction * weights.shape[-1])):].sum(-1), "divide by the row's total weight")
    fails_with(grading.check_top_share, lambda weights, fraction: grading.top_share(weights, fraction).mean(),
               "leading axes are missing")


# ------------------------------------------------------------------------ the tools themselves

def test_diagnose_names_shape_sign_factor_and_nan():
    expected = np.arange(1.0, 7.0).reshape(2, 3)
    assert grading.diagnose("g", expected.copy(), expected) is None
    assert "looks transposed" in grading.diagnose("g", expected.T, expected)
    assert "wrong sign" in grading.diagnose("g", -expected, expected)
    assert "that is L" in grading.diagnose("g", 4 * expected, expected, factors={"L": 4.0})
    assert "NaN" in grading.diagnose("g", expected * np.nan, expected)
    assert "all zeros" in grading.diagnose("g", np.zeros_like(expected), expected)
    one_wrong = expected.copy()
    one_wrong[1, 2] += 1.0
    assert "1 of 6 entries differ" in grading.diagnose("g", one_wrong, expected)
    assert "index (1, 2)" in grading.diagnose("g", one_wrong, expected)


def test_finite_differences_match_a_known_gradient_and_restore_the_input():
    x = np.random.default_rng(0).normal(size=(3, 4))
    before = x.copy()
    numeric = grading.numeric_gradient(lambda: float(np.sum(np.sin(x))), x)
    assert grading.relative_error(numeric, np.cos(x)) < 1e-9
    assert np.array_equal(x, before)
    errors = grading.gradient_check(lambda: float(np.sum(x ** 3)), {"x": x}, {"x": 3 * x ** 2}, samples=5)
    assert errors["x"] < 1e-8
    assert grading.gradient_check(lambda: float(np.sum(x ** 3)), {"x": x}, {"x": 3.01 * x ** 2})["x"] > 1e-3
    with pytest.raises(ValueError, match="float64"):
        grading.numeric_gradient(lambda: 0.0, x.astype(np.float32))


def test_references_agree_with_closed_forms():
    assert grading.expected_activation("relu") == pytest.approx(1 / math.sqrt(2 * math.pi), rel=1e-9)
    assert grading.expected_activation("relu2") == pytest.approx(0.5, rel=1e-9)
    assert grading.expected_activation("sigmoid") == pytest.approx(0.5, rel=1e-9)
    assert grading.output_variance(256, 0.5, math.sqrt(2)) == pytest.approx(1.0)
    assert grading.top_slot_count(4096, 0.002) == 8 and grading.top_slot_count(100, 0.002) == 1
    assert grading.top_share(np.array([[0.0, 0.0], [1.0, 3.0]]), 0.5).tolist() == [0.0, 0.75]


def test_grading_imports_nothing_but_numpy_and_reluattn():
    import subprocess
    import sys
    code = "import sys, reluattn.grading; print(sorted(m for m in ('jax', 'scipy', 'matplotlib') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


# ------------------------------------------------------------------ notebooks 03, 04 and 06 (phase 2)

def numpy_relu_attention(q, k, v, alpha):
    """Tokens-first relu / L^alpha attention in plain NumPy, T and L free."""
    scores = np.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])  # (B, H, T, L)
    return np.einsum("bhqk,bkhd->bqhd", k.shape[1] ** -alpha * np.maximum(scores, 0.0), v)  # (B, T, H, Dh)


def numpy_attention_vjp(q, k, v, dout, alpha):
    """The NumPy backend's hand-written backward, tokens-first."""
    attn_cfg = AttentionConfig(kind="relu", alpha=alpha)
    heads = [x.transpose(0, 2, 1, 3) for x in (q, k, v, dout)]
    _, _, cache = multihead_attention.heads_attention_forward(*heads[:3], attn_cfg)
    return tuple(g.transpose(0, 2, 1, 3) for g in multihead_attention.heads_attention_backward(heads[3], cache, attn_cfg))


def numpy_blocked_relu(q, k, v, block_size):
    out = 0.0
    for start in range(0, k.shape[-2], block_size):
        scores = q @ k[..., start:start + block_size, :].swapaxes(-1, -2) / math.sqrt(q.shape[-1])
        out = out + np.maximum(scores, 0.0) @ v[..., start:start + block_size, :]
    return out / k.shape[-2]


def numpy_online_softmax(q, k, v, block_size, subtract_maximum=True, rescale_output=True):
    running_max, normaliser, out = np.full(q.shape[:-1] + (1,), -np.inf), 0.0, 0.0
    for start in range(0, k.shape[-2], block_size):
        scores = q @ k[..., start:start + block_size, :].swapaxes(-1, -2) / math.sqrt(q.shape[-1])
        new_max = np.maximum(running_max, scores.max(-1, keepdims=True)) if subtract_maximum else 0.0
        rescale = np.exp(running_max - new_max) if subtract_maximum else 1.0  # with no maximum, nothing to rescale
        weights = np.exp(scores - new_max)
        normaliser = normaliser * rescale + weights.sum(-1, keepdims=True)
        out = (out * rescale if rescale_output else out) + weights @ v[..., start:start + block_size, :]
        running_max = new_max
    return out / normaliser


@pytest.mark.parametrize("checker, reference", [
    (grading.check_relu_attention, numpy_relu_attention),
    (grading.check_attention_vjp, numpy_attention_vjp),
    (grading.check_blocked_relu_attention, numpy_blocked_relu),
    (grading.check_online_softmax_attention, numpy_online_softmax),
    (grading.check_accuracy_standard_error, lambda p, n: math.sqrt(p * (1 - p) / n)),
], ids=lambda item: getattr(item, "__name__", ""))
def test_independent_implementations_pass(checker, reference, capsys):
    checker(reference)
    assert capsys.readouterr().out.startswith("\N{CHECK MARK}")


def test_rollout_checker_agrees_with_the_plots_module(capsys):
    from reluattn.training.plots import attention_rollout
    grading.check_attention_rollout(attention_rollout)
    assert capsys.readouterr().out.startswith("\N{CHECK MARK}")
    attention = [np.maximum(np.random.default_rng(i).normal(size=(2, 5, 5)), 0) for i in range(3)]
    assert np.allclose(grading.attention_rollout(attention), attention_rollout(attention))


def test_jax_answers_are_graded_in_float64_or_to_float32_precision(capsys):
    import jax
    import jax.numpy as jnp

    def jnp_attention(q, k, v, alpha):
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
        return jnp.einsum("bhqk,bkhd->bqhd", k.shape[1] ** -alpha * jax.nn.relu(scores), v)

    def jnp_vjp(q, k, v, dout, alpha):
        return jax.vjp(lambda q, k, v: jnp_attention(q, k, v, alpha), q, k, v)[1](dout)

    with jax.enable_x64(True):
        grading.check_relu_attention(jnp_attention)
        grading.check_attention_vjp(jnp_vjp)
    assert capsys.readouterr().out.count("in float64") == 2
    grading.check_relu_attention(jnp_attention)  # JAX's default: float32
    assert "graded to float32 precision" in capsys.readouterr().out
    fails_with(grading.check_relu_attention,
               lambda q, k, v, alpha: jnp_attention(q, k, v, alpha).astype(jnp.bfloat16), "dtype bfloat16")


def test_notebook_03_slips_are_named():
    fails_with(grading.check_relu_attention, lambda q, k, v, alpha: numpy_relu_attention(q, k, v, alpha)
               * (k.shape[1] / q.shape[1]) ** alpha, "not of queries")
    fails_with(grading.check_relu_attention, lambda q, k, v, alpha: np.einsum(
        "bhqk,bkhd->bqhd", k.shape[1] ** -alpha * np.einsum("bqhd,bkhd->bhqk", q, k) / 2.0, v), "relu is missing")
    fails_with(grading.check_relu_attention, lambda q, k, v, alpha: numpy_relu_attention(q, k, v, alpha) * 2.0,
               "sqrt(Dh)")
    fails_with(grading.check_attention_vjp, lambda q, k, v, dout, alpha: numpy_attention_vjp(q, k, v, dout, alpha)[:2],
               "three arrays")
    fails_with(grading.check_attention_vjp, lambda q, k, v, dout, alpha: numpy_attention_vjp(
        q, k, v, np.ones_like(dout), alpha), "called with dout, not with ones")


def test_notebook_04_slips_are_named():
    fails_with(grading.check_accuracy_standard_error, lambda p, n: p * (1 - p) / n, "its square root")
    fails_with(grading.check_accuracy_standard_error, lambda p, n: math.sqrt(p * (1 - p) / (n - 1)), "not n - 1")

    def rollout(attention, residual=0.5, normalise=True, absolute=True, reverse=False):
        result = np.eye(attention[0].shape[-1])
        for weights in attention:
            average = (np.abs(weights) if absolute else weights).mean(0)
            if normalise:
                sums = average.sum(-1, keepdims=True)
                average = average / sums  # no guard against rows of zeros
            mixed = (1 - residual) * average + residual * np.eye(len(average))
            result = result @ mixed if reverse else mixed @ result
        return result

    with np.errstate(invalid="ignore", divide="ignore"):  # the rows of zeros
        fails_with(grading.check_attention_rollout, lambda a: rollout(a, residual=0.0), "the residual is missing")
        fails_with(grading.check_attention_rollout, lambda a: rollout(a, reverse=True), "wrong order")
        fails_with(grading.check_attention_rollout, lambda a: rollout(a, normalise=False), "not normalised")
        fails_with(grading.check_attention_rollout, rollout, "a row of zeros divided by its sum 0")


def test_notebook_06_slips_are_named():
    def by_block_length(q, k, v, block_size):
        out = 0.0
        for start in range(0, k.shape[-2], block_size):
            keys = k[..., start:start + block_size, :]
            scores = q @ keys.swapaxes(-1, -2) / math.sqrt(q.shape[-1])
            out = out + np.maximum(scores, 0.0) @ v[..., start:start + block_size, :] / keys.shape[-2]
        return out

    def per_block_softmax(q, k, v, block_size):
        return sum(grading.blocked_attention.full_attention(q, k[..., s:s + block_size, :], v[..., s:s + block_size, :],
                                                            "softmax") for s in range(0, k.shape[-2], block_size))

    fails_with(grading.check_blocked_relu_attention, by_block_length, "its own length")
    fails_with(grading.check_blocked_relu_attention, lambda q, k, v, b: numpy_blocked_relu(q, k, v, b) * k.shape[-2],
               "the factor 1/L is missing")
    message = fails_with(grading.check_blocked_relu_attention,
                         lambda q, k, v, b: grading.blocked_attention.full_attention(q, k, v, "relu"),
                         "is right, but", "never the full q @ k^T")
    assert "MiB" in message
    fails_with(grading.check_online_softmax_attention, per_block_softmax, "softmaxed on its own")
    fails_with(grading.check_online_softmax_attention,
               lambda q, k, v, b: numpy_online_softmax(q, k, v, b, rescale_output=False), "not rescaled")
    with np.errstate(over="ignore", invalid="ignore"):
        fails_with(grading.check_online_softmax_attention,
                   lambda q, k, v, b: numpy_online_softmax(q, k, v, b, subtract_maximum=False),
                   "subtract the running maximum")
