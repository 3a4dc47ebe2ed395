"""A sweep's report reads files a user can damage (issue 25: C5, K8): a damaged run file leaves that run, or
that value, out with a one-line warning naming the file, and results.json stays strict JSON."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from reluattn.study.experiments import cells_of
from reluattn.study.report import SweepWarning, write_report


def _run(out: Path, cell, seed: int = 0, *, record=None, summary=None, metrics: list[str] = ()) -> Path:
    run_dir = out / cell.name / f"seed{seed}"
    run_dir.mkdir(parents=True)
    record = record if record is not None else {"experiment": "kv-memory", "cell": cell.name, "seed": seed,
                                                "labels": cell.labels, "status": "done"}
    (run_dir / "cell.json").write_text(record if isinstance(record, str) else json.dumps(record))
    summary = summary if summary is not None else {"best_val_accuracy": 0.5, "train_flops": 1e9}
    (run_dir / "summary.json").write_text(summary if isinstance(summary, str) else json.dumps(summary))
    (run_dir / "metrics.jsonl").write_text("".join(line + "\n" for line in metrics))
    return run_dir


def _strict(text: str):
    def refuse(constant):
        raise ValueError(f"not strict JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


def _report(out: Path) -> tuple[dict, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        paths = write_report("kv-memory", out, scale="smoke")
    messages = [str(w.message) for w in caught if issubclass(w.category, SweepWarning)]
    assert all("\n" not in message for message in messages)
    return _strict(Path(paths["json"]).read_text()), messages


def test_damaged_run_files_are_skipped_with_a_warning_naming_them(tmp_path):
    """The audit's C5: each of these failed `--report` for the whole sweep, naming no file."""
    cells = cells_of("kv-memory", "smoke")
    good = _run(tmp_path, cells[0], metrics=['{"split": "val", "attention": {"entropy_ratio": [0.5, 0.7]}}'])
    bad_records = [(cells[1], "[1]"), (cells[2], {"experiment": "kv-memory", "seed": 0, "labels": {}}),
                   (cells[3], {"experiment": "kv-memory", "cell": cells[3].name, "seed": 0, "labels": [1]})]
    for cell, record in bad_records:
        _run(tmp_path, cell, record=record)
    junk_metrics = _run(tmp_path, cells[4], metrics=['{"split": "val", "attention": {"entropy_ratio": ["abc"]}}',
                                                     "[1,2]"])
    lots = _run(tmp_path, cells[5], summary={"best_val_accuracy": 0.25, "train_flops": "lots"})
    results, messages = _report(tmp_path)

    rows = {row["cell"]: row for row in results["rows"]}
    assert set(rows) == {cells[0].name, cells[4].name, cells[5].name}
    assert rows[cells[0].name]["attention_entropy_ratio"] == pytest.approx(0.6)
    assert "attention_entropy_ratio" not in rows[cells[4].name]
    assert rows[cells[5].name]["train_flops"] is None and rows[cells[5].name]["best_val_accuracy"] == 0.25
    for cell, _ in bad_records:
        assert any(str(tmp_path / cell.name / "seed0" / "cell.json") in m for m in messages), (cell.name, messages)
    assert any(str(junk_metrics / "metrics.jsonl") in m and "entropy_ratio" in m for m in messages), messages
    assert any(str(lots / "summary.json") in m and "'lots'" in m for m in messages), messages
    assert not any(str(good) in m for m in messages)


def test_non_finite_values_are_written_as_null(tmp_path):
    """The audit's K8: a hand-edited summary with NaN / Infinity made results.json invalid strict JSON."""
    cells = cells_of("kv-memory", "smoke")
    (tmp_path / cells[0].name / "seed0").mkdir(parents=True)
    _run(tmp_path, cells[0], seed=1, summary='{"best_val_accuracy": NaN, "wall_time_s": Infinity, '
                                             '"train_flops": 1e9}')
    _run(tmp_path, cells[1], summary={"best_val_accuracy": 0.5, "train_flops": 1e9})
    results, messages = _report(tmp_path)
    (row,) = [row for row in results["rows"] if row["cell"] == cells[0].name]
    assert row["best_val_accuracy"] is None and row["wall_time_s"] is None
    assert any("best_val_accuracy is nan" in m for m in messages), messages
    data_lines = (tmp_path / "results.csv").read_text().lower().splitlines()[1:]
    assert data_lines and not any("nan" in line or "inf" in line for line in data_lines)


def test_the_machine_column_names_the_host_and_the_devices(tmp_path):
    """results.csv's machine: the CPU model and cores the sweep recorded (cell.json) and the run's devices
    (summary.json), so that a CPU run names its CPU and a GPU run its host; either alone when one is missing."""
    cells = cells_of("kv-memory", "smoke")
    host = "AMD EPYC (family 25, model 1), 2 cores"
    _run(tmp_path, cells[0], record={"experiment": "kv-memory", "cell": cells[0].name, "seed": 0,
                                     "labels": cells[0].labels, "status": "done", "machine": host},
         summary={"best_val_accuracy": 0.5, "train_flops": 1e9, "device": "1 gpu device"})
    _run(tmp_path, cells[1], summary={"best_val_accuracy": 0.5, "train_flops": 1e9, "device": "1 cpu device"})
    _run(tmp_path, cells[2])
    results, messages = _report(tmp_path)
    machines = {row["cell"]: row["machine"] for row in results["rows"]}
    assert machines == {cells[0].name: f"{host}; 1 gpu device", cells[1].name: "1 cpu device", cells[2].name: None}
    assert f'"{host}; 1 gpu device"' in (tmp_path / "results.csv").read_text()
