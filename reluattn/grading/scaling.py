"""Checkers for notebook 01 (why 1/L): point-wise attention weights, the expectation of an activation
under a standard normal, and the predicted output variance of relu attention.

References (also what the notebook derives):
    pointwise weights     w = scale * L^-alpha * relu(s), L = scores.shape[-1] (the keys)
    E[h(z)], z ~ N(0, 1)  relu: 1/sqrt(2 pi) ~ 0.399;  relu2: 1/2;  sigmoid: 1/2;  gelu, softplus: numerically
    output variance       o = sum_j w_j v_j with s_j, v_j ~ N(0, 1) independent:
                          Var(o) = L E[w^2] = scale^2 L^(1 - 2 alpha) E[relu(z)^2] = scale^2 L^(1 - 2 alpha) / 2
"""

from __future__ import annotations

import math

import numpy as np

from ..config import AttentionConfig
from ..numpy_backend import attention_weights
from .feedback import ExerciseFailed, call_student, checker, diagnose, passed, report

EXPECTATION_KINDS = ("relu", "relu2", "gelu", "softplus", "sigmoid")
EXPECTATION_TOLERANCE = 5e-3  # relative: room for a Monte Carlo estimate from a few million samples


def _integral(values, z) -> float:
    """The trapezoid rule on an even grid z."""
    return float(np.sum(values[1:] + values[:-1]) * 0.5 * (z[1] - z[0]))


def expected_activation(kind: str) -> float:
    """E[h(z)] for z ~ N(0, 1), h a point-wise attention kind, by the trapezoid rule on [-12, 12]."""
    z = np.linspace(-12.0, 12.0, 240_001)  # (G,) grid points
    integrand = attention_weights.pointwise(kind, z) * np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)  # (G,)
    return _integral(integrand, z)


def output_variance(num_keys, alpha, scale=1.0):
    """The variance of o = scale * L^-alpha * sum_j relu(s_j) v_j with s_j, v_j ~ N(0, 1) independent."""
    return scale * scale * np.asarray(num_keys, dtype=np.float64) ** (1.0 - 2.0 * alpha) / 2.0


POINTWISE_AXES = ("batch", "head", "query")  # the axes of scores (B, H, T, L) before the keys
POINTWISE_HINT = ("w = c * L^-alpha * relu(s) entry by entry, with L = scores.shape[-1] (the number of keys), "
                  "c = scale, and no normalisation of the rows")


@checker
def check_pointwise_weights(student_weights, seed: int = 0) -> None:
    """student_weights(scores, alpha, scale) -> weights, the relu attention weights
    scale * L^-alpha * relu(scores) for scores (B, H, T, L), for several alpha and scale."""
    scores = np.random.default_rng(seed).normal(size=(2, 3, 4, 7))  # (B, H, T, L): every axis its own length
    num_keys = scores.shape[-1]
    relu = np.maximum(scores, 0.0)  # (B, H, T, L)
    problems = []
    cases = [(1.0, 1.0), (0.5, 1.5), (0.0, 1.0), (2.0, 1.0)]  # scale 1.5: no power of an axis length equals it
    for alpha, scale in cases:
        attn_cfg = AttentionConfig(kind="relu", alpha=alpha, scale=scale)
        expected = attention_weights.attention_weights_forward(scores, attn_cfg)[0]  # (B, H, T, L)
        got = call_student(student_weights, "pointwise_weights", scores, alpha, scale)
        mistakes = {f"L is taken from the {name} axis (scores.shape[{axis}] = {scores.shape[axis]}); L is the "
                    f"number of keys, scores.shape[-1] = {num_keys}": scale * scores.shape[axis] ** -alpha * relu
                    for axis, name in enumerate(POINTWISE_AXES) if alpha}
        mistakes.update({
            "L is the number of all scores (scores.size); it is the number of keys, scores.shape[-1]":
                scale * scores.size ** -alpha * relu,
            "alpha is ignored (always L^-1); the factor is L^-alpha": scale / num_keys * relu,
            "the rows were normalised to sum to 1; relu attention has no normaliser, only scale * L^-alpha":
                relu / relu.sum(-1, keepdims=True),
            "that is softmax; relu attention is scale * L^-alpha * relu(s)":
                np.exp(scores) / np.exp(scores).sum(-1, keepdims=True),
            "relu is missing: negative scores must give weight 0": scale * num_keys ** -alpha * scores,
            "relu was applied after a negative factor or as abs(s): negative scores must give weight 0":
                scale * num_keys ** -alpha * np.abs(scores),
        })
        factors = {"L^alpha / scale: the factor scale * L^-alpha is missing": num_keys ** alpha / scale,
                   "L^(2 alpha): L^alpha multiplies instead of dividing": num_keys ** (2 * alpha),
                   "1 / scale: the scale is missing": 1.0 / scale,
                   "1 / scale^2: the scale divides instead of multiplying": 1.0 / scale ** 2}
        message = diagnose(f"alpha={alpha:g}, scale={scale:.3g}", got, expected, factors=factors, mistakes=mistakes)
        problems.append(message)
    report("pointwise_weights", problems, POINTWISE_HINT)
    passed("pointwise_weights", f"scale * L^-alpha * relu(s) right for alpha, scale = "
                                f"{', '.join(f'({a:g}, {s:.3g})' for a, s in cases)}")


def _expectation_mistakes(kind: str) -> dict:
    """{wrong value: why} for the slips of a numerical E[h(z)]."""
    z = np.linspace(-12.0, 12.0, 240_001)  # (G,)
    h = attention_weights.pointwise(kind, z)  # (G,)
    density = np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)  # (G,)
    right = _integral(h * density, z)
    return {right * math.sqrt(2.0 * math.pi): "the density's 1/sqrt(2 pi) is missing: phi(z) = e^(-z^2/2) / "
                                              "sqrt(2 pi)",
            _integral(h[z >= 0] * density[z >= 0], z[z >= 0]): "that integrates over z > 0 only; integrate over "
                                                                "the whole line",
            _integral(h * h * density, z): "that is E[h(z)^2]; the row sum needs E[h(z)]"}


@checker
def check_expected_activation(student_expectation) -> dict:
    """student_expectation(kind) -> E[h(z)] for z ~ N(0, 1), for kind in relu, relu2, gelu, softplus,
    sigmoid (reluattn's definitions: GELU is the tanh approximation). Returns {kind: reference}."""
    hints = {"relu": {1.0 / (2.0 * math.pi): "that is 1/(2 pi); E[relu(z)] = phi(0) = 1/sqrt(2 pi)",
                      0.5: "1/2 is P(z > 0) or E[relu(z)^2]; E[relu(z)] = integral_0^inf z phi(z) dz = phi(0)",
                      2.0 / math.sqrt(2.0 * math.pi): "that is E|z|, twice E[relu(z)]: relu keeps only z > 0"},
             "relu2": {1.0: "that is E[z^2] over the whole line; relu keeps only z > 0, so half of it"}}
    problems, references = [], {}
    for kind in EXPECTATION_KINDS:
        expected = expected_activation(kind)
        references[kind] = expected
        got = call_student(student_expectation, "expected_activation", kind)
        try:
            got = float(got)
        except (TypeError, ValueError):
            raise ExerciseFailed(f"expected_activation({kind!r}) should return a number, got {type(got).__name__}")
        if abs(got - expected) <= EXPECTATION_TOLERANCE * abs(expected):
            continue
        known = [*hints.get(kind, {}).items(), *_expectation_mistakes(kind).items()]  # the specific ones first
        hint = next((text for value, text in known if abs(got - value) <= 1e-3 * max(abs(value), 1e-3)), None)
        problems.append(f"E[{kind}(z)]: got {got:.6g}, expected {expected:.6g}" + (f" — {hint}" if hint else
                        " (integrate h(z) phi(z) on a fine grid, e.g. np.linspace(-12, 12, 200001))"))
    report("expected_activation", problems)
    passed("expected_activation", ", ".join(f"E[{kind}] = {value:.4f}" for kind, value in references.items()))
    return references


@checker
def check_output_variance(student_variance, seed: int = 0) -> None:
    """student_variance(num_keys, alpha, scale) -> the predicted Var(o) of relu attention's output,
    o = scale * L^-alpha * sum_j relu(s_j) v_j with s, v ~ N(0, 1); also checked against a simulation."""
    cases = [(num_keys, alpha, scale) for num_keys in (16, 256, 4096) for alpha in (0.0, 0.5, 1.0, 1.5)
             for scale in (1.0, math.sqrt(2.0))]
    got = [call_student(student_variance, "output_variance", *case) for case in cases]
    try:
        got = np.array([float(value) for value in got])  # (cases,)
    except (TypeError, ValueError):
        raise ExerciseFailed("output_variance should return one number for each (num_keys, alpha, scale)")
    num_keys, alpha, scale = (np.array(column, dtype=np.float64) for column in zip(*cases))
    expected = output_variance(num_keys, alpha, scale)  # (cases,)
    mistakes = {
        "the scale must be squared: Var(c X) = c^2 Var(X)": scale * num_keys ** (1 - 2 * alpha) / 2,
        "the length factor enters squared: L^(-2 alpha), times L terms in the sum":
            scale ** 2 * num_keys ** (1 - alpha) / 2,
        "the sum over the L keys is missing: Var(o) = sum_j E[w_j^2] Var(v_j), L equal terms":
            scale ** 2 * num_keys ** (-2 * alpha) / 2,
        "that uses E[relu(z)]^2 = 1/(2 pi); the variance needs E[relu(z)^2] = 1/2 (v has mean 0)":
            scale ** 2 * num_keys ** (1 - 2 * alpha) / (2 * math.pi),
        "that is the standard deviation; the variance is its square": scale * num_keys ** (0.5 - alpha) / math.sqrt(2),
        "the scale is missing: Var(scale * X) = scale^2 Var(X)": num_keys ** (1 - 2 * alpha) / 2,
        "that uses Var(relu(z)) = 1/2 - 1/(2 pi); v has mean 0, so each term's variance is E[w^2] E[v^2], "
        "with E[relu(z)^2] = 1/2": scale ** 2 * num_keys ** (1 - 2 * alpha) * (0.5 - 1 / (2 * math.pi)),
    }
    report("output_variance", [diagnose("output_variance over (num_keys, alpha, scale) cases", got, expected,
                                        factors={"2: E[relu(z)^2] = 1/2, not 1": 2.0,
                                                 "1/2: E[relu(z)^2] = 1/2 was counted twice": 0.5},
                                        mistakes=mistakes)],
           "re-derive it from Var(o) = E[sum_j w_j^2] (the v_j have variance 1): how many terms, what is one "
           "term for w_j = scale * L^-alpha * relu(s_j), and what is E[relu(z)^2] (§2)?")
    rng = np.random.default_rng(seed)
    scores, values = rng.normal(size=(2, 20_000, 256))  # (2, samples, L)
    simulated = float(np.var((np.maximum(scores, 0) * values).sum(-1) / 256))  # alpha = 1, scale = 1
    predicted = float(output_variance(256, 1.0))
    if abs(simulated / predicted - 1.0) > 0.05:
        raise RuntimeError(f"simulation {simulated:.4g} disagrees with the formula {predicted:.4g}; please report")
    passed("output_variance", f"scale^2 L^(1 - 2 alpha) / 2 for every case; a simulation at L = 256, alpha = 1 "
                              f"gives {simulated:.3e} against the predicted {predicted:.3e}")
