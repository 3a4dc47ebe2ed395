"""Statistics over the seeds of a sweep: each cell's mean and spread, and the tests behind the verdicts.

    compare(a, b)                      is mean(b) - mean(a) different from 0? Welch's t, or the pooled t
    holm(p_values)                     which of a family of tests reject, Holm-Bonferroni
    equivalent(a, b, margin)           is |mean(b) - mean(a)| < margin? two one-sided tests (TOST)
    beyond_margin(result)              ... or does it lie beyond the margin? the one-sided p that contradicts it
    pooled_spread(cells)               the seed-to-seed standard deviation pooled over an experiment's cells
    spread_check(cells)                which cells' spread differs from the rest's (the pooled test's assumption)

`a` and `b` are the accuracies of two cells over their seeds (sequences of floats). Why a pooled spread:
with 2-3 seeds a cell's own standard deviation is itself very uncertain (one degree of freedom at n = 2), and
seed noise is about the same in every cell of an experiment, so the spread pooled over all its cells, with
its many degrees of freedom, gives a far more powerful test at the same false-positive rate.
tests/study/test_statistics.py draws null data and checks that each test rejects at most 5 % of the time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

# The grid coordinates a cell can have (experiments.py's labels), in the results table's column order.
LABEL_COLUMNS = ("tokens", "kind", "alpha", "method", "dim", "depth", "qk_norm", "gated", "activation",
                 "mlp_dim", "alpha_start", "lr")


@dataclass(frozen=True)
class Comparison:
    """The answer of `compare` or `equivalent`: mean(b) - mean(a), its confidence interval and p-value."""
    difference: float          # mean(b) - mean(a)
    ci: tuple                  # (low, high): `level` two-sided interval (compare), 1 - 2(1 - level) (equivalent)
    p_value: float             # two-sided (compare); the larger one-sided p of the two tests (equivalent)
    resolved: bool             # p_value < 1 - level: a difference (compare) or equivalence (equivalent) shown
    standard_error: float      # of the difference
    df: float                  # degrees of freedom of the t distribution used
    n: tuple                   # seeds (len(a), len(b))
    margin: float | None = None  # equivalent only: the margin it was tested against

    def to_dict(self) -> dict:
        return {"difference": self.difference, "ci": list(self.ci), "p_value": self.p_value,
                "resolved": self.resolved, "standard_error": self.standard_error, "df": self.df,
                "n": list(self.n), "margin": self.margin}


def _values(x, name: str) -> np.ndarray:
    values = np.asarray(x, dtype=float).ravel()  # (n,)
    if values.size < 1 or not np.all(np.isfinite(values)):
        raise ValueError(f"{name} must hold at least one finite accuracy, got {x!r}")
    return values


def _error_and_df(a, b, pooled_sd, pooled_df) -> tuple[float, float]:
    """The standard error of mean(b) - mean(a) and its degrees of freedom."""
    if (pooled_sd is None) != (pooled_df is None):
        raise ValueError("pass pooled_sd and pooled_df together (pooled_spread gives both), or neither")
    if pooled_sd is not None:  # the pooled-variance t: one spread for every cell of the experiment
        if pooled_df < 1:
            raise ValueError(f"pooled_df must be >= 1, got {pooled_df}")
        return float(pooled_sd) * math.sqrt(1 / a.size + 1 / b.size), float(pooled_df)
    if min(a.size, b.size) < 2:
        raise ValueError("Welch's t needs at least 2 seeds in each cell; pass a pooled spread for fewer")
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    error = math.sqrt(va + vb)
    if error == 0:
        return 0.0, float(a.size + b.size - 2)
    df = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))  # Welch-Satterthwaite
    return error, df


def _two_sided(difference, error, df, level, n) -> Comparison:
    """The two-sided t-test of `difference` with standard error `error` on `df` degrees of freedom."""
    if error == 0:  # identical seeds everywhere: any difference is certain, none is nothing
        p = 1.0 if difference == 0 else 0.0
        return Comparison(difference, (difference, difference), p, p < 1 - level, 0.0, df, n)
    p = float(2 * stats.t.sf(abs(difference / error), df))
    half = float(stats.t.ppf(0.5 + level / 2, df)) * error
    return Comparison(difference, (difference - half, difference + half), p, p < 1 - level, error, df, n)


def _one_sided_pair(difference, error, df, margin, level, n) -> Comparison:
    """Two one-sided t-tests of |difference| < margin (TOST) with its 1 - 2(1 - level) interval."""
    if not (isinstance(margin, (int, float)) and margin > 0 and math.isfinite(margin)):
        raise ValueError(f"margin must be a positive number, got {margin!r}")
    if error == 0:
        p = 0.0 if abs(difference) < margin else 1.0
        return Comparison(difference, (difference, difference), p, p < 1 - level, 0.0, df, n, float(margin))
    p_lower = float(stats.t.sf((difference + margin) / error, df))   # H0: difference <= -margin
    p_upper = float(stats.t.cdf((difference - margin) / error, df))  # H0: difference >= +margin
    p = max(p_lower, p_upper)
    half = float(stats.t.ppf(level, df)) * error
    return Comparison(difference, (difference - half, difference + half), p, p < 1 - level, error, df, n,
                      float(margin))


def compare(a, b, *, pooled_sd=None, pooled_df=None, level: float = 0.95) -> Comparison:
    """Is mean(b) - mean(a) different from zero? Welch's t-test when no pooled spread is given, the
    pooled-variance t-test (standard error pooled_sd * sqrt(1/n_a + 1/n_b), pooled_df degrees of freedom)
    when it is. `resolved` means the two-sided p-value is below 1 - level."""
    a, b = _values(a, "a"), _values(b, "b")
    error, df = _error_and_df(a, b, pooled_sd, pooled_df)
    return _two_sided(float(b.mean() - a.mean()), error, df, level, (a.size, b.size))


def equivalent(a, b, margin: float, *, pooled_sd=None, pooled_df=None, level: float = 0.95) -> Comparison:
    """Two one-sided tests: is mean(b) - mean(a) inside (-margin, +margin)? `resolved` (equivalence shown)
    when both one-sided p-values are below 1 - level, i.e. when the 1 - 2(1 - level) interval (90 % for
    level 0.95) lies inside the margins. The margin must be fixed before the runs."""
    a, b = _values(a, "a"), _values(b, "b")
    error, df = _error_and_df(a, b, pooled_sd, pooled_df)
    return _one_sided_pair(float(b.mean() - a.mean()), error, df, margin, level, (a.size, b.size))


def contrast(a_groups, b_groups, *, pooled_sd: float, pooled_df: float, margin: float | None = None,
             level: float = 0.95) -> Comparison:
    """The mean of the b cells' means minus the mean of the a cells' means (a main effect over a factorial
    design when there are several), with the pooled spread: a two-sided test, or TOST with `margin`."""
    a_groups = [_values(g, "a") for g in a_groups]
    b_groups = [_values(g, "b") for g in b_groups]
    difference = float(np.mean([g.mean() for g in b_groups]) - np.mean([g.mean() for g in a_groups]))
    spread = sum(1 / g.size for g in a_groups) / len(a_groups) ** 2 + sum(1 / g.size for g in b_groups) / len(b_groups) ** 2
    error = float(pooled_sd) * math.sqrt(spread)
    n = (sum(g.size for g in a_groups), sum(g.size for g in b_groups))
    if margin is None:
        return _two_sided(difference, error, float(pooled_df), level, n)
    return _one_sided_pair(difference, error, float(pooled_df), margin, level, n)


def slope(pairs, *, pooled_sd: float, pooled_df: float, margin: float | None = None,
          level: float = 0.95) -> Comparison:
    """The slope of mean(b) - mean(a) against x over pairs [(x, a values, b values), ...], by weighted least
    squares (weights 1 / (1/n_a + 1/n_b)), with the pooled spread: a two-sided test, or TOST with `margin`."""
    xs = np.array([float(x) for x, _, _ in pairs])  # (k,)
    a_groups = [_values(a, "a") for _, a, _ in pairs]
    b_groups = [_values(b, "b") for _, _, b in pairs]
    d = np.array([b.mean() - a.mean() for a, b in zip(a_groups, b_groups)])  # (k,)
    w = np.array([1 / (1 / a.size + 1 / b.size) for a, b in zip(a_groups, b_groups)])  # (k,)
    x_bar, d_bar = (w * xs).sum() / w.sum(), (w * d).sum() / w.sum()
    spread = float((w * (xs - x_bar) ** 2).sum())
    if len(pairs) < 2 or spread == 0:
        raise ValueError("a slope needs at least two pairs at different x")
    estimate = float((w * (xs - x_bar) * (d - d_bar)).sum() / spread)
    error = float(pooled_sd) / math.sqrt(spread)
    n = (sum(g.size for g in a_groups), sum(g.size for g in b_groups))
    if margin is None:
        return _two_sided(estimate, error, float(pooled_df), level, n)
    return _one_sided_pair(estimate, error, float(pooled_df), margin, level, n)


def beyond_margin(result: Comparison) -> float:
    """The one-sided p-value that an equivalence result's difference lies beyond its margin, on the side of its
    estimate (H0: |difference| <= margin). The TOST p says nothing once the interval has left the margin (it is
    near 1 there); this one is below (1 - level) / 2 exactly when the two-sided `level` interval lies wholly
    outside the margin, the reading "contradicts" of a "matches" claim (verdicts.py)."""
    if result.margin is None:
        raise ValueError("beyond_margin needs an equivalence result (from equivalent, or contrast/slope with a margin)")
    excess = abs(result.difference) - result.margin
    if result.standard_error == 0:
        return 0.0 if excess > 0 else 1.0
    return float(stats.t.sf(excess / result.standard_error, result.df))


def holm(p_values, level: float = 0.05) -> list[bool]:
    """Which of a family of tests reject at family-wise error `level` (Holm-Bonferroni step-down): sort the
    p-values, reject while p_(i) <= level / (m - i), stop at the first that is not."""
    p = [float(value) for value in p_values]
    reject = [False] * len(p)
    for rank, index in enumerate(sorted(range(len(p)), key=lambda i: p[i])):
        if p[index] > level / (len(p) - rank):
            break
        reject[index] = True
    return reject


def holm_adjusted(p_values) -> list[float]:
    """Holm-adjusted p-values (reject at level L exactly where adjusted <= L): the running maximum of
    (m - i) p_(i) over the sorted p-values, capped at 1."""
    p = [float(value) for value in p_values]
    adjusted, running = [1.0] * len(p), 0.0
    for rank, index in enumerate(sorted(range(len(p)), key=lambda i: p[i])):
        running = max(running, min(1.0, (len(p) - rank) * p[index]))
        adjusted[index] = running
    return adjusted


def pooled_spread(groups) -> tuple[float | None, int]:
    """(pooled standard deviation, degrees of freedom) over groups of seed values: sqrt(sum (n_i - 1) s_i^2
    / sum (n_i - 1)); groups with one value add nothing. (None, 0) when no group has two values."""
    squares, df = 0.0, 0
    for values in groups:
        values = np.asarray(values, dtype=float).ravel()  # (n_i,)
        if values.size > 1:
            squares += float(((values - values.mean()) ** 2).sum())
            df += values.size - 1
    return (math.sqrt(squares / df), df) if df else (None, 0)


def spread_check(cells: dict, level: float = 0.05) -> list[dict]:
    """The pooled test's assumption, checked: is a cell's seed spread larger than the rest's? For each cell of
    >= 2 seeds, the one-sided F test of its variance against the variance pooled over the other cells,
    Holm-corrected over the cells. One-sided because a noisier cell is what the pooled test gets wrong (its
    intervals too narrow); a quieter one only makes it conservative. One record per cell: {"cell", "sd",
    "others_sd", "ratio" (sd / others_sd), "p", "p_holm", "differs" (Holm-rejected at level)}. A diagnostic
    beside the verdicts, not a verdict: F is sensitive to heavy tails as well as to spread."""
    named = {name: np.asarray(values, dtype=float).ravel() for name, values in cells.items()}
    records = []
    for name, values in named.items():
        others_sd, others_df = pooled_spread([v for other, v in named.items() if other != name])
        if values.size < 2 or others_sd is None:
            continue
        sd = float(values.std(ddof=1))
        if others_sd == 0:
            p = 1.0 if sd == 0 else 0.0
        else:
            p = float(stats.f.sf((sd / others_sd) ** 2, values.size - 1, others_df))
        records.append({"cell": name, "sd": sd, "others_sd": others_sd,
                        "ratio": sd / others_sd if others_sd else (1.0 if sd == 0 else math.inf), "p": p})
    for record, adjusted, rejected in zip(records, holm_adjusted([r["p"] for r in records]),
                                          holm([r["p"] for r in records], level)):
        record.update(p_holm=adjusted, differs=rejected)
    return records


def power(difference: float, sd: float, n: int, df: float, level: float = 0.95) -> float:
    """The chance that the pooled two-sided t-test at `level` resolves a true `difference` between two cells
    of `n` seeds each, with seed spread `sd` and `df` degrees of freedom (noncentral t)."""
    error = sd * math.sqrt(2 / n)
    critical = stats.t.ppf(0.5 + level / 2, df)
    shift = difference / error
    return float(stats.nct.sf(critical, df, shift) + stats.nct.cdf(-critical, df, shift))


def aggregate(rows: list[dict], value: str = "best_val_accuracy") -> dict:
    """{cell: {"mean", "std", "n", "values", "labels"}} over the seeds of each cell (finished runs only)."""
    groups = {}
    for row in rows:
        if row.get("status") == "done" and row.get(value) is not None:
            groups.setdefault(row["cell"], {"values": [], "labels": {k: row.get(k) for k in LABEL_COLUMNS}})
            groups[row["cell"]]["values"].append(float(row[value]))
    return {cell: {"mean": float(np.mean(g["values"])),
                   "std": float(np.std(g["values"], ddof=1)) if len(g["values"]) > 1 else 0.0,
                   "n": len(g["values"]), "values": g["values"], "labels": g["labels"]}
            for cell, g in groups.items()}


__all__ = ["Comparison", "LABEL_COLUMNS", "aggregate", "compare", "contrast", "equivalent", "holm", "holm_adjusted",
           "pooled_spread", "power", "slope", "spread_check"]
