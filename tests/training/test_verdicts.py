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


def test_report_reads_learned_alphas_from_the_logs_alone(tmp_path):
    """docs/run-logs/ keeps no checkpoints: a learned-alpha run's final alphas must come from metrics.jsonl."""
    import json
    from reluattn.training.report import collect_rows
    run = tmp_path / "t17-from1" / "seed0"
    run.mkdir(parents=True)
    (tmp_path / "sweep.json").write_text(json.dumps({"experiment": "learned-alpha", "scale": "cpu"}))
    (run / "cell.json").write_text(json.dumps({"experiment": "learned-alpha", "cell": "t17-from1", "seed": 0,
                                               "status": "done", "labels": {"tokens": 17, "alpha_start": 1.0}}))
    (run / "summary.json").write_text(json.dumps({"best_val_accuracy": 0.4, "final_val_accuracy": 0.4}))
    records = [{"step": 1, "split": "val", "attention": {"alpha": [[0.0, 0.0], [0.0, 0.0]]}},
               {"step": 2, "split": "val", "attention": {"alpha": [[0.9, 1.1], [1.0, 1.4]]}},
               {"step": 2, "split": "train", "loss": 1.0}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    (row,) = collect_rows("learned-alpha", tmp_path)
    assert row["learned_alpha_mean"] == pytest.approx(1.1)
    assert (row["learned_alpha_min"], row["learned_alpha_max"]) == pytest.approx((0.9, 1.4))
