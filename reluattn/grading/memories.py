"""Checkers for notebook 05 (key-value memories, Shen et al. 2023): a memory read and how concentrated
its weights are.

References:
    memory_read(x, keys, values, activation)   x (B, D), keys (D, M), values (M, E) -> (B, E):
        relu        relu(x keys) values
        softmax     softmax(x keys) values                    (softmax over the M slots)
        softmax_ln  LN(softmax(x keys) values)                (LayerNorm over E, no learned scale or bias)
    top_share(weights, fraction)   weights (..., M) >= 0 -> (...,): the share of each row's total weight
        held by its k = max(1, round(fraction * M)) largest entries (0 for a row that is all zeros)
"""

from __future__ import annotations

import numpy as np

from ..attention_maps import top_share, top_slot_count  # the references, shared with the trainer
from ..numpy_backend import layers
from .feedback import call_student, checker, diagnose, passed, report

MEMORY_ACTIVATIONS = ("relu", "softmax", "softmax_ln")


def memory_read(x, keys, values, activation):
    """A key-value memory read (see the module docstring)."""
    scores = x @ keys  # (B, M): how well x matches each key
    if activation == "relu":
        return np.maximum(scores, 0.0) @ values  # (B, E)
    if activation == "softmax":
        return layers.softmax(scores) @ values  # (B, E)
    if activation == "softmax_ln":
        read = layers.softmax(scores) @ values  # (B, E)
        return layers.layernorm_forward(read, {"scale": np.ones(read.shape[-1])})[0]  # (B, E)
    raise ValueError(f"activation must be one of {', '.join(MEMORY_ACTIVATIONS)}; got {activation!r}")


@checker
def check_memory_read(student_read, seed: int = 0) -> None:
    """student_read(x, keys, values, activation) -> (B, E) for activation in relu, softmax, softmax_ln."""
    rng = np.random.default_rng(seed)
    x, keys, values = rng.normal(size=(4, 6)), rng.normal(size=(6, 10)), rng.normal(size=(10, 5))  # D 6, M 10, E 5
    problems = []
    for activation in MEMORY_ACTIVATIONS:
        expected = memory_read(x, keys, values, activation)  # (B, E)
        got = call_student(student_read, "memory_read", x, keys, values, activation)
        scores = x @ keys  # (B, M)
        by_batch = np.exp(scores) / np.exp(scores).sum(axis=0, keepdims=True)  # softmax over the wrong axis
        plain = layers.softmax(scores) @ values  # (B, E)
        mistakes = {
            "the softmax runs over the batch axis; it must run over the M slots (the last axis of x @ keys)":
                by_batch @ values,
            "the LayerNorm is missing: softmax_ln is LN(softmax(x keys) values)": plain,
            "the LayerNorm went on the softmax weights; it goes on the read, LN(softmax(x keys) values)":
                layers.layernorm_forward(layers.softmax(scores), {"scale": np.ones(10)})[0] @ values,
            "the LayerNorm normalises over the wrong axis: over E, each read's own features":
                (plain - plain.mean(0)) / np.sqrt(plain.var(0) + 1e-6),
            "relu went on the read instead of on the scores: relu(x keys) values": np.maximum(scores @ values, 0),
        }
        problems.append(diagnose(f"memory_read(..., {activation!r})", got, expected, mistakes=mistakes))
    report("memory_read", problems, "scores = x @ keys (B, M); weights relu(scores) or the softmax over the M slots; "
                                    "the read is weights @ values (B, E); softmax_ln adds a LayerNorm of the read over E")
    passed("memory_read", f"right for {', '.join(MEMORY_ACTIVATIONS)}")


@checker
def check_top_share(student_share, seed: int = 0) -> None:
    """student_share(weights, fraction) -> (...,) shares, for relu-like weights (zeros included) and
    several fractions."""
    rng = np.random.default_rng(seed)
    weights = np.maximum(rng.normal(size=(3, 4, 1000)), 0.0) * rng.uniform(0.5, 2.0, size=(3, 4, 1))  # (B, T, M)
    weights[0, 0] = 0.0  # a row where relu cut every score: no weight at all
    problems = []
    for fraction in (0.002, 0.01, 0.1):
        expected = top_share(weights, fraction)  # (B, T)
        count = top_slot_count(weights.shape[-1], fraction)
        ordered = np.sort(weights, axis=-1)  # (B, T, M)
        total = np.maximum(weights.sum(-1), 1e-300)  # (B, T); the all-zero row gives 0 below
        mistakes = {
            "that is the sum of the top weights; divide by the row's total weight": ordered[..., -count:].sum(-1),
            "those are the smallest weights, not the largest": ordered[..., :count].sum(-1) / total,
            f"that takes {count + 1} slots; the top {fraction:g} of M = 1000 slots is "
            f"max(1, round({fraction:g} * M)) = {count}": ordered[..., -(count + 1):].sum(-1) / total,
            "that is the share of the slots, not of the weight: sum the largest weights themselves":
                np.full(weights.shape[:-1], count / weights.shape[-1]),
        }
        got = call_student(student_share, "top_share", weights, fraction)
        if np.shape(got) == expected.shape and not np.isfinite(np.asarray(got, dtype=np.float64)[0, 0]):
            problems.append(f"top_share(weights, {fraction:g}) is {got[0, 0]} for a row whose weights are all 0; "
                            f"such a row has no mass to share: return 0 for it (np.divide with where=total > 0)")
            continue
        problems.append(diagnose(f"top_share(weights, {fraction:g})", got, expected, mistakes=mistakes))
    report("top_share", problems, "per row: the sum of its k = max(1, round(fraction * M)) largest weights, divided by "
                                  "the row's total weight")
    passed("top_share", "right for fractions 0.002, 0.01 and 0.1 of M = 1000 slots")
