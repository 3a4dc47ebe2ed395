"""reluattn.grading: every checker refuses reluattn's own implementation, passes an independent right answer,
names each listed wrong answer (or, for one it cannot name, says what to re-derive) in one short message,
and its finite-difference tools are right."""

from __future__ import annotations

import ast
import inspect
import math
import textwrap
import traceback
import types

import numpy as np
import pytest

from reluattn import grading
from reluattn.training import plots
from reluattn.config import AttentionConfig
from reluattn.grading import ExerciseFailed, memories, scaling, training
from reluattn.numpy_backend import attention_weights, layers, mlp, model, multihead_attention


def independent(function):
    """The same code compiled again outside reluattn, with one extra statement: a student's own function as
    far as the checkers can tell (an unchanged copy, even under new variable names, is refused as pasted;
    tests below). The tests build right and wrong answers from these copies."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    definition = tree.body[0]
    definition.decorator_list = []
    definition.body.insert(1 if ast.get_docstring(definition) else 0, ast.parse("_independent_copy = True").body[0])
    module = compile(tree, f"<independent copy of {function.__name__}>", "exec")
    code = next(const for const in module.co_consts if isinstance(const, types.CodeType))
    return types.FunctionType(code, function.__globals__, function.__name__, function.__defaults__)


dense_backward = independent(layers.dense_backward)
layernorm_backward = independent(layers.layernorm_backward)
gelu_derivative = independent(layers.gelu_derivative)
softmax_backward = independent(layers.softmax_backward)
weights_backward = independent(attention_weights.attention_weights_backward)
core_backward = independent(multihead_attention.heads_attention_backward)
self_attention_backward = independent(multihead_attention.self_attention_backward)
block_backward = independent(model.block_backward)
memory_read = independent(memories.memory_read)
top_share = independent(memories.top_share)
rollout_reference = independent(training.attention_rollout)
heads_forward = independent(multihead_attention.heads_attention_forward)


def full_attention(q, k, v, kind):
    """Attention over the whole sequence in plain NumPy, (..., T, Dh) arrays."""
    scores = q @ k.swapaxes(-1, -2) / math.sqrt(q.shape[-1])  # (..., T, L)
    if kind == "relu":
        return np.maximum(scores, 0.0) @ v / k.shape[-2]
    weights = np.exp(scores - scores.max(-1, keepdims=True))  # (..., T, L)
    return weights / weights.sum(-1, keepdims=True) @ v


def fails_with(checker, student, *fragments):
    with pytest.raises(ExerciseFailed) as failure:
        checker(student)
    message = str(failure.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in:\n{message}"
    return message


# ------------------------------------------------------------- reluattn's own answer is refused

OWN_ANSWERS = [
    (grading.check_pointwise_weights, lambda scores, alpha, scale: attention_weights.attention_weights_forward(
        scores, AttentionConfig(kind="relu", alpha=alpha, scale=scale))[0]),
    (grading.check_expected_activation, scaling.expected_activation),
    (grading.check_output_variance, scaling.output_variance),
    (grading.check_dense_backward, layers.dense_backward),
    (grading.check_layernorm_backward, layers.layernorm_backward),
    (grading.check_gelu_backward, layers.gelu_backward),
    (grading.check_softmax_backward, layers.softmax_backward),
    (grading.check_attention_weights_backward, attention_weights.attention_weights_backward),
    (grading.check_attention_core_backward, multihead_attention.heads_attention_backward),
    (grading.check_self_attention_backward, multihead_attention.self_attention_backward),
    (grading.check_block_backward, model.block_backward),
    (grading.check_relu_attention, lambda q, k, v, alpha: multihead_attention.attention(
        q, k, v, AttentionConfig(kind="relu", alpha=alpha))),
    (grading.check_attention_vjp, lambda q, k, v, dout, alpha: grading.jax_attention.reference_gradients(
        q, k, v, dout, alpha).values()),
    (grading.check_accuracy_standard_error, training.accuracy_standard_error),
    (grading.check_attention_rollout, plots.attention_rollout),
    (grading.check_memory_read, memories.memory_read),
    (grading.check_top_share, memories.top_share),
    (grading.check_blocked_relu_attention, lambda q, k, v, block_size: multihead_attention.attention(
        q, k, v, AttentionConfig(kind="relu"), impl="blocked", block_size=block_size)),
    (grading.check_online_softmax_attention, grading.blocked_attention.full_attention),
]


def test_every_checker_is_tried_with_reluattns_own_answer():
    assert {checker.__name__ for checker, _ in OWN_ANSWERS} == set(
        name for names in grading.CHECKERS.values() for name in names)


@pytest.mark.parametrize("checker, own", OWN_ANSWERS, ids=lambda item: getattr(item, "__name__", ""))
def test_reluattns_own_answer_is_refused(checker, own):
    passed_directly = checker.__name__ not in {"check_pointwise_weights", "check_relu_attention", "check_attention_vjp",
                                               "check_blocked_relu_attention"}
    fragment = "you passed reluattn's implementation" if passed_directly else "calls reluattn's implementation"
    fails_with(checker, own, fragment, "write it yourself")


def test_reluattns_function_called_inside_is_refused_and_named():
    message = fails_with(grading.check_layernorm_backward, lambda dout, cache: layers.layernorm_backward(dout, cache),
                         "your function calls reluattn's implementation")
    assert "reluattn.numpy_backend.layers.layernorm_backward" in message


def test_building_blocks_are_allowed(capsys):
    """Only the answer is refused: a memory read may use reluattn's softmax and LayerNorm."""
    def read(x, keys, values, activation):
        scores = x @ keys
        if activation == "relu":
            return np.maximum(scores, 0.0) @ values
        out = layers.softmax(scores) @ values
        return out if activation == "softmax" else layers.layernorm_forward(out, {"scale": np.ones(out.shape[-1])})[0]

    grading.check_memory_read(read)
    assert capsys.readouterr().out.startswith("\N{CHECK MARK}")


def test_the_references_are_not_exported():
    for name in ("expected_activation", "output_variance", "memory_read", "top_share", "top_slot_count",
                 "accuracy_standard_error", "attention_rollout"):
        assert not hasattr(grading, name) and name not in grading.__all__


# ------------------------------------------------------------------------- a right answer passes

@pytest.mark.parametrize("checker, right", [
    (grading.check_dense_backward, dense_backward),
    (grading.check_layernorm_backward, layernorm_backward),
    (grading.check_gelu_backward, lambda dout, cache: dout * (0.5 * (1 + cache[1]) + 0.5 * cache[0] * (1 - cache[1] ** 2)
                                                              * layers.GELU_C * (1 + 3 * 0.044715 * cache[0] ** 2))),
    (grading.check_softmax_backward, softmax_backward),
    (grading.check_attention_weights_backward, weights_backward),
    (grading.check_attention_core_backward, core_backward),
    (grading.check_self_attention_backward, self_attention_backward),
    (grading.check_block_backward, block_backward),
    (grading.check_pointwise_weights, lambda scores, alpha, scale: scale * scores.shape[-1] ** -alpha
     * np.maximum(scores, 0)),
    (grading.check_expected_activation, independent(scaling.expected_activation)),
    (grading.check_output_variance, independent(scaling.output_variance)),
    (grading.check_memory_read, memory_read),
    (grading.check_top_share, top_share),
], ids=lambda item: getattr(item, "__name__", ""))
def test_a_right_answer_passes(checker, right, capsys):
    checker(right)
    assert capsys.readouterr().out.startswith("\N{CHECK MARK}")


def test_gradient_errors_are_returned_and_tiny():
    errors = grading.check_layernorm_backward(layernorm_backward)
    assert set(errors) == {"dx", "grads['scale']", "grads['bias']"}
    assert max(errors.values()) < 1e-8


# ------------------------------------------------------------ one short message, no grader traceback

def test_a_failure_is_one_message_raised_from_the_checkers_boundary():
    with pytest.raises(ExerciseFailed) as failure:
        grading.check_softmax_backward(lambda dout, cache: cache[0] * dout)
    error = failure.value
    assert error.__cause__ is None and error.__suppress_context__ is False and error.__context__ is None
    grader_frames = [frame for frame in traceback.extract_tb(error.__traceback__)
                     if "reluattn/grading" in frame.filename.replace("\\", "/")]
    assert len(grader_frames) == 1, grader_frames  # the decorator's raise, nothing of the grader's insides
    assert error._render_traceback_() == [f"\x1b[0;31mExerciseFailed\x1b[0m: {error}"]  # what Jupyter shows


def test_an_error_in_the_students_code_names_its_line_without_a_path():
    def dense(dout, cache):
        x, w = cache
        return dout @ w, {}  # w is (in, out): the product does not fit

    message = fails_with(grading.check_dense_backward, dense, "raised ValueError", "(in dense, line",
                         "`return dout @ w, {}", "needs a transpose")
    assert "/" not in message.split("raised ValueError")[0] and ".py" not in message


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
        return dx, layernorm_backward(dout, cache)[1]

    def constants(dout, cache):
        x_hat, inv_std, scale = cache
        return dout * scale * inv_std, layernorm_backward(dout, cache)[1]

    def unsummed(dout, cache):
        return layernorm_backward(dout, cache)[0], {"scale": dout * cache[0], "bias": dout}

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
    fails_with(grading.check_gelu_backward, lambda dout, cache: gelu_derivative(*cache),
               "multiply it by dout")
    fails_with(grading.check_softmax_backward, lambda dout, cache: cache[0] * dout, "only the diagonal")
    fails_with(grading.check_softmax_backward, lambda dout, cache: -softmax_backward(dout, cache),
               "wrong sign")


def test_attention_weights_with_queries_for_keys_is_named_per_config():
    def queries_for_keys(dweights, cache, attn_cfg):
        scores, weights = cache
        if attn_cfg.kind == "softmax":
            return layers.softmax_backward(dweights, (weights,))
        return dweights * attn_cfg.scale * scores.shape[-2] ** -attn_cfg.alpha * (scores > 0)

    message = fails_with(grading.check_attention_weights_backward, queries_for_keys,
                         "relu, alpha=1", "taken from the query axis", "right for: softmax; relu, alpha=0")
    assert "relu, alpha=0, scale=1)" not in message.split("right for")[0]


def test_attention_core_without_inverse_sqrt_dh_is_named():
    def doubled(dout, cache, attn_cfg):
        dq, dk, dv = core_backward(dout, cache, attn_cfg)
        return 2 * dq, 2 * dk, dv

    fails_with(grading.check_attention_core_backward, doubled, "dq is off by a constant factor",
               "1/sqrt(Dh) of the scores is missing")


def test_self_attention_head_split_slip_points_past_the_projection():
    def wrong_merge(dout, cache, attn_cfg, heads):
        dx, grads = self_attention_backward(dout, cache, attn_cfg, heads)
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
        dx, grads = block_backward(dout, cache, cfg)
        return dx - dout, grads

    fails_with(grading.check_block_backward, no_inner_residual, "the MLP branch is right",
               "passes dout straight through")
    fails_with(grading.check_block_backward, no_outer_residual, "every parameter gradient is right but dx is not")


def test_notebook_01_slips_are_named():
    fails_with(grading.check_pointwise_weights,
               lambda scores, alpha, scale: scale * scores.shape[-2] ** -alpha * np.maximum(scores, 0),
               "taken from the query axis")
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
    fails_with(grading.check_top_share, lambda weights, fraction: top_share(weights, fraction).mean(),
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


def test_a_check_over_the_tolerance_is_measured_again_and_a_wrong_gradient_still_fails():
    x = np.random.default_rng(1).normal(size=(2, 3))
    calls = []

    def glitching():  # one evaluation of f off in its 10th digit, the rest exact
        calls.append(None)
        return float(np.sum(x ** 3)) * (1 + 1e-9 * (len(calls) == 3))

    assert grading.gradient_check(glitching, {"x": x}, {"x": 3 * x ** 2})["x"] < 1e-8
    assert len(calls) == 2 * 2 * x.size  # the glitch put the first pass over 1e-6: a second one passed
    calls.clear()
    assert grading.gradient_check(glitching, {"x": x}, {"x": 3.01 * x ** 2})["x"] > 1e-3
    assert len(calls) == 3 * 2 * x.size  # measured three times, over the tolerance every time


def test_references_agree_with_closed_forms():
    assert scaling.expected_activation("relu") == pytest.approx(1 / math.sqrt(2 * math.pi), rel=1e-9)
    assert scaling.expected_activation("relu2") == pytest.approx(0.5, rel=1e-9)
    assert scaling.expected_activation("sigmoid") == pytest.approx(0.5, rel=1e-9)
    assert scaling.output_variance(256, 0.5, math.sqrt(2)) == pytest.approx(1.0)
    assert memories.top_slot_count(4096, 0.002) == 8 and memories.top_slot_count(100, 0.002) == 1
    assert top_share(np.array([[0.0, 0.0], [1.0, 3.0]]), 0.5).tolist() == [0.0, 0.75]


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
    _, _, cache = heads_forward(*heads[:3], attn_cfg)
    return tuple(g.transpose(0, 2, 1, 3) for g in core_backward(heads[3], cache, attn_cfg))


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


def test_rollout_checker_grades_against_the_plots_module(capsys):
    # The checker's reference is the function the attention figures use (one attention_rollout).
    from reluattn.training.plots import attention_rollout
    assert training.attention_rollout is attention_rollout
    grading.check_attention_rollout(independent(attention_rollout))
    assert capsys.readouterr().out.startswith("\N{CHECK MARK}")


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
        return sum(full_attention(q, k[..., s:s + block_size, :], v[..., s:s + block_size, :],
                                                            "softmax") for s in range(0, k.shape[-2], block_size))

    fails_with(grading.check_blocked_relu_attention, by_block_length, "its own length")
    fails_with(grading.check_blocked_relu_attention, lambda q, k, v, b: numpy_blocked_relu(q, k, v, b) * k.shape[-2],
               "the factor 1/L is missing")
    message = fails_with(grading.check_blocked_relu_attention,
                         lambda q, k, v, b: full_attention(q, k, v, "relu"),
                         "is right, but", "never the full q @ k^T")
    assert "MiB" in message
    fails_with(grading.check_online_softmax_attention, per_block_softmax, "softmaxed on its own")
    fails_with(grading.check_online_softmax_attention,
               lambda q, k, v, b: numpy_online_softmax(q, k, v, b, rescale_output=False), "not rescaled")
    with np.errstate(over="ignore", invalid="ignore"):
        fails_with(grading.check_online_softmax_attention,
                   lambda q, k, v, b: numpy_online_softmax(q, k, v, b, subtract_maximum=False),
                   "subtract the running maximum")


# ----------------------------------------------------- every checker names each listed wrong answer

def relu_weights(scores, alpha, scale, length):
    return scale * length ** -alpha * np.maximum(scores, 0.0)


def integral(kind, weight=lambda z: np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi), square=False, low=-12.0):
    z = np.linspace(low, 12.0, 200_001)
    h = attention_weights.pointwise(kind, z)
    values = (h * h if square else h) * weight(z)
    return float(np.sum(values[1:] + values[:-1]) / 2 * (z[1] - z[0]))


def layernorm_variant(dout, cache, *, axis=-1, sign=-1.0, use_scale=True, inv_std_power=1):
    x_hat, inv_std, scale = cache
    dx_hat = dout * scale if use_scale else dout
    dx = inv_std ** inv_std_power * (dx_hat - dx_hat.mean(axis, keepdims=True)
                                     + sign * x_hat * (dx_hat * x_hat).mean(axis, keepdims=True))
    return dx, layernorm_backward(dout, cache)[1]


def gelu_variant(dout, cache, *, tanh_derivative=lambda t: 1 - t * t, cubic=3.0):
    x, t = cache
    return dout * (0.5 * (1 + t) + 0.5 * x * tanh_derivative(t) * layers.GELU_C * (1 + cubic * 0.044715 * x * x))


def weights_relu_variant(derivative):
    def backward(dweights, cache, attn_cfg):
        scores, weights = cache
        if attn_cfg.kind == "softmax":
            return softmax_backward(dweights, (weights,))
        return derivative(dweights, scores, weights, attn_cfg)
    return backward


def core_with_weights_backward_of(other_kind):
    def backward(dout, cache, attn_cfg):
        return core_backward(dout, cache, AttentionConfig(kind=other_kind) if other_kind != attn_cfg.kind else attn_cfg)
    return backward


def rollout_variant(attention, *, per_head=False):
    result = np.eye(attention[0].shape[-1])
    for weights in attention:
        if per_head:
            rows = np.abs(weights)
            sums = rows.sum(-1, keepdims=True)
            average = np.divide(rows, sums, out=np.zeros_like(rows), where=sums > 0).mean(0)
        else:
            average = np.abs(weights).mean(0)
            average = average / np.where(average.sum(-1, keepdims=True) > 0, average.sum(-1, keepdims=True), 1.0)
        result = (0.5 * average + 0.5 * np.eye(len(average))) @ result
    return result


def blocked_relu_variant(q, k, v, block_size, *, last_block=True, average=False, length=None):
    scores = np.maximum(q @ k.swapaxes(-1, -2) / math.sqrt(q.shape[-1]), 0.0)
    starts = range(0, k.shape[-2], block_size)
    blocks = [slice(s, s + block_size) for s in starts if last_block or s + block_size <= k.shape[-2]]
    out = sum((scores[..., b] @ v[..., b, :] for b in blocks), np.zeros(q.shape[:-1] + v.shape[-1:]))
    out = out / (length or k.shape[-2])
    return out / len(blocks) if average else out


WRONG_ANSWERS = {  # checker: [(wrong answer, a fragment its message must hold), ...]
    grading.check_pointwise_weights: [
        (lambda s, a, c: relu_weights(s, a, c, s.shape[0]), "taken from the batch axis"),
        (lambda s, a, c: relu_weights(s, a, c, s.shape[1]), "taken from the head axis"),
        (lambda s, a, c: relu_weights(s, a, c, s.shape[2]), "taken from the query axis"),
        (lambda s, a, c: relu_weights(s, a, c, s.size), "number of all scores"),
        (lambda s, a, c: np.maximum(s, 0.0), "scale * L^-alpha is missing"),
        (lambda s, a, c: relu_weights(s, a, 1.0, s.shape[-1]), "the scale is missing"),
        (lambda s, a, c: relu_weights(s, -a, c, s.shape[-1]), "multiplies instead of dividing"),
        (lambda s, a, c: relu_weights(s, 1.0, c, s.shape[-1]), "alpha is ignored"),
        (lambda s, a, c: c * s.shape[-1] ** -a * s, "relu is missing"),
        (lambda s, a, c: np.maximum(s, 0) / np.maximum(s, 0).sum(-1, keepdims=True), "no normaliser"),
        (lambda s, a, c: np.exp(s) / np.exp(s).sum(-1, keepdims=True), "that is softmax"),
    ],
    grading.check_expected_activation: [
        (lambda kind: integral(kind) * math.sqrt(2 * math.pi), "1/sqrt(2 pi) is missing"),
        (lambda kind: integral(kind, low=0.0), "over z > 0 only"),
        (lambda kind: integral(kind, square=True), "that is E[h(z)^2]"),
        (lambda kind: 1 / (2 * math.pi) if kind == "relu" else integral(kind), "that is 1/(2 pi)"),
        (lambda kind: 2 / math.sqrt(2 * math.pi) if kind == "relu" else integral(kind), "that is E|z|"),
    ],
    grading.check_output_variance: [
        (lambda n, a, c: c ** 2 * n ** (1 - 2 * a), "E[relu(z)^2] = 1/2, not 1"),
        (lambda n, a, c: c * n ** (1 - 2 * a) / 2, "the scale must be squared"),
        (lambda n, a, c: n ** (1 - 2 * a) / 2, "the scale is missing"),
        (lambda n, a, c: c ** 2 * n ** (1 - a) / 2, "enters squared"),
        (lambda n, a, c: c ** 2 * n ** (-2 * a) / 2, "the sum over the L keys is missing"),
        (lambda n, a, c: c ** 2 * n ** (1 - 2 * a) / (2 * math.pi), "E[relu(z)]^2 = 1/(2 pi)"),
        (lambda n, a, c: c * n ** (0.5 - a) / math.sqrt(2), "that is the standard deviation"),
        (lambda n, a, c: c ** 2 * n ** (1 - 2 * a) * (0.5 - 1 / (2 * math.pi)), "Var(relu(z))"),
    ],
    grading.check_dense_backward: [
        (lambda dout, cache: (dense_backward(dout, cache)[0], {"w": dense_backward(dout, cache)[1]["w"].T,
                                                                "b": dout.sum((0, 1))}), "looks transposed"),
        (lambda dout, cache: (dense_backward(dout, cache)[0], {"w": dense_backward(dout, cache)[1]["w"],
                                                                "b": dout.mean((0, 1))}), "not a mean"),
        (lambda dout, cache: (dense_backward(dout, cache)[0], {"w": dense_backward(dout, cache)[1]["w"], "b": dout}),
         "extra leading axes"),
        (lambda dout, cache: (dense_backward(dout, cache)[0], {"w": np.outer(cache[0][-1, -1], dout[-1, -1]),
                                                                "b": dout.sum((0, 1))}), "only the last row"),
        (lambda dout, cache: (-dense_backward(dout, cache)[0], dense_backward(dout, cache)[1]), "wrong sign"),
        (lambda dout, cache: (dense_backward(dout, cache)[0] + 0.01, dense_backward(dout, cache)[1]),
         "hint: re-derive it entry by entry"),
    ],
    grading.check_layernorm_backward: [
        (lambda dout, cache: layernorm_variant(dout, cache, axis=0), "the means run over the wrong axis"),
        (lambda dout, cache: layernorm_variant(dout, cache, sign=1.0), "the sign of the x_hat term"),
        (lambda dout, cache: layernorm_variant(dout, cache, use_scale=False), "the learned scale is missing"),
        (lambda dout, cache: layernorm_variant(dout, cache, inv_std_power=2), "inv_std should multiply once"),
        (lambda dout, cache: (layernorm_backward(dout, cache)[0], {"scale": dout.sum((0, 1)),
                                                                    "bias": dout.sum((0, 1))}),
         "that is the bias's gradient"),
        (lambda dout, cache: (layernorm_backward(dout, cache)[0], {"scale": (dout * cache[0]).sum((0, 1)),
                                                                    "bias": (dout * cache[0]).sum((0, 1))}),
         "that is the scale's gradient"),
        (lambda dout, cache: (layernorm_variant(dout, cache)[0] * 1.01, layernorm_backward(dout, cache)[1]),
         "hint: with dx_hat = dout * scale"),
    ],
    grading.check_gelu_backward: [
        (lambda dout, cache: gelu_variant(dout, cache, tanh_derivative=lambda t: 1 - t), "1 - tanh(u)^2"),
        (lambda dout, cache: gelu_variant(dout, cache, cubic=1.0), "the 3 is missing"),
        (lambda dout, cache: dout * 0.5 * (1 + cache[1]), "product rule"),
        (lambda dout, cache: gelu_variant(dout, cache) + 0.01, "hint: y = 0.5 x (1 + tanh u)"),
    ],
    grading.check_softmax_backward: [
        (lambda dout, cache: cache[0] * dout, "only the diagonal"),
        (lambda dout, cache: cache[0] * (1 - cache[0]) * dout, "treated as point-wise"),
        (lambda dout, cache: dout - (dout * cache[0]).sum(-1, keepdims=True), "missing the outer factor p"),
        (lambda dout, cache: cache[0] * (dout - (dout * cache[0]).sum()), "keep its axis"),
        (lambda dout, cache: cache[0] * (dout - (dout * cache[0]).sum(0, keepdims=True)), "over the wrong axis"),
        (lambda dout, cache: cache[0] * (dout - dout.sum(-1, keepdims=True)), "weighted by p_j"),
        (lambda dout, cache: -softmax_backward(dout, cache), "wrong sign"),
    ],
    grading.check_attention_weights_backward: [
        (weights_relu_variant(lambda dw, s, w, cfg: dw * cfg.scale * s.shape[0] ** -cfg.alpha * (s > 0)),
         "taken from the batch axis"),
        (weights_relu_variant(lambda dw, s, w, cfg: dw * cfg.scale * s.shape[-1] ** -cfg.alpha),
         "the mask 1[s > 0] is missing"),
        (weights_relu_variant(lambda dw, s, w, cfg: dw * cfg.scale * s.shape[-1] ** -cfg.alpha * np.maximum(s, 0)),
         "not relu(s) itself"),
        (weights_relu_variant(lambda dw, s, w, cfg: dw * (s > 0)), "scale * L^-alpha in front of relu(s) is missing"),
        (lambda dw, cache, cfg: cache[1] * dw if cfg.kind == "softmax" else weights_backward(dw, cache, cfg),
         "only the diagonal"),
    ],
    grading.check_attention_core_backward: [
        (lambda dout, cache, cfg: tuple(g * f for g, f in zip(core_backward(dout, cache, cfg), (2, 2, 1))),
         "1/sqrt(Dh) of the scores is missing"),
        (lambda dout, cache, cfg: tuple(g * f for g, f in zip(core_backward(dout, cache, cfg), (0.5, 0.5, 1))),
         "applied twice"),
        (core_with_weights_backward_of("softmax"), "must follow attn_cfg"),
        (lambda dout, cache, cfg: tuple(-g for g in core_backward(dout, cache, cfg)), "wrong sign"),
        (lambda dout, cache, cfg: tuple(g + 0.01 for g in core_backward(dout, cache, cfg)), "hint: with S = Q K^T"),
    ],
    grading.check_self_attention_backward: [
        (lambda dout, cache, cfg, heads: (lambda dx, g: (dx, {"qkv": {"w": g["qkv"]["w"][:, ::-1], "b": g["qkv"]["b"]},
                                                              "proj": g["proj"]}))(
            *self_attention_backward(dout, cache, cfg, heads)), "grads['proj'] is right"),
        (lambda dout, cache, cfg, heads: (lambda dx, g: (dx, {"qkv": g["qkv"], "proj": {"w": g["proj"]["w"].T,
                                                                                          "b": g["proj"]["b"]}}))(
            *self_attention_backward(dout, cache, cfg, heads)), "hint: undo the forward in reverse"),
    ],
    grading.check_block_backward: [
        (lambda dout, cache, cfg: (lambda dx, g: (dx, {**g, "mlp": {**g["mlp"], "fc2": {
            "w": g["mlp"]["fc2"]["w"] * 2, "b": g["mlp"]["fc2"]["b"]}}}))(*block_backward(dout, cache, cfg)),
         "the MLP branch is already wrong"),
        (lambda dout, cache, cfg: (lambda dx, g: (dx - dout, g))(*block_backward(dout, cache, cfg)),
         "every parameter gradient is right but dx is not"),
    ],
    grading.check_relu_attention: [
        (lambda q, k, v, alpha: np.einsum("bhqk,bkhd->bhqd", k.shape[1] ** -alpha * np.maximum(
            np.einsum("bqhd,bkhd->bhqk", q, k) / 2.0, 0), v), "in another layout"),
        (lambda q, k, v, alpha: np.einsum("bhqk,bkhd->bqhd", np.exp(np.einsum("bqhd,bkhd->bhqk", q, k) / 2.0)
                                          / np.exp(np.einsum("bqhd,bkhd->bhqk", q, k) / 2.0).sum(-1, keepdims=True),
                                          v), "that is softmax attention"),
        (lambda q, k, v, alpha: numpy_relu_attention(q, k, v, alpha) * k.shape[1] ** alpha, "L^-alpha is missing"),
        (lambda q, k, v, alpha: numpy_relu_attention(q, k, v, alpha) + 0.01, "hint: scores = einsum"),
    ],
    grading.check_attention_vjp: [
        (lambda q, k, v, dout, alpha: numpy_attention_vjp(q, k, v, dout, 1.0), "alpha is ignored"),
        (lambda q, k, v, dout, alpha: numpy_attention_vjp(q, k, v, np.ones_like(dout), alpha), "not with ones"),
        (lambda q, k, v, dout, alpha: numpy_attention_vjp(q, k, v, dout, alpha)[:2], "three arrays"),
    ],
    grading.check_accuracy_standard_error: [
        (lambda p, n: math.sqrt(p / n), "not sqrt(p / n)"),
        (lambda p, n: math.sqrt(p * (1 - p)), "divide by n inside the root"),
        (lambda p, n: 100 * math.sqrt(p * (1 - p) / n), "percentage points"),
        (lambda p, n: math.sqrt((1 - p) / n), "has both p and 1 - p"),
        (lambda p, n: p * (1 - p) / n, "its square root"),
    ],
    grading.check_attention_rollout: [
        (lambda attention: rollout_variant(attention, per_head=True), "normalised before averaging"),
        (lambda attention: rollout_variant(attention) * 1.01, "hint: A = each block's |weights|"),
    ],
    grading.check_memory_read: [
        (lambda x, keys, values, activation: memory_read(x, keys, values, activation) if activation == "relu" else
         np.exp(x @ keys) / np.exp(x @ keys).sum(0, keepdims=True) @ values, "runs over the batch axis"),
        (lambda x, keys, values, activation: np.maximum((x @ keys) @ values, 0) if activation == "relu" else
         memory_read(x, keys, values, activation), "relu went on the read"),
        (lambda x, keys, values, activation: memory_read(x, keys, values, activation) * 1.01,
         "hint: scores = x @ keys"),
    ],
    grading.check_top_share: [
        (lambda w, f: np.sort(w, -1)[..., :max(1, round(f * w.shape[-1]))].sum(-1)
         / np.maximum(w.sum(-1), 1e-300), "the smallest weights"),
        (lambda w, f: np.sort(w, -1)[..., -max(1, round(f * w.shape[-1])) - 1:].sum(-1)
         / np.maximum(w.sum(-1), 1e-300), "max(1, round("),
        (lambda w, f: np.full(w.shape[:-1], max(1, round(f * w.shape[-1])) / w.shape[-1]), "share of the slots"),
    ],
    grading.check_blocked_relu_attention: [
        (lambda q, k, v, b: blocked_relu_variant(q, k, v, b, last_block=False), "the last, shorter block"),
        (lambda q, k, v, b: blocked_relu_variant(q, k, v, b, average=True), "must be added"),
        (lambda q, k, v, b: blocked_relu_variant(q, k, v, b, length=q.shape[-2]), "divides by T"),
        (lambda q, k, v, b: blocked_relu_variant(q, k, v, b) + 0.01, "hint: out = the sum over key blocks"),
    ],
    grading.check_online_softmax_attention: [
        (lambda q, k, v, b: numpy_online_softmax(q, k, v, b) * 1.01, "hint: re-derive §3's update"),
    ],
}


def test_every_checker_has_a_list_of_wrong_answers():
    listed = {checker.__name__ for checker in WRONG_ANSWERS}
    assert listed == {name for names in grading.CHECKERS.values() for name in names}


@pytest.mark.parametrize("checker, wrong, fragment",
                         [(checker, wrong, fragment) for checker, answers in WRONG_ANSWERS.items()
                          for wrong, fragment in answers],
                         ids=[f"{checker.__name__}:{fragment[:30]}" for checker, answers in WRONG_ANSWERS.items()
                              for _, fragment in answers])
def test_each_wrong_answer_is_named(checker, wrong, fragment):
    with np.errstate(all="ignore"):
        fails_with(checker, wrong, fragment)
