"""The follow-up to the scaling experiment: scaling-lr-grid chooses each size's and kind's learning rate on
validation, on seeds kept apart from scaling-tuned's, and scaling-tuned runs every size at its chosen rate with
the same claim, comparisons and margins as scaling; it refuses to run before its rates are chosen."""

import json

import pytest

from reluattn.cli import build_parser, main, train_config_from_args
from reluattn.study import scaling_grids
from reluattn.study.experiments import cells_of, default_seeds, planned_comparisons, seeds_of, train_arguments
from reluattn.study.rate_choice import chosen_learning_rates, rates_waiting
from reluattn.study.records import DEFAULT_SEEDS, HEADLINE_SEEDS
from reluattn.study.statistics import aggregate
from reluattn.training.presets import get_preset

from train_helpers import ROOT


@pytest.mark.parametrize("scale", ["cpu", "gpu"])
def test_the_lr_grid_of_each_size_runs_three_rates_on_seeds_of_its_own(scale):
    cells = cells_of("scaling-lr-grid", scale)
    ladder = scaling_grids.SCALING_LADDER[scale]
    assert len(cells) == len(ladder) * 2 * 3
    for cell in cells:
        assert cell.flags["--lr"] == cell.labels["lr"] and cell.flags["--qk-norm"] is True
        assert cell.first_seed == 100 and seeds_of(cell, DEFAULT_SEEDS[scale]) == 3
        assert train_arguments(cell, cell.first_seed)[2:4] == ["--seed", "100"]
    assert {(c.labels["dim"], c.labels["kind"], c.labels["lr"]) for c in cells} == {
        (d, kind, lr) for d, _, _, _ in ladder for kind in ("softmax", "relu") for lr in (1e-3, 2e-3, 4e-3)}


def test_each_size_and_kind_gets_its_best_validation_rate_and_test_is_never_read():
    best = {"softmax": {32: 4e-3, 64: 2e-3, 96: 2e-3, 128: 1e-3}, "relu": {32: 4e-3, 64: 4e-3, 96: 2e-3, 128: 2e-3}}
    rows = []
    for cell in cells_of("scaling-lr-grid", "cpu"):
        labels = cell.labels
        peak = best[labels["kind"]][labels["dim"]]
        for seed in (100, 101, 102):
            rows.append({"cell": cell.name, "seed": seed, "status": "done", **labels,
                         "best_val_accuracy": 0.6 - abs(labels["lr"] - peak) * 10 + 0.001 * (seed - 100),
                         "test_accuracy": 0.9 if labels["lr"] != peak else 0.1})  # test points elsewhere
    chosen = chosen_learning_rates(aggregate(rows, "best_val_accuracy"))
    assert chosen == {f"d{d}x{n}-{kind}": best[kind][d] for d, n, _, _ in scaling_grids.SCALING_LADDER["cpu"]
                      for kind in ("softmax", "relu")}


def test_no_rate_is_chosen_for_a_size_until_every_rate_of_it_has_all_its_seeds():
    """A choice from some of the runs could change when the rest come in: the report names the sizes and kinds
    still waiting (finished of planned runs) and chooses only the complete ones."""
    from reluattn.study.tables import verdicts_markdown
    from reluattn.study.verdicts import planned_seeds
    design = cells_of("scaling-lr-grid", "cpu")
    rows = []
    for cell in design:
        labels = cell.labels
        seeds = (100, 101, 102)
        if labels["dim"] == 96 and labels["kind"] == "softmax":  # two rates one seed short, one a seed over
            seeds = (100, 101, 102, 103) if labels["lr"] == 4e-3 else (100, 101)
        if labels["dim"] in (32, 64):
            seeds = ()          # not run yet
        rows += [{"cell": cell.name, "seed": s, "status": "done", **labels,
                  "best_val_accuracy": 0.6 - abs(labels["lr"] - 2e-3) * 10} for s in seeds]
    cells = aggregate(rows, "best_val_accuracy")
    waiting = rates_waiting(cells, design, planned_seeds("scaling-lr-grid", "cpu"))
    assert waiting == {"d32x2-softmax": "0 of 9 runs", "d32x2-relu": "0 of 9 runs", "d64x4-softmax": "0 of 9 runs",
                       "d64x4-relu": "0 of 9 runs", "d96x6-softmax": "7 of 9 runs"}
    assert chosen_learning_rates(cells, waiting) == {"d128x6-relu": 2e-3, "d128x6-softmax": 2e-3, "d96x6-relu": 2e-3}
    page = verdicts_markdown({"claims": [], "comparisons": [], "chosen_learning_rates": {"d96x6-relu": 2e-3},
                              "learning_rates_waiting": waiting})
    assert "**Not chosen yet**, until every rate has all its planned seeds: d32x2-softmax (0 of 9 runs)" in page
    assert "d96x6-softmax (7 of 9 runs)." in page


def test_the_tuned_grid_runs_each_size_at_its_chosen_rate_with_scalings_comparisons(monkeypatch):
    ladder = scaling_grids.SCALING_LADDER["cpu"]
    rates = {f"d{d}x{n}-{kind}": (1e-3 if kind == "relu" else 4e-3) * (1 + d / 1000) for d, n, _, _ in ladder
             for kind in ("softmax", "relu")}
    monkeypatch.setitem(scaling_grids.SCALING_TUNED_RATES, "cpu", rates)
    cells = cells_of("scaling-tuned", "cpu")
    assert {c.name: c.flags["--lr"] for c in cells} == rates
    assert all(seeds_of(c, DEFAULT_SEEDS["cpu"]) == HEADLINE_SEEDS["cpu"] and c.first_seed == 0 for c in cells)
    scaling = {c.name: c for c in cells_of("scaling", "cpu")}
    for cell in cells:  # the scaling experiment's model, recipe and seeds; only the rate differs
        assert {**cell.flags, "--lr": None} == {**scaling[cell.name].flags, "--lr": None}
    questions = [(p.question, p.a, p.b, p.expect, p.margin, p.kind) for _, p in planned_comparisons("scaling", "cpu")]
    assert [(p.question, p.a, p.b, p.expect, p.margin, p.kind)
            for _, p in planned_comparisons("scaling-tuned", "cpu")] == questions


def test_the_tuned_grid_refuses_to_run_before_its_rates_are_chosen(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(scaling_grids.SCALING_TUNED_RATES, "cpu", {})
    with pytest.raises(ValueError, match="reluattn sweep scaling-lr-grid --scale cpu"):
        cells_of("scaling-tuned", "cpu")
    assert main(["sweep", "scaling-tuned", "--scale", "cpu", "--out", str(tmp_path / "tuned")]) == 1
    assert "waits for its learning rates" in capsys.readouterr().err
    assert not (tmp_path / "tuned").exists()


def test_the_list_counts_the_selection_seeds_it_runs(tmp_path, capsys):
    """`sweep --list` shows seed 100's command and counts runs finished at seeds 100-102, not 0-2."""
    out = tmp_path / "grid"
    (cell, *_) = cells_of("scaling-lr-grid", "smoke")
    for seed, status in ((0, "done"), (1, "done"), (100, "done"), (101, "running")):
        (out / cell.name / f"seed{seed}").mkdir(parents=True)
        (out / cell.name / f"seed{seed}" / "cell.json").write_text(json.dumps({"status": status}))
    assert main(["sweep", "scaling-lr-grid", "--scale", "smoke", "--seeds", "3", "--list", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"{cell.name} (3 seeds from 100): reluattn train --preset cpu-small --seed 100 " in printed
    assert f"{len(cells_of('scaling-lr-grid', 'smoke')) * 3} runs planned, 1 finished in {out} (" in printed


def test_the_sweep_runs_the_selection_grid_at_seeds_100_to_102(tmp_path, monkeypatch):
    from reluattn.study import report, sweep
    pending = []
    monkeypatch.setattr(sweep, "_run_pending", lambda experiment, scale, out, data, jobs, *rest: pending.extend(jobs))
    monkeypatch.setattr(report, "write_report", lambda *args, **kwargs: {"table": "-"})
    sweep.run_sweep("scaling-lr-grid", scale="smoke", seeds=3, out=tmp_path / "grid", progress=False,
                    cells=["d8x1-relu-lr0.002"])
    assert [(cell.name, seed) for cell, seed in pending] == [("d8x1-relu-lr0.002", s) for s in (100, 101, 102)]


def test_a_run_copied_in_from_another_experiment_is_refused_not_counted_done(tmp_path, monkeypatch):
    """The report reads only runs recorded for its own experiment, so the sweep must not skip such a run as
    done: a scaling run copied into a scaling-tuned folder (the same command at a rate the two share) is refused."""
    from reluattn.study import sweep
    (cell, *_) = cells_of("scaling-tuned", "smoke")
    out = tmp_path / "tuned"
    (out / cell.name / "seed0").mkdir(parents=True)
    (out / "sweep.json").write_text(json.dumps({"experiment": "scaling-tuned", "scale": "smoke"}))
    record = {"cell": cell.name, "seed": 0, "status": "done", "labels": cell.labels, "experiment": "scaling",
              "command": " ".join(["reluattn", "train", "--out", "x", *train_arguments(cell, 0)])}
    (out / cell.name / "seed0" / "cell.json").write_text(json.dumps(record))
    monkeypatch.setattr(sweep, "_run_pending", lambda *args: pytest.fail("nothing may run"))
    with pytest.raises(ValueError, match=r"recorded for another experiment than scaling-tuned .*\(scaling\)"):
        sweep.run_sweep("scaling-tuned", scale="smoke", seeds=1, out=out, progress=False, cells=[cell.name])


@pytest.mark.parametrize("grid, table", [("scaling-lr-grid", "SCALING_TUNED_RATES"),
                                         ("scaling-fast-lr-grid", "SCALING_FAST_RATES")])
def test_the_cpu_scales_tuned_rates_are_the_committed_lr_grids_choice(tmp_path, grid, table):
    """The cpu scale's rate tables were copied by hand from the committed grids' reports: each report, rebuilt
    from a copy of its runs, chooses the same rate for every size and kind and none waits, so a slip shows here."""
    import shutil
    from reluattn.study.report import write_report
    folder = tmp_path / grid
    shutil.copytree(ROOT / "docs" / "run-logs" / "cpu" / grid, folder, ignore=shutil.ignore_patterns("checkpoints"))
    result = write_report(grid, folder, scale="cpu")
    assert result["learning_rates_waiting"] == {}
    assert result["chosen_learning_rates"] == scaling_grids.RATE_TABLES[table]["cpu"]


def test_the_fast_lr_grid_runs_cpu_fasts_recipe_at_three_rates_on_one_selection_seed():
    cells = cells_of("scaling-fast-lr-grid", "cpu")
    ladder = scaling_grids.SCALING_LADDER["cpu"]
    assert {(c.labels["dim"], c.labels["kind"], c.labels["lr"]) for c in cells} == {
        (d, kind, lr) for d, _, _, _ in ladder for kind in ("softmax", "relu") for lr in (7.5e-4, 1.5e-3, 3e-3)}
    preset = get_preset("cpu-fast")
    for cell in cells:
        arguments = train_arguments(cell, cell.first_seed)
        assert arguments[2:4] == ["--seed", "100"]
        assert seeds_of(cell, default_seeds("scaling-fast-lr-grid", "cpu")) == 1
        args = build_parser().parse_args(["train", *arguments])
        config = train_config_from_args(args, get_preset(args.preset))
        assert config.model.pool == "gap" and config.token_keep == preset.token_keep == (0.5,)
        assert (config.batch_size, config.epochs, config.warmup_epochs) == (preset.batch_size, preset.epochs,
                                                                             preset.warmup_epochs)
        assert config.model.attention.qk_norm and config.optimizer.learning_rate == cell.labels["lr"]
        assert (config.optimizer.weight_decay, config.optimizer.clip_norm, config.label_smoothing,
                config.augmentation) == (preset.optimizer.weight_decay, preset.optimizer.clip_norm,
                                         preset.label_smoothing, preset.augmentation)
        assert (config.model.dim, config.model.depth) == (cell.labels["dim"], cell.labels["depth"])
        assert (config.val_split, config.test_split) == (5000, 5000)


def test_the_fast_grid_waits_for_its_rates_then_runs_scalings_comparisons_at_five_seeds(monkeypatch):
    monkeypatch.setitem(scaling_grids.SCALING_FAST_RATES, "cpu", {})
    with pytest.raises(ValueError, match="reluattn sweep scaling-fast-lr-grid --scale cpu.*SCALING_FAST_RATES"):
        cells_of("scaling-fast", "cpu")
    ladder = scaling_grids.SCALING_LADDER["cpu"]
    rates = {f"d{d}x{n}-{kind}": (7.5e-4 if kind == "relu" else 3e-3) for d, n, _, _ in ladder
             for kind in ("softmax", "relu")}
    monkeypatch.setitem(scaling_grids.SCALING_FAST_RATES, "cpu", rates)
    cells = cells_of("scaling-fast", "cpu")
    assert {c.name: c.flags["--lr"] for c in cells} == rates
    assert all(seeds_of(c, DEFAULT_SEEDS["cpu"]) == 5 and c.first_seed == 0 for c in cells)
    selection = {(c.labels["dim"], c.labels["kind"], c.labels["lr"]): c
                 for c in cells_of("scaling-fast-lr-grid", "cpu")}
    for cell in cells:  # the selection grid's model and recipe at the chosen rate
        assert cell.flags == selection[cell.labels["dim"], cell.labels["kind"], cell.flags["--lr"]].flags
    questions = [(p.question, p.a, p.b, p.expect, p.margin, p.kind) for _, p in planned_comparisons("scaling", "cpu")]
    assert [(p.question, p.a, p.b, p.expect, p.margin, p.kind)
            for _, p in planned_comparisons("scaling-fast", "cpu")] == questions


def test_the_fast_lr_grids_report_chooses_each_size_and_kinds_rate(tmp_path, monkeypatch):
    """The report of scaling-fast-lr-grid names its chosen rates, as scaling-lr-grid's does."""
    from reluattn.study import report
    rows = [{"cell": c.name, "seed": 100, "status": "done", "experiment": "scaling-fast-lr-grid", **c.labels,
             "best_val_accuracy": 0.5 + (0.1 if c.labels["lr"] == 1.5e-3 else 0.0), "test_accuracy": 0.5}
            for c in cells_of("scaling-fast-lr-grid", "smoke")]
    monkeypatch.setattr(report, "collect_rows", lambda *args, **kwargs: rows)
    result = report.write_report("scaling-fast-lr-grid", tmp_path, scale="smoke")
    assert result["learning_rates_waiting"] == {}
    assert result["chosen_learning_rates"] == {f"d{d}x{n}-{kind}": 1.5e-3
                                               for d, n, _, _ in scaling_grids.SCALING_LADDER["smoke"]
                                               for kind in ("softmax", "relu")}
