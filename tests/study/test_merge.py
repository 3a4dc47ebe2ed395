"""`reluattn sweep ... --merge SOURCE ...`: the finished runs of sweep folders made elsewhere (a GPU's, one folder
per cell) copied into one folder, logs only, each run whole; nothing copied when a source is not this grid's."""

from __future__ import annotations

import json

import pytest

from reluattn.cli import main
from reluattn.study.experiments import cells_of
from reluattn.study.merge import merge_sweeps
from reluattn.study.sweep_folder import SweepFolderError

from sweep_helpers import _done_cell, _sweep_folder

CELLS = cells_of("kv-memory", "smoke")


def _with_logs_and_checkpoint(run_dir, machine="a 16-core GPU host"):
    record = json.loads((run_dir / "cell.json").read_text())
    (run_dir / "cell.json").write_text(json.dumps({**record, "machine": machine}))
    (run_dir / "train.log").write_text("reluattn: done\n")
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n')
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / "LATEST").write_text("step_00000001\n")
    return run_dir


def _stopped(folder, cell, seed=0):
    run_dir = _done_cell(folder, cell, seed)
    record = json.loads((run_dir / "cell.json").read_text())
    (run_dir / "cell.json").write_text(json.dumps({**record, "status": "interrupted"}))
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / "LATEST").write_text("step_00000001\n")
    return run_dir


def test_merge_copies_each_finished_runs_logs_without_checkpoints_and_keeps_what_is_there(tmp_path):
    first, second = _sweep_folder(tmp_path / "gpu-a"), _sweep_folder(tmp_path / "gpu-b")
    _with_logs_and_checkpoint(_done_cell(first, CELLS[0]))
    _stopped(first, CELLS[1])                       # stopped at the deadline: not copied
    _done_cell(second, CELLS[1])                    # finished in the other folder
    _done_cell(second, CELLS[0])                    # the same run again: the first copy is kept
    out = tmp_path / "merged"
    assert merge_sweeps(out, [first, second], "kv-memory", "smoke") == {"copied": 2, "replaced": 0, "kept": 1}
    assert json.loads((out / "sweep.json").read_text()) == {"experiment": "kv-memory", "scale": "smoke"}
    copied = out / CELLS[0].name / "seed0"
    assert sorted(p.name for p in copied.iterdir()) == ["cell.json", "metrics.jsonl", "summary.json", "train.log"]
    assert json.loads((copied / "cell.json").read_text())["machine"] == "a 16-core GPU host"
    assert json.loads((out / CELLS[1].name / "seed0" / "cell.json").read_text())["status"] == "done"
    assert not list(out.rglob("*.tmp"))             # no staging folder left behind


def test_a_finished_run_replaces_a_stopped_one_and_its_checkpoint(tmp_path):
    source = _sweep_folder(tmp_path / "gpu")
    _with_logs_and_checkpoint(_done_cell(source, CELLS[0]))
    out = _sweep_folder(tmp_path / "cpu")
    _stopped(out, CELLS[0])
    assert merge_sweeps(out, [source], "kv-memory", "smoke") == {"copied": 0, "replaced": 1, "kept": 0}
    replaced = out / CELLS[0].name / "seed0"
    assert json.loads((replaced / "cell.json").read_text())["status"] == "done"
    assert not (replaced / "checkpoints").exists() and (replaced / "train.log").read_text() == "reluattn: done\n"


def test_a_source_of_another_grid_or_with_a_stale_run_is_refused_before_anything_is_copied(tmp_path):
    good = _sweep_folder(tmp_path / "good")
    _done_cell(good, CELLS[0])
    other = _sweep_folder(tmp_path / "other", experiment="long-sequence")
    out = tmp_path / "out"
    with pytest.raises(SweepFolderError, match="holds the sweep long-sequence at scale smoke, not kv-memory"):
        merge_sweeps(out, [good, other], "kv-memory", "smoke")
    with pytest.raises(SweepFolderError, match="is not a sweep folder"):
        merge_sweeps(out, [good, tmp_path / "good.log"], "kv-memory", "smoke")
    stale = _sweep_folder(tmp_path / "stale")
    _done_cell(stale, CELLS[1], command="reluattn train --out x --lr 0.5")
    with pytest.raises(SweepFolderError, match=rf"1 finished runs are not runs of the current .*{CELLS[1].name}/seed0"):
        merge_sweeps(out, [good, stale], "kv-memory", "smoke")
    assert not out.exists()


def test_the_merge_command_says_what_it_did_and_writes_the_report(tmp_path, capsys):
    source = _sweep_folder(tmp_path / "gpu")
    _done_cell(source, CELLS[0])
    _done_cell(source, CELLS[1], seed=1)
    out = tmp_path / "merged"
    argv = ["sweep", "kv-memory", "--scale", "smoke", "--out", str(out), "--merge", str(source)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert f"merged into {out}: 2 runs copied, 0 stopped runs replaced by finished ones, 0 finished there already" \
        in printed
    assert [(row["cell"], row["seed"]) for row in json.loads((out / "results.json").read_text())["rows"]] == \
        [(CELLS[0].name, 0), (CELLS[1].name, 1)]
    assert main(argv) == 0 and "0 runs copied, 0 stopped runs replaced by finished ones, 2 finished there already" \
        in capsys.readouterr().out
    assert main([*argv[:-1], str(tmp_path / "nowhere")]) == 1
    assert "is not a sweep folder" in capsys.readouterr().err
