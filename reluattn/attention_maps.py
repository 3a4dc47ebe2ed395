"""Readings of attention weights shared by the trainer's statistics, the attention figures and the course
checkers: pure NumPy, so that the graders and the trainer can both import them without importing each other.

    top_slot_count(M, fraction)   how many of M slots "the top fraction" means: max(1, round(fraction * M))
    top_share(weights, fraction)  weights (..., M) >= 0 -> (...,): the share of each row's total weight held
                                  by its top_slot_count(M, fraction) largest entries (0 for an all-zero row)
    attention_rollout(attention)  list of (H, T, T) weights, one per block -> (T, T) (Abnar & Zuidema 2020)
"""

from __future__ import annotations

import numpy as np


def top_slot_count(num_slots: int, fraction: float) -> int:
    """How many slots "the top `fraction`" of `num_slots` means: max(1, round(fraction * num_slots))."""
    return max(1, int(round(fraction * num_slots)))


def top_share(weights, fraction):
    """Share of each row's total weight held by its largest top_slot_count(M, fraction) entries."""
    weights = np.asarray(weights, dtype=np.float64)
    count = top_slot_count(weights.shape[-1], fraction)
    largest = np.partition(weights, -count, axis=-1)[..., -count:]  # (..., k)
    total = weights.sum(axis=-1)  # (...,)
    return np.divide(largest.sum(axis=-1), total, out=np.zeros_like(total), where=total > 0)  # (...,)


def attention_rollout(attention: list) -> np.ndarray:
    """Attention rollout (Abnar & Zuidema 2020): the product over blocks of 0.5 * A + 0.5 * I, with A the
    head-averaged weights. Point-wise kinds (relu / L, ...) do not make rows that sum to 1, so each row of
    |A| is normalised to sum 1 first; for softmax this changes nothing. Returns (T, T)."""
    tokens = attention[0].shape[-1]
    rollout = np.eye(tokens)
    for weights in attention:  # (H, T, T) each
        average = np.abs(np.asarray(weights, dtype=np.float64)).mean(axis=0)  # (T, T)
        sums = average.sum(axis=-1, keepdims=True)  # (T, 1)
        average = np.divide(average, sums, out=np.zeros_like(average), where=sums > 0)  # (T, T)
        rollout = (0.5 * average + 0.5 * np.eye(tokens)) @ rollout  # (T, T)
    return rollout
