"""ReLUFormer's attention regulariser R, forward and hand-written backward (shapes: legend in __init__.py).

Provenance: Shen et al. (2023, ReLUFormer) regularise the rows of their ReLU attention weights; the paper's
abstract does not give the form, so what follows is a secondary reading (summaries of the paper, which
disagree on the details; the constant 0.7 is one of those details). For each attention row i with
weights w_i over the n_i keys query i sees:

    S_i = sum_j w_ij,   p_i = w_i / S_i,   H(p_i) = -sum_j p_ij log p_ij
    r_i = |log S_i| + max(0, H(p_i) - c log n_i)          c = AttentionConfig.entropy_margin (0.7)

The first term pulls each row sum towards 1 (softmax's); the second caps the entropy, so a row cannot
spread its mass evenly over all keys. R of one block is the mean of r_i over (B, H, T); the model's R is
the mean over blocks, and its loss is cross-entropy + reg_weight * R (model.py).

The guard: a relu row can be all zeros (every score negative), where log S and w / S are undefined. Both
use S clamped from below, max(S, ROW_SUM_FLOOR), and 0 log 0 = 0; so an all-zero row adds |log 1e-6| =
13.8 to its r_i, with gradient 0 (as is the clamp's where S < floor), and the loss and its gradient stay
finite. The derivative of |.| at 0, of max(0, .) at 0 and of the clamp at S = floor is 0 (JAX's twin agrees).
Softmax rows sum to 1, so for softmax R is the entropy term alone.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

ROW_SUM_FLOOR = 1e-6  # row sums below this count as this in log S and w / S (all-zero relu rows)


def _log(num_keys):
    """log n: a Python float for a number, else per-query logs (T, 1) for causal counts."""
    return math.log(num_keys) if np.ndim(num_keys) == 0 else np.log(num_keys)


class AttentionRegulariserCache(NamedTuple):
    weights: np.ndarray        # (..., T, L) the attention weights
    row_sums: np.ndarray       # (..., T, 1) S, unclamped
    floored: np.ndarray        # (..., T, 1) max(S, ROW_SUM_FLOOR)
    probabilities: np.ndarray  # (..., T, L) p = w / max(S, floor)
    log_sums: np.ndarray       # (..., T, 1) log max(S, floor)
    excess: np.ndarray         # (..., T, 1) H(p) - c log n


def attention_regulariser_forward(weights, attn_cfg, num_keys=None):
    """R of one block: the mean over rows of r_i (regulariser_rows), a float.
    weights (..., T, L), non-negative; num_keys: n, a number (default L) or per-query counts (T, 1)."""
    rows, cache = regulariser_rows(weights, attn_cfg.entropy_margin, num_keys)  # (..., T, 1)
    return float(np.mean(rows)), cache


def regulariser_rows(weights, entropy_margin, num_keys=None):
    """r_i = |log S_i| + max(0, H(p_i) - c log n_i) of every row, (..., T, 1), and the backward's cache.
    The one NumPy home of the formula: the trainer's attention statistics read it too."""
    num_keys = weights.shape[-1] if num_keys is None else num_keys
    row_sums = weights.sum(axis=-1, keepdims=True)  # (..., T, 1)
    floored = np.maximum(row_sums, ROW_SUM_FLOOR)  # (..., T, 1): log and division stay finite on zero rows
    probabilities = weights / floored  # (..., T, L)
    positive = probabilities > 0
    safe = np.where(positive, probabilities, 1.0)  # (..., T, L): log of 1 where p = 0, so 0 log 0 = 0
    entropy = -np.sum(probabilities * np.log(safe), axis=-1, keepdims=True)  # (..., T, 1)
    excess = entropy - entropy_margin * _log(num_keys)  # (..., T, 1)
    log_sums = np.log(floored)  # (..., T, 1)
    rows = np.abs(log_sums) + np.maximum(excess, 0.0)  # (..., T, 1)
    return rows, AttentionRegulariserCache(weights, row_sums, floored, probabilities, log_sums, excess)


def attention_regulariser_backward(dvalue, cache):
    """Returns dweights (..., T, L), the gradient of dvalue * R."""
    weights, row_sums, floored, probabilities, log_sums, excess = cache
    drow = dvalue / log_sums.size  # each row's share of the mean
    # Differentiates |log max(S, floor)|: sign / max(S, floor).
    dfloored = drow * np.sign(log_sums) / floored  # (..., T, 1)
    # Differentiates max(0, H - c log n), then H = -sum p log p (dH/dp = -(log p + 1), 0 where p = 0).
    dentropy = drow * (excess > 0)  # (..., T, 1)
    positive = probabilities > 0
    dprobabilities = -dentropy * np.where(positive, np.log(np.where(positive, probabilities, 1.0)) + 1.0, 0.0)
    # Differentiates p = w / max(S, floor): directly, and through the row sum.
    dfloored = dfloored - np.sum(dprobabilities * weights, axis=-1, keepdims=True) / floored ** 2  # (..., T, 1)
    dweights = dprobabilities / floored  # (..., T, L)
    # Differentiates max(S, floor) (1 where S > floor), then S = sum_j w_j (every weight of the row).
    return dweights + dfloored * (row_sums > ROW_SUM_FLOOR)  # (..., T, L)
