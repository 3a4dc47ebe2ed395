"""The comparisons behind the reproduction verdicts: every one names cells of its grid, each claim has its
quote and planned comparisons, and judge() reads the runs as reluattn/study/verdicts.py says (pooled spread,
Holm within the experiment, equivalence against the margin, the claim's rule)."""

import json

import numpy as np
import pytest

from reluattn.study.experiments import EXPERIMENTS, SCALES, cells_of, planned_comparisons
from reluattn.study.tables import verdicts_markdown
from reluattn.study.verdicts import describe, judge

from train_helpers import ROOT


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("experiment", sorted(EXPERIMENTS))
def test_every_claim_has_a_quote_and_comparisons_of_its_own_grid(experiment, scale):
    record = EXPERIMENTS[experiment]
    names = {cell.name for cell in cells_of(experiment, scale)}
    planned = planned_comparisons(experiment, scale)
    assert bool(record.claims) != bool(record.exploration), "a claim to test, or an exploration saying why not"
    for index, claim in enumerate(record.claims):
        assert claim.quote and claim.source
        assert any(i == index for i, _ in planned), f"{experiment}: claim {index} has no comparison"
    for _, p in planned:
        assert set(p.a) | set(p.b) <= names and not set(p.a) & set(p.b), p.question


def _rows(cell, accuracies, value="best_val_accuracy", **extra):
    return [{"cell": cell, "seed": seed, "status": "done", value: v, **extra} for seed, v in enumerate(accuracies)]


def _alpha_rows(relu_a1, relu_a0, noise=0.004, seeds=3, value="best_val_accuracy"):
    """Every alpha-sweep pilot cell at 0.40 (+ small seed noise), relu at alpha 1 / 0 at the given means."""
    rng = np.random.default_rng(0)
    rows = []
    for cell in cells_of("alpha-sweep", "pilot"):
        mean = {"t17-relu-a1": relu_a1, "t17-relu-a0": relu_a0}.get(cell.name, 0.40)
        rows += _rows(cell.name, mean + noise * rng.standard_normal(seeds), value)
    return rows


def _entry(result, question):
    (entry,) = [c for c in result["comparisons"] if c["question"] == question]
    return entry


def test_a_large_effect_survives_holm_and_a_small_one_does_not():
    large = judge("alpha-sweep", _alpha_rows(0.45, 0.38), "pilot")
    entry = _entry(large, "17 tokens, relu: alpha 1 minus alpha 0")
    assert entry["rejected"] and entry["reading"] == "supports" and entry["difference"] == pytest.approx(0.07, abs=0.01)
    assert entry["p_holm"] >= entry["p_value"] and large["pooled_df"] == 2 * 62
    assert "+7" in describe(entry) and "Holm" in describe(entry)
    small = judge("alpha-sweep", _alpha_rows(0.404, 0.40), "pilot")
    assert not _entry(small, "17 tokens, relu: alpha 1 minus alpha 0")["rejected"]
    claim = small["claims"][0]
    assert claim["verdict"] == "inconclusive" and claim["tested"] == claim["planned"] == 12


def test_equivalence_within_the_margin_and_its_contradiction():
    rows = _alpha_rows(0.40, 0.40, noise=0.002)
    match = judge("alpha-sweep", rows, "pilot")["claims"][4]
    assert match["verdict"] == "equivalent within margin"
    far = [dict(r, best_val_accuracy=r["best_val_accuracy"] - 0.05) if r["cell"].endswith("softmax") else r
           for r in rows]
    result = judge("alpha-sweep", far, "pilot")
    assert result["claims"][4]["verdict"] == "disagrees"  # 5 points > 1-point margin
    # how far beyond the margin, Holm-adjusted over the experiment's equivalence comparisons, in every report
    outside = [c for c in result["comparisons"] if c.get("reading") == "contradicts" and c.get("margin")]
    assert outside and all(c["p_beyond"] < 0.025 and c["p_beyond"] <= c["p_beyond_holm"] < 0.05 for c in outside)
    assert f"beyond {outside[0]['p_beyond']:.2g}" in verdicts_markdown(result)
    assert "beyond the margin p" in describe(outside[0])


def test_the_value_judged_is_the_test_split_at_the_cpu_scale():
    rows = [dict(r, best_val_accuracy=0.9) for r in _alpha_rows(0.45, 0.38, value="test_accuracy", seeds=5)]
    result = judge("alpha-sweep", rows, "cpu")
    assert result["value"] == "test_accuracy"
    assert _entry(result, "17 tokens, relu: alpha 1 minus alpha 0")["reading"] == "supports"


def test_missing_cells_and_single_seeds_give_no_verdict():
    rows = _rows("t17-relu-a1", [0.45]) + _rows("t17-relu-a0", [0.30])
    result = judge("alpha-sweep", rows, "pilot")
    entry = _entry(result, "17 tokens, relu: alpha 1 minus alpha 0")
    assert "missing" in entry and "one seed a cell" in describe(entry)  # one seed everywhere: no spread
    assert result["claims"][0]["verdict"].startswith("no verdict yet (one seed a cell")
    assert "one seed a cell so far" in verdicts_markdown(result)
    assert judge("alpha-sweep", [], "pilot")["claims"][0]["verdict"] == "no runs yet"
    # Two seeds of one side only: the claim is waiting for the other side's cells, which is not "no runs yet".
    rows = _rows("t17-relu-a1", [0.45, 0.46])
    verdict = judge("alpha-sweep", rows, "pilot")["claims"][0]["verdict"]
    assert verdict == "no verdict yet (some of its cells have not run yet)"


def test_a_clear_best_h_contradicts_no_clear_best():
    rows = [dict(r, best_val_accuracy=r["best_val_accuracy"] + 0.05) if r["cell"] == "t17-gelu-a1" else r
            for r in _alpha_rows(0.40, 0.40)]
    assert judge("alpha-sweep", rows, "pilot")["claims"][2]["verdict"] == "disagrees"
    assert judge("alpha-sweep", _alpha_rows(0.40, 0.40), "pilot")["claims"][2]["verdict"] == "agrees"


def test_a_claim_outside_the_papers_setting_says_so():
    rows = []
    for cell in cells_of("long-sequence", "pilot"):
        rows += _rows(cell.name, [0.40, 0.41, 0.39])
    (claim,) = judge("long-sequence", rows, "pilot")["claims"]
    assert claim["verdict"].startswith("not tested in the paper's setting")


def test_the_scaling_slope_is_tested_on_log_flops():
    rows = []
    for cell in cells_of("scaling", "pilot"):
        dim = cell.labels["dim"]
        gap = 0.0 if cell.labels["kind"] == "softmax" else -0.02 + 0.0002 * dim  # the gap closes with size
        rows += _rows(cell.name, 0.40 + gap + 0.001 * np.arange(3), train_flops=1e9 * dim ** 2)
    result = judge("scaling", rows, "pilot")
    slope = _entry(result, "relu / L minus softmax, slope per tenfold training FLOPs")
    # gaps -1.04, -0.72, -0.08 points at log10 FLOPs 12.36, 12.61, 12.96: about +1.6 points per decade
    assert slope["kind"] == "slope" and 0.01 < slope["difference"] < 0.02


def test_the_pilot_reanalysis_is_what_the_committed_tables_say():
    """results.json of every pilot experiment holds the verdicts judge() gives on its committed rows."""
    from pathlib import Path
    root = Path(__file__).resolve().parents[2] / "docs" / "run-logs" / "pilot"
    for experiment in EXPERIMENTS:
        path = root / experiment / "results.json"
        if not path.exists():
            continue
        saved = json.loads(path.read_text())
        assert saved["scale"] == "pilot"
        fresh = judge(experiment, saved["rows"], "pilot")
        assert [c["verdict"] for c in fresh["claims"]] == [c["verdict"] for c in saved["claims"]]


def test_the_lr_grid_chooses_each_kinds_best_validation_lr_and_never_reads_test():
    from reluattn.study.rate_choice import chosen_learning_rates
    from reluattn.study.statistics import aggregate
    rows = []
    for cell in cells_of("lr-grid", "cpu"):
        kind, lr = cell.labels["kind"], cell.labels["lr"]
        best = 2e-3 if kind == "softmax" else 4e-3
        rows += _rows(cell.name, [0.50 - abs(lr - best) * 10, 0.50 - abs(lr - best) * 10], kind=kind, lr=lr,
                      test_accuracy=0.9 if lr == 1e-3 else 0.1)  # a test split pointing elsewhere is ignored
    for row in rows:
        row.update({"kind": row["kind"], "lr": row["lr"]})
    chosen = chosen_learning_rates(aggregate(rows, "best_val_accuracy"))
    assert chosen["softmax"] == 2e-3 and chosen["relu"] == 4e-3 and len(chosen) == 7


def test_the_committed_lr_grid_still_chooses_the_rates_the_grids_use(tmp_path):
    """The cpu lr-grid was planned and run at 2 seeds a cell (seeds 0 and 1): its report, rebuilt from the
    committed runs, chooses every kind's rate (none waits for a third seed), and they are LEARNING_RATES."""
    import shutil
    from reluattn.study.experiments import LEARNING_RATES, default_seeds
    from reluattn.study.report import write_report
    assert default_seeds("lr-grid", "cpu") == 2 and default_seeds("lr-grid", "gpu") == 3
    folder = tmp_path / "lr-grid"
    shutil.copytree(ROOT / "docs" / "run-logs" / "cpu" / "lr-grid", folder)
    result = write_report("lr-grid", folder, scale="cpu")
    assert result["learning_rates_waiting"] == {}
    assert result["chosen_learning_rates"] == {kind: lr for kind, lr in LEARNING_RATES.items() if lr is not None}


def test_a_claim_waits_for_every_planned_seed_and_cell():
    """An interim sweep (cells at fewer seeds than planned, or not run) shows its numbers but no verdict."""
    full = _alpha_rows(0.45, 0.38, value="test_accuracy", seeds=20)
    assert judge("alpha-sweep", full, "cpu")["claims"][0]["verdict"].startswith("partly agrees (1 of 12")
    interim = [r for r in full if r["seed"] < 2]  # the cpu scale plans 3 seeds, 5 for the headline cells
    result = judge("alpha-sweep", interim, "cpu")
    entry = _entry(result, "17 tokens, relu: alpha 1 minus alpha 0")
    assert entry["short"] == ["t17-relu-a0 2/3", "t17-relu-a1 2/20"] and "interim" in describe(entry)
    assert result["claims"][0]["verdict"] == "no verdict yet (0 of 12 comparisons have all their planned runs)"
    row = next(line for line in verdicts_markdown(result).splitlines() if line.startswith(f"| {entry['question']} |"))
    assert row.endswith(f"| {entry['reading']} so far (interim: fewer seeds than planned, not read) |")
    assert "| **" not in verdicts_markdown(result)  # no reading bolded before the design's seeds are in
    half = [r for r in full if r["cell"].startswith("t17")]
    assert judge("alpha-sweep", half, "cpu")["claims"][0]["verdict"].startswith("no verdict yet (6 of 12")


def test_the_holm_family_is_the_whole_plan_and_an_early_verdict_is_provisional():
    """Untested comparisons count as p = 1 in the Holm family; a claim judged before its experiment is whole
    is marked provisional."""
    full = _alpha_rows(0.45, 0.38, value="test_accuracy", seeds=20)
    headline = [r for r in full if r["cell"] in ("t17-softmax", "t17-relu-a1", "t65-softmax", "t65-relu-a1")]
    result = judge("alpha-sweep", headline, "cpu")
    planned = len(planned_comparisons("alpha-sweep", "cpu"))
    tested = [c for c in result["comparisons"] if "missing" not in c]
    assert len(tested) == 2 and planned > 60  # relu / L minus softmax at 17 and 65 tokens, nothing else
    smallest = min(tested, key=lambda c: c["p_value"])
    assert smallest["p_holm"] == pytest.approx(min(1.0, planned * smallest["p_value"]))
    match = result["claims"][4]
    assert match["complete"] == match["planned"] == 2 and match["verdict"].endswith("(provisional: other cells "
                                                                                    "of the experiment still lack "
                                                                                    "runs, so its pooled spread "
                                                                                    "may change)")
    assert "provisional" not in judge("alpha-sweep", full, "cpu")["claims"][4]["verdict"]
    from reluattn.study.tables import verdicts_markdown
    assert f"{planned} planned comparisons, 2 run so far and the rest counted as p = 1" in verdicts_markdown(result)


def test_a_cell_noisier_than_the_rest_gets_welchs_test_beside_the_pooled_one():
    """The pooled test's assumption is checked; where it fails, the cell's one-to-one comparisons also get
    Welch's test in results.json and in verdicts.md, and the verdicts stay the planned test's."""
    from reluattn.study.statistics import compare
    from reluattn.study.tables import verdicts_markdown
    rng = np.random.default_rng(1)
    rows = []
    for cell in cells_of("scaling", "pilot"):
        spread = 0.04 if cell.name == "d96x6-relu" else 0.005
        rows += _rows(cell.name, 0.40 + spread * rng.standard_normal(6), train_flops=1e9 * cell.labels["dim"] ** 2)
    result = judge("scaling", rows, "pilot")
    assert [r["cell"] for r in result["spread_check"] if r["differs"]] == ["d96x6-relu"]
    checked = [c for c in result["comparisons"] if "welch" in c]
    assert [c["b"] for c in checked] == [["d96x6-relu"]]  # not the slope, not the other sizes
    values = {c: [r["best_val_accuracy"] for r in rows if r["cell"] == c] for c in ("d96x6-softmax", "d96x6-relu")}
    welch = compare(values["d96x6-softmax"], values["d96x6-relu"])
    assert checked[0]["welch"]["standard_error"] == pytest.approx(welch.standard_error)
    assert checked[0]["welch"]["standard_error"] > checked[0]["standard_error"]  # the pooled one was too narrow
    text = verdicts_markdown({**result, "experiment": "scaling"})
    assert "**Spread check:**" in text and "`d96x6-relu`" in text and checked[0]["question"] in text
    calm = judge("scaling", [r for r in rows if r["cell"] != "d96x6-relu"] + _rows("d96x6-relu", [0.40, 0.401, 0.399], train_flops=1e9 * 96 ** 2),
                 "pilot")
    assert not any("welch" in c for c in calm["comparisons"])
    assert "Spread check: no cell's seeds spread resolvably more" in verdicts_markdown({**calm, "experiment": "scaling"})
