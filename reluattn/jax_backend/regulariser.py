"""ReLUFormer's attention regulariser R; its gradient is jax.grad's (shapes: legend in the NumPy backend's
__init__.py). The formula, its provenance (a secondary reading of Shen et al. 2023) and the guard at
all-zero rows are the NumPy twin's (numpy_backend/regulariser.py):

    r_i = |log max(S_i, floor)| + max(0, H(p_i) - c log n_i),   p_i = w_i / max(S_i, floor),   0 log 0 = 0

The kinks follow the NumPy convention (derivative 0 at |0|, at max(0, 0) and at S = floor), and the
zero entries of p take the "double where" so that their gradient is 0 rather than 0 * inf = nan.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

ROW_SUM_FLOOR = 1e-6  # as in the NumPy twin: row sums below this count as this in log S and w / S


def _log(num_keys):
    """log n: a Python float for a number, else per-query logs (T, 1) for causal counts."""
    return math.log(num_keys) if isinstance(num_keys, (int, float)) else jnp.log(num_keys)


def attention_regulariser(weights, attn_cfg, num_keys=None):
    """R of one block: the mean over rows of |log S_i| + max(0, H(p_i) - c log n_i), a 0-d array.
    weights (..., T, L), non-negative; num_keys: n, a number (default L) or per-query counts (T, 1)."""
    num_keys = weights.shape[-1] if num_keys is None else num_keys
    row_sums = weights.sum(axis=-1, keepdims=True)  # (..., T, 1)
    floored = jnp.where(row_sums > ROW_SUM_FLOOR, row_sums, ROW_SUM_FLOOR)  # (..., T, 1), derivative 0 below
    probabilities = weights / floored  # (..., T, L)
    positive = probabilities > 0
    safe = jnp.where(positive, probabilities, 1.0)  # (..., T, L): 0 log 0 = 0, with a finite gradient
    entropy = -jnp.sum(jnp.where(positive, probabilities * jnp.log(safe), 0.0), axis=-1, keepdims=True)  # (..., T, 1)
    excess = entropy - attn_cfg.entropy_margin * _log(num_keys)  # (..., T, 1)
    log_sums = jnp.log(floored)  # (..., T, 1)
    # |log S| as sign * log S: derivative sign(log S), 0 at S = 1 as in NumPy (jnp.abs has derivative 1 at 0).
    return jnp.mean(jnp.sign(log_sums) * log_sums + jax.nn.relu(excess))
