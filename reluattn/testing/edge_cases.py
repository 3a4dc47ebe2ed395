"""The fixed cases every attention check runs before its drawn ones, so that the classic bugs are caught on
every run, not on some: scores exactly at the kinks of relu (0) and relu6 (0 and 6), a zero query row (a row
of zero scores), a zero key row (a column of them), and queries whose every score is negative (relu rows of
exact zeros). A wrong relu'(0) -- jnp.maximum(s, 0) gives 1/2 there, s >= 0 gives 1 -- changes dq, dk at
once on these.

    edge_inputs(dtype)                 the fixed AttentionInputs (profile "edge")
    edge_cases(kinds, dtype, ...)      AttentionCases: each kind on them, causal too when asked
"""

from __future__ import annotations

import numpy as np

from ..config import AttentionConfig
from .strategies import AttentionCase, AttentionInputs, check_kinds
from .tolerances import resolve_dtype

# Head width 4, so scores are q.k / 2: exact in every float dtype for these small integers.
KINK_QUERIES = np.array([[0, 0, 0, 0],     # a zero query: every score 0
                         [3, 3, 0, 0],     # scores 6 (relu6's upper kink), 0, 0, 1.5
                         [0, 0, 1, 1],     # scores 0, 0, 0, 1
                         [-1, -1, 0, 0]])  # scores -2, 0, 0, -0.5
KINK_KEYS = np.array([[2, 2, 0, 0],
                      [0, 0, 1, -1],       # orthogonal to queries 0, 1 and 2: exact zeros
                      [0, 0, 0, 0],        # a zero key: a column of zero scores
                      [1, 0, 1, 1]])
NEGATIVE_QUERIES = np.array([[-1, 0, 0, 0], [-2, 0, 0, 0], [1, 0, 0, 0], [-1, 0, 0, 0]])  # rows 0, 1, 3: all < 0
NEGATIVE_KEYS = np.array([[1, 1, 0, 0], [2, 0, 1, 0], [1, -1, 0, 1], [3, 0, 0, -1]])  # first entries all > 0


def edge_inputs(dtype=np.float32):
    """The fixed AttentionInputs, profile "edge", (2, 4, 2, 4): batch 0 holds the kinks (``KINK_*``), batch 1 the
    all-negative rows (``NEGATIVE_*``); head 1 is head 0 with its rows reversed; v and dout are fixed random
    values (seed 0). One input, so a compiled fn compiles once for it."""
    rng = np.random.default_rng(0)
    q = np.stack([np.stack([rows, rows[::-1]], axis=1) for rows in (KINK_QUERIES, NEGATIVE_QUERIES)])  # (2, 4, 2, 4)
    k = np.stack([np.stack([rows, rows[::-1]], axis=1) for rows in (KINK_KEYS, NEGATIVE_KEYS)])  # (2, 4, 2, 4)
    v, dout = (rng.normal(size=q.shape) for _ in range(2))  # (2, 4, 2, 4)
    dtype = resolve_dtype(dtype)
    return AttentionInputs(*(x.astype(np.float64).astype(dtype) for x in (q, k, v, dout)), "edge", 0)


def edge_cases(kinds=None, dtype=np.float32, *, causal=False, causal_lengths=("per_query",), block_size=None):
    """Each kind (alpha 1, scale 1) on the edge inputs, then (causal=True) causally with the first causal
    length; block_size: the block_size argument, for tiled functions (2: tiles of the 4 keys)."""
    inputs, cases = edge_inputs(dtype), []
    for kind in check_kinds(kinds):
        cfg = AttentionConfig(kind=kind)
        cases.append(AttentionCase(inputs, cfg, block_size=block_size))
        if causal:
            cases.append(AttentionCase(inputs, cfg, True, tuple(causal_lengths)[0], block_size))
    return cases
