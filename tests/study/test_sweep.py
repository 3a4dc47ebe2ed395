"""`reluattn sweep`: every cell of every experiment is a valid `reluattn train` command; a smoke sweep runs end
to end, skips what is done, survives SIGKILL with the same table as an uninterrupted sweep (its cells on the
NumPy backend), reports a failed cell without stopping the others (a real smoke cell beside it), and rebuilds
its report from the run directories alone."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from reluattn.cli import build_parser, train_config_from_args
from reluattn.progress import time_to_go
from reluattn.study import sweep as sweep_module
from reluattn.study.experiments import (EXPERIMENTS, SCALES, Cell, cells_of, planned_comparisons, seeds_of,
                                        train_arguments)
from reluattn.study.records import DEFAULT_SEEDS, FEWER_HEADLINE_SEEDS, HEADLINE_SEEDS, LEAST_HEADLINE_SEEDS
from reluattn.study.figures import FIGURES
from reluattn.study.report import RUN_SPECIFIC_COLUMNS, write_report
from reluattn.study.sweep_folder import is_stale, recorded_train_arguments
from reluattn.training.presets import get_preset

from train_helpers import ROOT, make_folder_dataset

CELLS = ["relu-m16", "softmax-m16"]  # two cells of kv-memory at smoke scale


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("experiment", sorted(EXPERIMENTS))
def test_every_cell_is_a_valid_train_command(experiment, scale, tmp_path):
    """Each cell's flags parse and build a valid TrainConfig (no training): a renamed flag fails here."""
    cells = cells_of(experiment, scale)
    assert len(cells) >= 2
    for cell in cells:
        args = build_parser().parse_args(["train", "--out", str(tmp_path), *train_arguments(cell, seed=1)])
        config = train_config_from_args(args, get_preset(args.preset))
        assert config.seed == 1
        if "kind" in cell.labels:
            assert config.model.attention.kind == cell.labels["kind"]
        if cell.labels.get("alpha") is not None:
            assert config.model.attention.alpha == cell.labels["alpha"]


@pytest.mark.parametrize("scale, alphas", [("pilot", {0.0, 0.5, 1.0, 1.5, 2.0}), ("cpu", {0.0, 0.5, 1.0, 1.5})])
def test_alpha_sweep_grid_is_the_papers(scale, alphas):
    cells = cells_of("alpha-sweep", scale)
    labels = [c.labels for c in cells]
    kinds = {l["kind"] for l in labels}
    assert kinds == {"softmax", "relu", "relu2", "gelu", "softplus", "sigmoid", "identity"}
    assert {l["alpha"] for l in labels if l["kind"] == "relu"} == alphas
    assert {l["tokens"] for l in labels} == {17, 65}
    headline = {c.name for c in cells if c.seeds}
    assert headline == {"t17-relu-a1", "t17-softmax", "t65-relu-a1", "t65-softmax"}


def _is_relu_over_L(cell: Cell) -> bool:
    flags = cell.flags
    return (flags.get("--attention") == "relu" and flags.get("--alpha", 1.0) == 1.0
            and "--attention-scale" not in flags and "--learn-alpha" not in flags)


@pytest.mark.parametrize("scale", SCALES)
def test_every_relu_over_L_against_softmax_comparison_has_the_headline_seeds(scale):
    """The rule the page states: every cell of a relu / L-against-softmax comparison runs HEADLINE_SEEDS, but
    in the one experiment FEWER_HEADLINE_SEEDS names, which runs its own number, never below 5 at the cpu and gpu
    scales."""
    found = 0
    for experiment in EXPERIMENTS:
        least = FEWER_HEADLINE_SEEDS.get(experiment, HEADLINE_SEEDS)[scale]
        assert least >= (LEAST_HEADLINE_SEEDS if scale in ("cpu", "gpu") else 1)
        cells = {cell.name: cell for cell in cells_of(experiment, scale)}
        for _, planned in planned_comparisons(experiment, scale):
            sides = [[cells[name] for name in side] for side in (planned.a, planned.b)]
            kinds = {("softmax" if all(c.flags.get("--attention") == "softmax" for c in side) else
                      "relu/L" if all(_is_relu_over_L(c) for c in side) else "other") for side in sides}
            if kinds == {"softmax", "relu/L"}:
                found += 1
                for cell in sides[0] + sides[1]:
                    assert seeds_of(cell, DEFAULT_SEEDS[scale]) >= least, (experiment, cell.name)
    assert found >= 3  # alpha-sweep's two lengths, scaling's sizes, long-sequence's longest length


def test_the_sweeps_first_line_counts_each_cells_own_seeds():
    """A grid whose cells all run 20 seeds says so; one that mixes 3 and 20 gives the range, not '3+'."""
    tuned = cells_of("scaling-tuned", "cpu")
    assert sweep_module.grid_size(tuned[:2], 3) == "2 cells x 20 seeds"
    assert sweep_module.grid_size(tuned[:1], 1) == "1 cell x 20 seeds"
    mixed = cells_of("alpha-sweep", "cpu")
    assert sweep_module.grid_size(mixed, 3) == f"{len(mixed)} cells, 3 to 20 seeds a cell"
    assert sweep_module.grid_size(mixed, 25) == f"{len(mixed)} cells x 25 seeds"


@pytest.mark.parametrize("scale", ["pilot", "cpu"])
def test_each_scales_grid_is_the_one_its_committed_runs_were_trained_with(scale):
    """docs/run-logs/<scale>/ holds that scale's runs: each recorded command is the grid's, seed for seed, so a
    change to a grid (or to the flags every cell of a scale shares) after its runs shows here."""
    records = sorted((ROOT / "docs" / "run-logs" / scale).glob("*/*/seed*/cell.json"))
    assert len(records) >= (236 if scale == "pilot" else 800)
    grids = {}
    for record_path in records:
        record = json.loads(record_path.read_text())
        assert record_path.parts[-4] == record["experiment"] and record_path.parts[-3] == record["cell"]
        if record["experiment"] not in grids:
            grids[record["experiment"]] = {c.name: c for c in cells_of(record["experiment"], scale)}
        cell = grids[record["experiment"]][record["cell"]]
        assert recorded_train_arguments(record["command"]) == train_arguments(cell, record["seed"]), record_path
        assert not is_stale(record, cell, record["seed"])


def test_the_cpu_scale_holds_out_a_test_split_and_trains_ten_epochs_on_the_rest():
    for experiment in EXPERIMENTS:
        for cell in cells_of(experiment, "cpu"):
            args = build_parser().parse_args(["train", "--out", "x", *train_arguments(cell, seed=0)])
            config = train_config_from_args(args, get_preset(args.preset))
            assert config.test_split == 5000 and config.val_split == 5000 and config.subset is None
            assert config.epochs >= 10


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_each_figure_draws_from_rows(name, tmp_path):
    rng = np.random.default_rng(0)
    rows = []
    for seed in range(2):
        for kind, x in [("softmax", 1), ("relu", 1), ("relu", 2), ("relu", 4)]:
            labels = {"kind": kind, "alpha": float(x), "tokens": 17 * x, "method": kind, "activation": kind,
                      "mlp_dim": 16 * x, "alpha_start": float(x), "dim": 8 * x}
            rows.append({"cell": f"{kind}-{x}", "seed": seed, "status": "done", **labels,
                         "best_val_accuracy": rng.uniform(), "fewshot_accuracy": rng.uniform(),
                         "train_flops": 1e9 * x, "attention_entropy_ratio": rng.uniform(),
                         "learned_alpha_mean": rng.uniform()})
    for row in rows:
        row["lr"] = 1e-3 * row["alpha"]
    path = FIGURES[name](rows, tmp_path / "figure.png", name)
    assert path.stat().st_size > 10_000  # a real PNG with axes and lines


# ------------------------------------------------------------------------------------ end to end, smoke

@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    # 390 images: the smoke scale's 256 training + 128 validation images.
    return make_folder_dataset(tmp_path_factory.mktemp("sweep-data"), train_per_class=130, test_per_class=2)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One decoded-image cache for the module's sweeps: the images are decoded once."""
    return tmp_path_factory.mktemp("sweep-cache")


def _environment(cache: Path) -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT), RELUATTN_CACHE=str(cache), MPLBACKEND="Agg")


# `reluattn sweep` whose cells train with the NumPy backend (nothing to compile: a cell takes seconds, where
# the JAX backend's smoke cell spends most of a minute compiling) for NUMPY_STEPS steps, a checkpoint each,
# so that the kill below lands between two checkpoints of a cell. The sweep's machinery (skipping, resuming,
# reporting) is the same whatever the cells train with; test_a_failed_cell_is_reported_and_the_others_run
# runs a real smoke cell, JAX backend, end to end.
NUMPY_STEPS = 24
NUMPY_CELLS_SWEEP = f"""
import sys
from reluattn.study import experiments, report, sweep

def numpy_cells(experiment, scale):
    return [experiments.Cell(cell.name, cell.labels, {{**cell.flags, "--backend": "numpy", "--steps": {NUMPY_STEPS}}})
            for cell in experiments.cells_of(experiment, scale)]

sweep.cells_of = report.cells_of = numpy_cells  # the report reads the same grid (else its runs are stale)
from reluattn.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _sweep(args, cache: Path, numpy_cells: bool = True, **options):
    """The sweep in a fresh process (its cells on the NumPy backend, or the plain `python -m reluattn`)."""
    start = ["-c", NUMPY_CELLS_SWEEP] if numpy_cells else ["-m", "reluattn"]
    return subprocess.Popen([sys.executable, *start, "sweep", *map(str, args)], env=_environment(cache),
                            cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **options)


def _table(out: Path) -> list[dict]:
    with open(out / "results.csv") as handle:
        rows = list(csv.DictReader(handle))
    return [{k: v for k, v in row.items() if k not in RUN_SPECIFIC_COLUMNS} for row in rows]


def test_smoke_sweep_kill_and_rerun_gives_the_uninterrupted_table(dataset, cache, tmp_path):
    common = ["kv-memory", "--scale", "smoke", "--seeds", "1", "--data", dataset, "--cells", *CELLS, "--no-progress"]

    whole = tmp_path / "whole"
    finished = _sweep([*common, "--out", whole], cache)
    output = finished.communicate(timeout=600)[0]
    assert finished.returncode == 0, output
    assert "2 run, 0 skipped, 0 failed" in output
    assert (whole / "kv-memory.png").stat().st_size > 10_000

    # Kill the sweep (SIGKILL: no clean-up) once the second cell has saved a checkpoint but not finished.
    # Its first cell is the uninterrupted sweep's, copied: the sweep skips it and goes straight to the
    # second (training it again would only repeat what "whole" did).
    killed = tmp_path / "killed"
    shutil.copytree(whole / CELLS[0], killed / CELLS[0])
    shutil.copy(whole / "sweep.json", killed / "sweep.json")  # a folder with cells but no sweep.json is refused
    process = _sweep([*common, "--out", killed], cache)
    second = killed / CELLS[1] / "seed0"
    deadline = time.time() + 600
    while not (second / "checkpoints" / "LATEST").exists():
        assert process.poll() is None, process.communicate()[0]
        assert time.time() < deadline
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert json.loads((second / "cell.json").read_text())["status"] == "running"
    time.sleep(1.0)  # the cell's trainer dies with the sweep (PR_SET_PDEATHSIG); give it a moment

    rerun = _sweep([*common, "--out", killed], cache)
    output = rerun.communicate(timeout=600)[0]
    assert rerun.returncode == 0, output
    assert "2 runs (2 cells x 1 seed), 1 already done, 1 to run (1 run left, in cells no run on this machine " \
           "has timed yet)" in output
    assert "1 run, 1 skipped" in output
    log = (second / "train.log").read_text()
    assert "resuming" in log or "already complete" in log  # continued from its checkpoint, not from scratch
    assert _table(killed) == _table(whole)

    # A third run skips everything; --report alone rebuilds the same table from the run directories.
    again = _sweep([*common, "--out", killed], cache)
    assert "2 already done, 0 to run" in again.communicate(timeout=600)[0]
    (killed / "results.csv").unlink()
    (killed / "results.json").unlink()
    report = _sweep(["kv-memory", "--report", "--out", killed], cache)  # the scale from sweep.json
    assert report.communicate(timeout=300)[0].startswith("wrote")
    assert _table(killed) == _table(whole)


def test_ctrl_c_waits_for_the_cells_checkpoint_marks_it_interrupted_and_a_rerun_continues(dataset, cache, tmp_path):
    """K1: Ctrl-C (SIGINT to the terminal's whole process group) printed an empty "reluattn: " and left
    cell.json "running"; the trainer, also sent the sweep's forwarded copy, stopped without its stop-save."""
    out = tmp_path / "sweep"
    common = ["kv-memory", "--scale", "smoke", "--seeds", "1", "--data", dataset, "--cells", CELLS[0],
              "--no-progress", "--out", out]
    process = _sweep(common, cache, start_new_session=True)  # its own group, as a terminal's foreground job
    run_dir = out / CELLS[0] / "seed0"
    deadline = time.time() + 600
    while not (run_dir / "checkpoints" / "LATEST").exists():
        assert process.poll() is None, process.communicate()[0]
        assert time.time() < deadline
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGINT)
    output = process.communicate(timeout=600)[0]
    assert process.returncode == 130, output
    assert f"reluattn: interrupted by SIGINT: {CELLS[0]} seed 0 is marked interrupted" in output, output
    assert json.loads((run_dir / "cell.json").read_text())["status"] == "interrupted"
    log = (run_dir / "train.log").read_text()
    assert "stopped by SIGINT" in log and "checkpoint saved" in log and "interrupted at once" not in log, log

    started_with = json.loads((run_dir / "cell.json").read_text())["command"]
    without_data = [a for a in common if a not in ("--data", dataset)]  # the trainer resumes from its config
    rerun = _sweep(without_data, cache)
    output = rerun.communicate(timeout=600)[0]
    assert rerun.returncode == 0 and "1 run, 0 skipped, 0 failed" in output, output
    assert "resuming" in (run_dir / "train.log").read_text()
    record = json.loads((run_dir / "cell.json").read_text())
    assert record["status"] == "done"
    assert record["command"] == started_with and "--data" in started_with  # the command that trained it


def test_a_failed_cell_is_reported_and_the_others_run(dataset, cache, tmp_path, monkeypatch):
    monkeypatch.setenv("RELUATTN_CACHE", str(cache))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    good = cells_of("kv-memory", "smoke")[0]
    bad = Cell("bad-width", {"activation": "relu", "mlp_dim": 16}, {**good.flags, "--dim": 15})  # 15 % 2 heads
    monkeypatch.setattr(sweep_module, "cells_of", lambda experiment, scale: [bad, good])
    out = tmp_path / "sweep"
    lines = []

    class Lines:
        def write(self, text):
            lines.append(text)

        def flush(self):
            pass

    counts = sweep_module.run_sweep("kv-memory", scale="smoke", seeds=1, out=out, data=str(dataset),
                                    progress=False, stdout=Lines())
    assert (counts["done"], counts["failed"]) == (1, 1)
    record = json.loads((out / "bad-width" / "seed0" / "cell.json").read_text())
    assert record["status"] == "failed" and record["exit_code"] != 0
    assert "divisible" in record["error"]  # the trainer's own one-line reason
    assert any("bad-width seed 0: failed" in line and "divisible" in line for line in lines)
    summary = json.loads((out / "results.json").read_text())
    assert summary["runs_failed"] == ["bad-width/seed0"] and summary["runs_done"] == 1
    assert write_report("kv-memory", out, scale="smoke")["figure"]


def test_sweep_refuses_a_folder_of_another_experiment(tmp_path):
    (tmp_path / "sweep.json").write_text(json.dumps({"experiment": "scaling", "scale": "cpu"}))
    with pytest.raises(ValueError, match="holds the sweep scaling"):
        sweep_module.run_sweep("kv-memory", scale="cpu", out=tmp_path, progress=False)


def test_a_figure_with_nothing_labelled_draws_without_a_legend_warning(tmp_path):
    """Audit K11: --report printed matplotlib's two-line 'No artists with labels' warning for empty panels."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        path = FIGURES["slots"]([], tmp_path / "empty.png", "empty")
    assert path.stat().st_size > 1000


def test_a_kind_keeps_its_colour_in_every_panel():
    """A panel that has fewer kinds (65 tokens while only relu has run) still draws relu in relu's colour."""
    from matplotlib.figure import Figure
    from reluattn import palette
    from reluattn.study.figures import _plot_series
    axes = Figure().subplots(1, 2)
    _plot_series(axes[0], {"gelu": [(1.0, 0.5, 0.0)], "relu": [(1.0, 0.5, 0.0)]})
    _plot_series(axes[1], {"relu": [(1.0, 0.5, 0.0)]}, names=["gelu", "relu"])
    colours = [ax.get_legend_handles_labels()[0][-1].lines[0].get_color() for ax in axes]
    assert colours == [palette.series(1)["color"]] * 2


def test_the_time_left_counts_each_remaining_run_at_its_own_cells_pace(tmp_path, monkeypatch):
    """A sweep restarted after its cheap cells had printed hours too few: it averaged only its own runs, and
    the long-sequence cells differ some 30 times in cost. Each remaining run now counts at its cell's mean, and
    a run of a cell not timed yet is counted, not guessed at the pace of the (cheaper) runs before it."""
    cheap, dear, new = (Cell(name, {}, {}) for name in ("cheap", "dear", "new"))
    monkeypatch.setattr(sweep_module, "run_cell", lambda *args: {"status": "done", "sweep_seconds": 10.0})
    out = []
    stdout = type("Lines", (), {"write": lambda self, text: out.append(text), "flush": lambda self: None})()
    seconds = {"cheap": [50.0], "dear": [3000.0, 4000.0]}  # earlier sessions' finished runs
    # cheap seed 1 was resumed: its trainer's wall time (70 s) counts, not the 10 s of its last attempt
    (tmp_path / "cheap" / "seed1").mkdir(parents=True)
    (tmp_path / "cheap" / "seed1" / "summary.json").write_text(json.dumps({"wall_time_s": 70.0}))
    pending = [(cheap, 1), (dear, 1), (cheap, 2), (new, 0)]
    counts = {"done": 0, "failed": 0, "skipped": 3}
    sweep_module._run_pending("kv-memory", "smoke", tmp_path, None, pending, 7, counts, False, stdout, seconds)
    lines = "".join(out).splitlines()
    # after cheap seed 1: dear at 3,500 s + cheap at (50 + 70) / 2; new counted
    assert lines[0] == ("[4/7] cheap seed 1: done in 10 s; about 59 min 20 s left by this machine's finished "
                        "runs, and 1 run in cells not timed here yet")
    assert lines[2] == "[6/7] cheap seed 2: done in 10 s; 1 run left, in cells no run on this machine has timed yet"
    assert lines[-1] == "[7/7] new seed 0: done in 10 s; nothing left"
    assert seconds["cheap"] == [50.0, 70.0, 10.0] and seconds["new"] == [10.0] and counts["done"] == 4


def test_a_sweeps_first_line_estimates_the_runs_of_timed_cells_and_counts_the_others():
    """Restarted with hours of runs to go, a sweep said nothing of them until its first run had finished."""
    cheap, dear, new = (Cell(name, {}, {}) for name in ("cheap", "dear", "new"))
    seconds = {"cheap": [50.0, 70.0], "dear": [3000.0, 4000.0]}
    assert time_to_go([(cheap, 2), (dear, 2), (dear, 3)], seconds) == \
        " (about 1 h 57 min left by this machine's finished runs)"
    assert time_to_go([(dear, 2), (new, 0), (new, 1)], seconds) == \
        " (about 58 min 20 s left by this machine's finished runs, and 2 runs in cells not timed here yet)"
    assert time_to_go([(new, 0)], seconds) == " (1 run left, in cells no run on this machine has timed yet)"
    assert time_to_go([], seconds) == ""
