"""Every run records what made it (command line, versions, git commit, machine) in config.json and
summary.json; `reluattn plot` tells sweep cells apart (their paths below the common parent) and can put
epoch or wall time on the x axis."""

import json
import platform
import sys

import jax
import numpy as np
import pytest

from reluattn.cli import main
from reluattn.training import plots, provenance
from reluattn.training.run_dir import resolve_checkpoint
from train_helpers import tiny_args
from train_helpers import data, environment  # noqa: F401  (module fixtures)


@pytest.fixture(scope="module")
def cells(data, tmp_path_factory):  # noqa: F811
    """Two runs laid out like a sweep's cells: <root>/alpha-0/seed0 and <root>/alpha-1/seed0."""
    root = tmp_path_factory.mktemp("sweep")
    for alpha in ("0", "1"):
        assert main(tiny_args(data, root / f"alpha-{alpha}" / "seed0", steps=4, **{"--alpha": alpha})) == 0
    return root


def test_config_and_summary_record_the_command_versions_commit_and_machine(cells, monkeypatch):
    run = cells / "alpha-1" / "seed0"
    config = json.loads((resolve_checkpoint(run) / "config.json").read_text())
    summary = json.loads((run / "summary.json").read_text())
    for record in (config["provenance"], summary["provenance"]):
        assert "--alpha 1" in record["command"] and "train" in record["command"]
        versions = record["versions"]
        assert versions["python"] == platform.python_version() and versions["jax"] == jax.__version__
        assert versions["numpy"] == np.__version__ and versions["jaxlib"] and versions["optax"] and versions["reluattn"]
        machine = record["machine"]
        assert machine["cores"] >= 1 and machine["cpu"] and machine["devices"] == [str(d) for d in jax.devices()]
        assert "git_commit" in record
    assert record["command"].startswith("reluattn train ")
    monkeypatch.setattr(provenance, "COMMAND", [])  # no CLI call: this process's own command line
    monkeypatch.setattr(sys, "argv", ["/usr/bin/reluattn", "train", "--steps", "3"])
    assert provenance.provenance()["command"] == "reluattn train --steps 3"


def test_the_git_commit_is_the_checkouts_when_there_is_one():
    from pathlib import Path
    root = Path(provenance.__file__).resolve().parents[2]
    commit = provenance.git_commit()
    if (root / ".git").exists():
        assert commit is not None and len(commit.split("-")[0]) == 40
    else:
        assert commit is None


def test_plot_labels_runs_by_their_path_below_the_common_parent(cells):
    names = plots.run_names([cells / "alpha-0" / "seed0", cells / "alpha-1" / "seed0"])
    assert names == ["alpha-0/seed0", "alpha-1/seed0"]  # the folder names alone were both "seed0"
    assert plots.run_names([cells / "alpha-1" / "seed0"]) == ["seed0"]


@pytest.mark.parametrize("x", ["step", "epoch", "time"])
def test_plot_puts_step_epoch_or_wall_time_on_the_x_axis(cells, tmp_path, monkeypatch, x):
    drawn = []
    real = plots._save

    def recording(figure, output):
        axes = figure.axes[0]
        drawn.append((axes.get_xlabel(), [line.get_label() for line in axes.lines],
                      [list(line.get_xdata()) for line in axes.lines]))
        return real(figure, output)

    monkeypatch.setattr(plots, "_save", recording)
    runs = [str(cells / "alpha-0" / "seed0"), str(cells / "alpha-1" / "seed0")]
    assert main(["plot", *runs, "--x", x, "--output", str(tmp_path / "curves.png")]) == 0
    xlabel, labels, xs = drawn[0]
    assert xlabel == plots.X_AXES[x][1]
    assert [label.split(" (")[0] for label in labels] == ["alpha-0/seed0", "alpha-1/seed0"]
    records = [json.loads(line) for line in (cells / "alpha-0" / "seed0" / "metrics.jsonl").read_text().splitlines()]
    expected = [r[x] for r in records if r.get("split") == "train" and r.get("loss") is not None]
    assert xs[0] == expected
