"""The comparisons behind the reproduction verdicts: every one names cells of its grid, and judge/describe
read seeds the way docs/reproduction.md says (Welch two-sigma, no verdict from one seed)."""

import pytest

from reluattn.training.experiments import EXPERIMENTS, SCALES, cells_of
from reluattn.training.verdicts import comparisons, describe, judge


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("experiment", sorted(EXPERIMENTS))
def test_every_experiment_compares_cells_of_its_own_grid(experiment, scale):
    names = {cell.name for cell in cells_of(experiment, scale)}
    pairs = comparisons(experiment, scale)
    assert pairs, f"{experiment} has no comparison to judge its claim by"
    for question, a, b in pairs:
        assert a in names and b in names and a != b, question


def _rows(cell, accuracies):
    return [{"cell": cell, "seed": seed, "status": "done", "best_val_accuracy": value}
            for seed, value in enumerate(accuracies)]


def test_judge_resolves_a_difference_beyond_two_standard_errors_only():
    far = _rows("t17-relu-a1", [0.40, 0.41]) + _rows("t17-relu-a0", [0.33, 0.34])
    near = _rows("t17-relu-a1", [0.40, 0.37]) + _rows("t17-relu-a0", [0.36, 0.35])  # 1.9 standard errors
    (result,) = [r for r in judge("alpha-sweep", far) if r["a"] == "t17-relu-a1" and r["b"] == "t17-relu-a0"]
    assert result["resolved"] and result["difference"] == pytest.approx(0.07)
    assert "resolved" in describe(result) and "+7.0 points" in describe(result)
    (result,) = [r for r in judge("alpha-sweep", near) if r["a"] == "t17-relu-a1" and r["b"] == "t17-relu-a0"]
    assert not result["resolved"] and "within two standard errors" in describe(result)


def test_one_seed_or_a_missing_cell_gives_no_verdict():
    rows = _rows("t17-relu-a1", [0.45]) + _rows("t17-relu-a0", [0.30])
    results = {(r["a"], r["b"]): r for r in judge("alpha-sweep", rows)}
    one_seed = results[("t17-relu-a1", "t17-relu-a0")]
    assert not one_seed["resolved"] and "one seed" in describe(one_seed)
    missing = results[("t17-relu-a1", "t17-softmax")]
    assert missing["missing"] == ["t17-softmax"] and "no runs yet of t17-softmax" in describe(missing)
