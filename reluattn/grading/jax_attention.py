"""Checkers for notebook 03 (the same model in JAX): relu / L^alpha attention written with `jnp.einsum`,
and its backward by `jax.vjp`.

The student's functions use JAX; the checkers do not need to: they pass float64 NumPy arrays in, bring
the results back with `np.asarray`, and grade them against the NumPy backend (whose backward is verified
against finite differences on the spot). Run them inside `with jax.enable_x64(True):` to grade in float64;
a float32 result is graded to float32's precision instead, and says so.

Queries and keys differ in number (T = 3 queries, L = 5 keys), so dividing by the wrong length shows.
"""

from __future__ import annotations

import math

import numpy as np

from ..config import AttentionConfig
from ..numpy_backend import multihead_attention
from .feedback import ExerciseFailed, call_student, checker, diagnose, passed, report
from .finite_differences import TOLERANCE
from .harness import avoid_kinks, verified_numeric

ALPHAS = (1.0, 0.5, 0.0)
FLOAT32_TOLERANCE = 2e-5  # relative, for results computed in float32 (JAX's default without enable_x64)
TO_HEADS_FIRST = (0, 2, 1, 3)  # (B, L, H, Dh) <-> (B, H, L, Dh)


def reference_attention(q, k, v, alpha):
    """relu(q.k / sqrt(Dh)) * L^-alpha @ v for tokens-first q (B, T, H, Dh), k, v (B, L, H, Dh)."""
    out, _, _ = multihead_attention.heads_attention_forward(
        *(x.transpose(TO_HEADS_FIRST) for x in (q, k, v)), AttentionConfig(kind="relu", alpha=alpha))
    return out.transpose(TO_HEADS_FIRST)  # (B, T, H, Dh)


def _draw(seed: int):
    """q (2, 3, 2, 4), k and v (2, 5, 2, 4), away from relu's kink (for the finite differences)."""
    def make(rng):
        q, k, v = rng.normal(size=(2, 3, 2, 4)), rng.normal(size=(2, 5, 2, 4)), rng.normal(size=(2, 5, 2, 4))
        scores = np.einsum("bqhd,bkhd->bhqk", q, k) / 2.0  # (B, H, T, L)
        return (q, k, v), scores
    return avoid_kinks(make, seed)


def _as_float_array(what: str, value):
    """The student's result as a float64 array, and the tolerance its own precision allows."""
    try:
        dtype = np.asarray(value).dtype
    except (TypeError, ValueError):
        raise ExerciseFailed(f"{what} should be an array, got {type(value).__name__}") from None
    if dtype == np.float64:
        return np.asarray(value, dtype=np.float64), TOLERANCE
    if dtype == np.float32:
        return np.asarray(value, dtype=np.float64), FLOAT32_TOLERANCE
    raise ExerciseFailed(f"{what} has dtype {dtype}; compute in float32 or float64 (run the check inside "
                         f"`with jax.enable_x64(True):` for float64)")


def _precision_note(tolerances) -> str:
    if any(tolerance != TOLERANCE for tolerance in tolerances):
        return (" — graded to float32 precision, since your results were float32: run the check inside "
                "`with jax.enable_x64(True):` to grade in float64")
    return " in float64"


@checker
def check_relu_attention(student_attention, seed: int = 0) -> None:
    """student_attention(q, k, v, alpha) -> (B, T, H, Dh) for q (B, T, H, Dh), k, v (B, L, H, Dh)."""
    q, k, v = _draw(seed)
    num_queries, num_keys, head_dim = q.shape[1], k.shape[1], q.shape[-1]
    problems, tolerances = [], []
    for alpha in ALPHAS:
        expected = reference_attention(q, k, v, alpha)  # (B, T, H, Dh)
        got, tolerance = _as_float_array(f"relu_attention(..., alpha={alpha:g})",
                                         call_student(student_attention, "relu_attention", q, k, v, alpha))
        tolerances.append(tolerance)
        scores = np.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(head_dim)  # (B, H, T, L)
        factors = {"sqrt(Dh): the scores must be divided by sqrt(Dh)": math.sqrt(head_dim)}
        if alpha:
            factors.update({
                "(L/T)^alpha: L is the number of keys (k.shape[1]), not of queries": (num_keys / num_queries) ** alpha,
                "L^alpha: the factor L^-alpha is missing": num_keys ** alpha,
                "L^(2 alpha): L^alpha multiplies instead of dividing": num_keys ** (2 * alpha)})
        mistakes = {
            "relu is missing: negative scores must give weight 0":
                np.einsum("bhqk,bkhd->bqhd", num_keys ** -alpha * scores, v),
            "that is softmax attention; relu attention has no normaliser, only L^-alpha":
                np.einsum("bhqk,bkhd->bqhd", np.exp(scores) / np.exp(scores).sum(-1, keepdims=True), v),
        }
        problems.append(diagnose(f"relu_attention(..., alpha={alpha:g})", got, expected, factors=factors,
                                 mistakes=mistakes, tolerance=tolerance))
    report("relu_attention", problems, "scores = einsum('bqhd,bkhd->bhqk', q, k) / sqrt(Dh); weights = L^-alpha "
                                       "relu(scores) with L = k.shape[1]; the output sums weights times v over the keys "
                                       "and comes back tokens first, (B, T, H, Dh)")
    passed("relu_attention", f"agrees with the NumPy backend's attention for alpha = "
                             f"{', '.join(f'{a:g}' for a in ALPHAS)} (T = {num_queries} queries, L = {num_keys} "
                             f"keys){_precision_note(tolerances)}")


def reference_gradients(q, k, v, dout, alpha) -> dict:
    """{"dq", "dk", "dv"} of sum(dout * attention(q, k, v)), tokens first, by the NumPy backward."""
    attn_cfg = AttentionConfig(kind="relu", alpha=alpha)
    _, _, cache = multihead_attention.heads_attention_forward(*(x.transpose(TO_HEADS_FIRST) for x in (q, k, v)),
                                                              attn_cfg)
    backward = multihead_attention.heads_attention_backward(dout.transpose(TO_HEADS_FIRST), cache, attn_cfg)
    return {name: grad.transpose(TO_HEADS_FIRST) for name, grad in zip(("dq", "dk", "dv"), backward)}


@checker
def check_attention_vjp(student_vjp, seed: int = 0) -> None:
    """student_vjp(q, k, v, dout, alpha) -> (dq, dk, dv), the gradients of sum(dout * attention(q, k, v))."""
    q, k, v = _draw(seed)
    dout = np.random.default_rng(seed + 1).normal(size=q.shape)  # (B, T, H, Dh)
    names = ("dq", "dk", "dv")
    problems, tolerances = [], []
    for alpha in ALPHAS:
        reference = reference_gradients(q, k, v, dout, alpha)
        verified_numeric(lambda: float(np.sum(reference_attention(q, k, v, alpha) * dout)),
                         dict(zip(names, (q, k, v))), reference, "attention backward")
        result = call_student(student_vjp, "attention_vjp", q, k, v, dout, alpha)
        if not isinstance(result, (tuple, list)) or len(result) != 3:
            kind = type(result).__name__ + (f" of length {len(result)}" if isinstance(result, (tuple, list)) else "")
            raise ExerciseFailed(f"attention_vjp should return three arrays (dq, dk, dv); got a {kind}. "
                                 f"The pullback of jax.vjp returns one gradient per input of the function.")
        of_the_sum = reference_gradients(q, k, v, np.ones_like(dout), alpha)  # what jax.grad of sum(out) gives
        for name, got in zip(names, result):
            got, tolerance = _as_float_array(f"{name} (alpha={alpha:g})", got)
            tolerances.append(tolerance)
            mistakes = {"that is the gradient of sum(out): the pullback must be called with dout, not with ones":
                        of_the_sum[name],
                        "alpha is ignored (the gradient of the alpha = 1 attention): pass alpha into the function "
                        "that jax.vjp differentiates": reference_gradients(q, k, v, dout, 1.0)[name]}
            problems.append(diagnose(f"{name} (alpha={alpha:g})", got, reference[name], mistakes=mistakes,
                                     tolerance=tolerance))
    report("attention_vjp", problems, "re-read §2's exercise text on jax.vjp: which function of which inputs it differentiates "
                                      "(alpha fixed), what its pullback takes (a cotangent shaped like the output) and "
                                      "what it returns (one gradient per input)")
    passed("attention_vjp", f"dq, dk, dv agree with the NumPy backend's hand-written backward and with finite "
                            f"differences for alpha = {', '.join(f'{a:g}' for a in ALPHAS)}"
                            f"{_precision_note(tolerances)}")
