"""What the checkers refuse as an answer: any reluattn function passed in its place, reluattn's answer (the
drop-ins included) called from inside it, a pasted copy of it, finite differences, and JAX inside a NumPy
backward — each with a message that says why."""

from __future__ import annotations

import inspect
import textwrap
import types

import numpy as np
import pytest

from reluattn import grading
from reluattn.grading import ExerciseFailed
from reluattn.numpy_backend import layers
from reluattn.numpy_backend import interop as numpy_interop

CHECKERS = [getattr(grading, name) for names in grading.CHECKERS.values() for name in names]


def message_of(checker, student) -> str:
    with pytest.raises(ExerciseFailed) as failure:
        checker(student)
    return str(failure.value)


@pytest.mark.parametrize("checker", CHECKERS, ids=lambda checker: checker.__name__)
@pytest.mark.parametrize("function", [layers.softmax, numpy_interop.dot_product_attention,
                                      grading.numeric_gradient], ids=["softmax", "numpy drop-in", "numeric_gradient"])
def test_every_checker_refuses_any_reluattn_function_passed_as_the_answer(checker, function):
    message = message_of(checker, function)
    assert "you passed reluattn's implementation" in message and "write it yourself" in message


def test_the_jax_drop_in_is_refused_by_both_jax_checkers_even_when_jitted_and_cached():
    import jax

    from reluattn.jax_backend import attention_fn, dot_product_attention

    def drop_in(q, k, v, alpha):
        return dot_product_attention(q, k, v, kind="relu", alpha=alpha)

    jitted = jax.jit(drop_in, static_argnums=3)
    q = np.zeros((2, 3, 2, 4))
    jitted(q, q, q, 1.0)  # compiled and cached: a second call would run no Python
    for student in (drop_in, jitted, lambda q, k, v, alpha: attention_fn("relu", alpha=alpha)(q, k, v)):
        message = message_of(grading.check_relu_attention, student)
        assert "calls reluattn's implementation" in message
        assert "jax_backend.interop.dot_product_attention" in message or "attention_fn" in message

    def vjp(q, k, v, dout, alpha):
        return jax.vjp(lambda q, k, v: dot_product_attention(q, k, v, kind="relu", alpha=alpha), q, k, v)[1](dout)

    assert "dot_product_attention" in message_of(grading.check_attention_vjp, vjp)


def test_the_numpy_drop_in_is_refused_by_the_jax_and_blocked_checkers():
    def drop_in(q, k, v, alpha):
        return numpy_interop.dot_product_attention(q, k, v, kind="relu", alpha=alpha)

    assert "reluattn.numpy_backend.interop.dot_product_attention" in message_of(
        grading.check_relu_attention, drop_in)

    def blocked(q, k, v, block_size):  # (..., T, Dh) heads first: the drop-in wants (B, T, N, H)
        return numpy_interop.dot_product_attention(q.swapaxes(-2, -3), k.swapaxes(-2, -3), v.swapaxes(-2, -3),
                                                     kind="relu").swapaxes(-2, -3)

    assert "dot_product_attention" in message_of(grading.check_blocked_relu_attention, blocked)


def dense_forward(x, w, b):
    return x @ w + b


def test_jax_grad_and_vjp_inside_a_numpy_backward_are_refused():
    import jax

    def by_vjp(dout, cache):
        x, w = cache
        _, pullback = jax.vjp(lambda x, w, b: dense_forward(x, w, b), x, w, np.zeros(w.shape[1]))
        dx, dw, db = (np.asarray(g) for g in pullback(dout))
        return dx, {"w": dw, "b": db}

    def by_grad(dout, cache):
        x, w = cache
        grads = jax.grad(lambda x, w, b: (dense_forward(x, w, b) * dout).sum(), argnums=(0, 1, 2))(
            x, w, np.zeros(w.shape[1]))
        return np.asarray(grads[0]), {"w": np.asarray(grads[1]), "b": np.asarray(grads[2])}

    for student in (by_vjp, by_grad):
        message = message_of(grading.check_dense_backward, student)
        assert "runs JAX" in message and "derived by hand" in message


def test_jax_is_refused_inside_a_backward_even_when_jitted_and_cached():
    import jax

    softmax_vjp = jax.jit(lambda x, dout: jax.vjp(jax.nn.softmax, x)[1](dout)[0])
    softmax_vjp(np.ones((2, 3, 5)), np.ones((2, 3, 5)))  # compiled and cached

    def backward(dout, cache):
        (out,) = cache
        return np.asarray(softmax_vjp(np.log(out), dout))

    assert "runs JAX" in message_of(grading.check_softmax_backward, backward)


def test_finite_differences_inside_a_backward_are_refused():
    def backward(dout, cache):
        x, tanh_u = cache
        x = np.array(x, dtype=np.float64)
        return dout * grading.numeric_gradient(lambda: float(layers.gelu_forward(x)[0].sum()), x)

    def checked(dout, cache):
        (out,) = cache
        grading.gradient_check(lambda: 0.0, {"x": np.zeros(2)}, {"x": np.zeros(2)})
        return out * (dout - (dout * out).sum(axis=-1, keepdims=True))

    assert "numeric_gradient (finite differences)" in message_of(grading.check_gelu_backward, backward)
    assert "gradient_check (finite differences)" in message_of(grading.check_softmax_backward, checked)


def renamed_copy(function, renames: dict):
    """reluattn's function pasted into a notebook, its variables renamed (what a student might hand in)."""
    source = textwrap.dedent(inspect.getsource(function))
    for old, new in renames.items():
        source = source.replace(old, new)
    module = compile(source, "<notebook cell>", "exec")
    code = next(const for const in module.co_consts if isinstance(const, types.CodeType))
    return types.FunctionType(code, function.__globals__, function.__name__, function.__defaults__)


def test_pasted_package_source_is_refused_even_with_renamed_variables():
    pasted = renamed_copy(layers.layernorm_backward, {"dx_hat": "g", "x_hat": "xh"})
    assert pasted.__code__.co_varnames != layers.layernorm_backward.__code__.co_varnames
    assert "copied in" in message_of(grading.check_layernorm_backward, pasted)
    from reluattn.numpy_backend import model
    pasted_block = renamed_copy(model.block_backward, {})

    def block(dout, cache, cfg):
        return pasted_block(dout, cache, cfg)

    assert "runs a copy of reluattn's implementation" in message_of(grading.check_block_backward, block)


def test_allowed_building_blocks_and_short_independent_answers_still_pass(capsys):
    grading.check_accuracy_standard_error(lambda accuracy, n: np.sqrt(accuracy * (1.0 - accuracy) / n))
    grading.check_softmax_backward(lambda dout, cache: cache[0] * (dout - (dout * cache[0]).sum(-1, keepdims=True)))
    assert capsys.readouterr().out.count("\N{CHECK MARK}") == 2


def test_hints_say_what_to_re_derive_and_never_print_the_answer():
    """An answer the checker cannot name gets the exercise's hint: it must not be the formula itself."""
    def dense(dout, cache):
        x, w = cache
        dx = dout @ w.T
        return dx * 1.01 + 0.01, {"w": x.reshape(-1, x.shape[-1]).T @ dout.reshape(-1, dout.shape[-1]),
                                  "b": dout.reshape(-1, dout.shape[-1]).sum(0)}

    message = message_of(grading.check_dense_backward, dense)
    assert "hint: re-derive" in message
    for answer in ("W^T", "dout W", "x_r^T dout_r", "sum over rows of dout"):
        assert answer not in message

    def online(q, k, v, block_size):
        scores = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])  # (..., T, L)
        weights = np.exp(scores - scores.max(-1, keepdims=True))  # (..., T, L)
        return weights / weights.sum(-1, keepdims=True) @ v * 1.01 + 0.1

    message = message_of(grading.check_online_softmax_attention, online)
    assert "hint: re-derive" in message and "e^(m_old - m_new)" not in message and "a / z" not in message
