"""reluattn.grading: every checker passes reluattn's own implementation, fails typical wrong answers with
the message that names the mistake, and its finite-difference tools are right."""

from __future__ import annotations

import math

import numpy as np
import pytest

from reluattn import grading
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
