"""The study's tests: calibrated on null data (a difference that is not there is reported at most 5 % of the
time, within Monte-Carlo error), checked against scipy's own t-tests, and the old "2 standard errors" rule
shown to fail the same calibration."""

import math

import numpy as np
import pytest
from scipy import stats

from reluattn.study import compare, equivalent, holm
from reluattn.study.statistics import beyond_margin, holm_adjusted, pooled_spread, power, spread_check

SIMULATIONS = 4000
# The false-positive rate may exceed 5 % by three Monte-Carlo standard errors at most (0.0034 at 4,000 draws).
TOLERANCE = 3 * math.sqrt(0.05 * 0.95 / SIMULATIONS)
CELLS = 10  # cells of a simulated experiment, for the pooled spread


def old_two_standard_error_rule(a, b) -> bool:
    """The rule the study used before: |difference| > 2 Welch standard errors."""
    error = math.sqrt(np.var(a, ddof=1) / len(a) + np.var(b, ddof=1) / len(b))
    return abs(np.mean(b) - np.mean(a)) > 2 * error


def null_rate(n: int, pooled: bool, rule=None, spreads=(1.0, 1.0), seed=0) -> float:
    """How often a test resolves a difference between two cells of n seeds with equal means."""
    rng = np.random.default_rng([seed, n, pooled])
    hits = 0
    for _ in range(SIMULATIONS):
        cells = rng.normal(0.0, 1.0, (CELLS, n))  # (cells, seeds): one experiment's grid under the null
        a, b = cells[0] * spreads[0], cells[1] * spreads[1]
        if rule is not None:
            hits += rule(a, b)
        elif pooled:
            sd, df = pooled_spread([a, b, *cells[2:]])
            hits += compare(a, b, pooled_sd=sd, pooled_df=df).resolved
        else:
            hits += compare(a, b).resolved
    return hits / SIMULATIONS


@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("pooled", [False, True], ids=["welch", "pooled"])
def test_false_positive_rate_is_at_most_five_percent(n, pooled):
    rate = null_rate(n, pooled)
    assert rate <= 0.05 + TOLERANCE, f"n={n}, pooled={pooled}: {rate:.3f} of null comparisons resolved"
    if pooled:  # exact under the null: not merely conservative
        assert rate >= 0.05 - TOLERANCE


@pytest.mark.parametrize("spreads", [(1.0, 2.0), (1.0, 4.0)])
def test_welch_stays_calibrated_when_the_spreads_differ(spreads):
    assert null_rate(3, pooled=False, spreads=spreads) <= 0.05 + TOLERANCE


@pytest.mark.parametrize("n, at_least", [(2, 0.15), (3, 0.09)])
def test_the_old_two_standard_error_rule_fails_the_calibration(n, at_least):
    rate = null_rate(n, pooled=False, rule=old_two_standard_error_rule)
    assert rate > 0.05 + TOLERANCE and rate >= at_least, f"old rule at n={n}: {rate:.3f}"


def test_welch_and_pooled_match_scipy():
    a, b = [0.41, 0.44, 0.43], [0.47, 0.45, 0.49, 0.50]
    welch = compare(a, b)
    reference = stats.ttest_ind(b, a, equal_var=False)
    assert welch.difference == pytest.approx(np.mean(b) - np.mean(a))
    assert welch.p_value == pytest.approx(reference.pvalue, rel=1e-10)
    low, high = reference.confidence_interval(0.95)
    assert welch.ci == pytest.approx((low, high), rel=1e-9)
    sd, df = pooled_spread([a, b])
    pooled = compare(a, b, pooled_sd=sd, pooled_df=df)
    assert pooled.p_value == pytest.approx(stats.ttest_ind(b, a, equal_var=True).pvalue, rel=1e-10)
    assert pooled.resolved == (pooled.p_value < 0.05) and pooled.ci[0] < pooled.difference < pooled.ci[1]


def test_equivalence_is_calibrated_at_the_margin_and_finds_true_equivalence():
    rng = np.random.default_rng(1)
    margin, n = 1.0, 5
    at_margin = within = 0
    for _ in range(SIMULATIONS):
        cells = rng.normal(0.0, 1.0, (CELLS, n))
        sd, df = pooled_spread(cells)
        # a true difference exactly at the margin: "equivalent" here is a false positive
        at_margin += equivalent(cells[0], cells[1] + margin, margin, pooled_sd=sd, pooled_df=df).resolved
        within += equivalent(cells[0], cells[1], 2.5, pooled_sd=sd, pooled_df=df).resolved
    assert at_margin / SIMULATIONS <= 0.05 + TOLERANCE
    assert within / SIMULATIONS > 0.8  # with a wide margin and no difference, equivalence is usually shown


def test_beyond_the_margin_is_calibrated_and_agrees_with_the_interval_rule():
    """A "matches" claim is contradicted when the 95 % interval lies wholly outside the margin; beyond_margin's
    p must be below 2.5 % exactly then, and at a true difference on the margin it may say so 2.5 % of the time."""
    rng = np.random.default_rng(2)
    margin, n = 1.0, 5
    hits = 0
    for _ in range(SIMULATIONS):
        cells = rng.normal(0.0, 1.0, (CELLS, n))
        sd, df = pooled_spread(cells)
        sign = 1 if rng.random() < 0.5 else -1  # on either side of the margin
        result = equivalent(cells[0], cells[1] + sign * margin, margin, pooled_sd=sd, pooled_df=df)
        half = stats.t.ppf(0.975, result.df) * result.standard_error
        outside = result.difference - half > margin or result.difference + half < -margin
        p = beyond_margin(result)
        assert (p < 0.025) == outside and 0.0 <= p <= 1.0
        hits += outside
    assert hits / SIMULATIONS <= 0.025 + 3 * math.sqrt(0.025 * 0.975 / SIMULATIONS)
    far = equivalent([0.40, 0.41, 0.42], [0.46, 0.47, 0.48], 0.01)  # 6 points apart, spread 1 point
    expected = stats.t.sf((0.06 - 0.01) / far.standard_error, far.df)
    assert beyond_margin(far) == pytest.approx(expected, rel=1e-9) and beyond_margin(far) < 0.01
    with pytest.raises(ValueError, match="equivalence"):
        beyond_margin(compare([0.4, 0.41], [0.5, 0.52]))


def test_equivalence_interval_is_the_ninety_percent_one():
    a, b = [0.50, 0.52, 0.51], [0.505, 0.515, 0.52]
    result = equivalent(a, b, 0.02)
    half = stats.t.ppf(0.95, result.df) * result.standard_error
    assert result.ci == pytest.approx((result.difference - half, result.difference + half))
    assert result.resolved == (-0.02 < result.ci[0] and result.ci[1] < 0.02)
    with pytest.raises(ValueError, match="margin"):
        equivalent(a, b, 0.0)


def test_holm_rejects_step_down_and_controls_the_family():
    assert holm([0.01, 0.04, 0.03, 0.005]) == [True, False, False, True]
    assert holm([0.001, 0.02, 0.03]) == [True, True, True]  # 0.03 <= 0.05 / 1
    assert holm([]) == []
    adjusted = holm_adjusted([0.01, 0.04, 0.03, 0.005])
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02])
    rng = np.random.default_rng(2)
    family_errors = sum(any(holm(rng.uniform(size=8))) for _ in range(SIMULATIONS))
    assert family_errors / SIMULATIONS <= 0.05 + TOLERANCE


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="at least 2 seeds"):
        compare([0.5], [0.6])
    with pytest.raises(ValueError, match="together"):
        compare([0.5, 0.6], [0.6, 0.7], pooled_sd=0.01)
    with pytest.raises(ValueError, match="finite"):
        compare([0.5, float("nan")], [0.6, 0.7])
    assert compare([0.5], [0.6], pooled_sd=0.01, pooled_df=10).resolved  # one seed each, pooled spread


def test_power_of_the_pooled_test():
    # two cells of 5 seeds, spread 0.8 points, a 1-point difference, 40 degrees of freedom
    assert 0.3 < power(1.0, 0.8, 5, 40) < 0.6
    assert power(3.0, 0.8, 5, 40) > 0.99 and power(0.0, 0.8, 5, 40) == pytest.approx(0.05, abs=1e-6)


@pytest.mark.parametrize("n", [3, 20])
def test_the_spread_check_flags_a_cell_of_equal_spread_at_most_five_percent_of_the_time(n):
    """Family-wise, over an experiment of CELLS cells whose seeds all spread alike (Holm over the cells)."""
    from reluattn.study.statistics import spread_check
    rng = np.random.default_rng([7, n])
    draws = SIMULATIONS // 4
    flagged = sum(any(r["differs"] for r in spread_check({f"c{i}": cell for i, cell in
                                                          enumerate(rng.normal(0.6, 0.01, (CELLS, n)))}))
                  for _ in range(draws))
    assert flagged / draws <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / draws)


def test_the_spread_check_finds_a_noisier_cell_and_ignores_a_quieter_one():
    from reluattn.study.statistics import spread_check
    rng = np.random.default_rng(3)
    cells = {f"c{i}": rng.normal(0.6, 0.008, 8) for i in range(8)}
    cells["noisy"] = rng.normal(0.6, 0.032, 8)   # four times the others' spread, as seen in the scaling grid
    cells["quiet"] = rng.normal(0.6, 0.002, 8)   # a quarter: the pooled test is only conservative for it
    check = {r["cell"]: r for r in spread_check(cells)}
    assert [name for name, r in check.items() if r["differs"]] == ["noisy"]
    assert check["noisy"]["ratio"] > 2 and check["noisy"]["p_holm"] < 0.05 and check["quiet"]["p"] > 0.5
    assert check["noisy"]["sd"] == pytest.approx(np.std(cells["noisy"], ddof=1))


def test_cells_that_all_repeat_one_value_have_equal_spreads_not_an_infinite_ratio():
    """Every seed of every cell the same (a degenerate sweep, as in the sweep tests' fake runs): a ratio of 1,
    which the report's spread line can print, not inf (null in results.json, which it could not)."""
    (first, second) = spread_check({"a": [0.5, 0.5], "b": [0.5, 0.5]})
    assert first["ratio"] == second["ratio"] == 1.0 and not first["differs"] and not second["differs"]
