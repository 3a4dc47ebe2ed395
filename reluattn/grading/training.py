"""Checkers for notebook 04 (training on CIFAR-10): the standard error of a measured accuracy, and
attention rollout.

References:
    accuracy_standard_error(accuracy, n)   sqrt(p (1 - p) / n), the binomial standard error
    attention_rollout(attention)            list of (H, T, T) weights, one per block -> (T, T):
        R = prod over blocks (first block rightmost) of 0.5 * A + 0.5 * I, with A the block's head-averaged
        |weights|, each row normalised to sum 1 (a row of zeros stays zero). This is what
        `reluattn.attention_maps.attention_rollout` computes (Abnar & Zuidema 2020, made safe for point-wise kinds).
"""

from __future__ import annotations

import math

import numpy as np

from ..attention_maps import attention_rollout  # the reference answer, the one the attention figures use
from .feedback import ExerciseFailed, call_student, checker, diagnose, passed, report


def accuracy_standard_error(accuracy, n):
    """The binomial standard error of an accuracy measured on n independent images."""
    return math.sqrt(accuracy * (1.0 - accuracy) / n)


@checker
def check_accuracy_standard_error(student_error) -> None:
    """student_error(accuracy, n) -> the standard error of the accuracy, for several accuracies and n."""
    cases = [(0.4, 2000), (0.9, 500), (0.5, 10000), (0.123, 777), (0.0, 100), (1.0, 100)]
    got = []
    for accuracy, n in cases:
        value = call_student(student_error, "accuracy_standard_error", accuracy, n)
        try:
            got.append(float(value))
        except (TypeError, ValueError):
            raise ExerciseFailed(f"accuracy_standard_error({accuracy}, {n}) should return a number, got "
                                 f"{type(value).__name__}") from None
    p, n = (np.array(column, dtype=np.float64) for column in zip(*cases))
    expected = np.sqrt(p * (1 - p) / n)  # (cases,)
    mistakes = {
        "that is the variance p (1 - p) / n; the standard error is its square root": p * (1 - p) / n,
        "the standard error of a proportion is sqrt(p (1 - p) / n), not sqrt(p / n)": np.sqrt(p / n),
        "that is the standard deviation of one image's result, sqrt(p (1 - p)); divide by n inside the root":
            np.sqrt(p * (1 - p)),
        "divide by n, not n - 1: the binomial variance of the count is n p (1 - p)": np.sqrt(p * (1 - p) / (n - 1)),
        "that is in percentage points; return a fraction, like the accuracy": 100 * np.sqrt(p * (1 - p) / n),
        "that is sqrt(p / n) for the error rate, sqrt((1 - p) / n); the binomial variance has both p and 1 - p":
            np.sqrt((1 - p) / n),
    }
    report("accuracy_standard_error", [diagnose("accuracy_standard_error over (accuracy, n) cases", np.array(got),
                                                expected, mistakes=mistakes)],
           "the number right out of n is binomial(n, p), with variance n p (1 - p); the accuracy is that count "
           "divided by n")
    passed("accuracy_standard_error", "sqrt(p (1 - p) / n) for every case, 0 at p = 0 and p = 1")


def _rollout_mistakes(attention) -> dict:
    tokens = attention[0].shape[-1]
    identity = np.eye(tokens)
    normalised, raw = [], []
    for weights in attention:
        average = np.abs(weights).mean(axis=0)  # (T, T)
        sums = average.sum(axis=-1, keepdims=True)
        normalised.append(np.divide(average, sums, out=np.zeros_like(average), where=sums > 0))
        raw.append(weights.mean(axis=0))

    def product(matrices, mix=lambda a: 0.5 * a + 0.5 * identity, reverse=False):
        result = identity
        for matrix in matrices:
            result = result @ mix(matrix) if reverse else mix(matrix) @ result
        return result

    return {
        "the residual is missing: each block mixes by 0.5 A + 0.5 I, not by A alone":
            product(normalised, mix=lambda a: a),
        "each block should mix by 0.5 A + 0.5 I (an average of attention and residual), not A + I":
            product(normalised, mix=lambda a: a + identity),
        "the product is in the wrong order: the first block acts first, so it is the rightmost factor "
        "(rollout = (0.5 A + 0.5 I) @ rollout)": product(normalised, reverse=True),
        "the rows were not normalised: relu / L rows do not sum to 1; normalise each row of |A| to sum 1 first":
            product([np.abs(weights).mean(axis=0) for weights in attention]),
        "each head's rows were normalised before averaging over heads; average |weights| over the heads first, "
        "then normalise the rows": product([np.mean([np.divide(a, a.sum(-1, keepdims=True), out=np.zeros_like(a),
                                                               where=a.sum(-1, keepdims=True) > 0)
                                                     for a in np.abs(weights)], axis=0) for weights in attention]),
        "take the absolute value of the weights before normalising: some kinds (gelu, identity) give negative "
        "weights": product([np.divide(a, a.sum(-1, keepdims=True), out=np.zeros_like(a),
                                      where=a.sum(-1, keepdims=True) != 0) for a in raw]),
    }


@checker
def check_attention_rollout(student_rollout, seed: int = 0) -> None:
    """student_rollout(attention) -> (T, T) for attention a list of (H, T, T) arrays, one per block; graded
    on softmax-like, relu-like (with a row of zeros) and signed (identity-like) weights."""
    rng = np.random.default_rng(seed)
    heads, tokens, depth = 3, 6, 3
    softmax_like = [np.exp(rng.normal(size=(heads, tokens, tokens))) for _ in range(depth)]
    softmax_like = [w / w.sum(-1, keepdims=True) for w in softmax_like]
    relu_like = [np.maximum(rng.normal(size=(heads, tokens, tokens)), 0.0) / tokens for _ in range(depth)]
    relu_like[1][:, 2, :] = 0.0  # a query whose scores were all negative, in every head: a row of zeros
    signed = [rng.normal(size=(heads, tokens, tokens)) / tokens for _ in range(depth)]
    problems = []
    for name, attention in (("softmax weights", softmax_like), ("relu / L weights", relu_like),
                            ("signed weights (identity kind)", signed)):
        got = call_student(student_rollout, "attention_rollout", attention)
        if np.shape(got) == (tokens, tokens) and not np.all(np.isfinite(np.asarray(got, dtype=np.float64))):
            problems.append(f"{name}: the rollout holds NaN or inf — a row of zeros divided by its sum 0? Leave such "
                            f"rows at zero (np.divide with where=sums > 0)")
            continue
        problems.append(diagnose(name, got, attention_rollout(attention), mistakes=_rollout_mistakes(attention)))
    report("attention_rollout", problems, "A = each block's |weights| averaged over heads, rows normalised to sum 1 "
                                          "(rows of zeros stay zero); multiply the mixings 0.5 A + 0.5 I with the first "
                                          "block rightmost")
    passed("attention_rollout", "right for softmax, relu / L (with a row of zeros) and signed weights, "
                                f"{depth} blocks of {heads} heads")
