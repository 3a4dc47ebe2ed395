"""What `reluattn sweep` may do to a sweep folder (issue 25: N2, N3, N5, N6, S4, K3, K10, K13; C8's few-shot
shots at smoke scale). No cell trains here: a fake `subprocess.Popen` stands in for the cell's process, so
each test takes well under a second."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from reluattn.cli import main
from reluattn.study import sweep as sweep_module
from reluattn.study.experiments import FEWSHOT_SHOTS, SCALE_FLAGS, cells_of, train_arguments
from reluattn.study.sweep_folder import SWEEP_LOCK, SweepFolderLock, is_stale
from reluattn.training.run_folder import RunFolderLock

from sweep_helpers import _done_cell, _sweep_folder
from train_helpers import ROOT

# The project's JPEG copy of CIFAR-10: RELUATTN_DATA when it names a zip, else ../shared/data/ beside the repository.
SHARED_ZIP = Path(os.environ["RELUATTN_DATA"]) if os.environ.get("RELUATTN_DATA", "").endswith(".zip") else \
    ROOT.parent / "shared" / "data" / "cifar10-train.zip"


class FakeChild:
    """subprocess.Popen's stand-in: records the arguments, prints `output` to the given stdout, exits `code`."""
    calls: list = []
    output = ""
    code = 0

    def __init__(self, arguments, stdout=None, **options):
        FakeChild.calls.append(list(arguments))
        if hasattr(stdout, "write"):
            stdout.write(FakeChild.output)
            stdout.flush()
        self.pid, self.returncode = 0, FakeChild.code

    def wait(self, timeout=None):
        return self.returncode

    def poll(self):
        return self.returncode

    def send_signal(self, signum):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.fixture
def fake_child(monkeypatch):
    FakeChild.calls, FakeChild.output, FakeChild.code = [], "", 0
    monkeypatch.setattr(subprocess, "Popen", FakeChild)
    return FakeChild


def _no_training(*args, **kwargs):
    raise AssertionError("the sweep must not start a cell here")


def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------ N2: a folder that is not a sweep's

def test_a_folder_of_your_own_files_is_refused_by_sweep_and_report_and_left_untouched(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "results.csv").write_text("my own table\n")
    (folder / "results.json").write_text('{"mine": true}\n')
    before = _snapshot(folder)
    assert main(["sweep", "learned-alpha", "--scale", "smoke", "--report", "--out", str(folder)]) == 1
    assert "holds no sweep.json, so it is not a sweep folder" in capsys.readouterr().err
    monkeypatch.setattr(sweep_module, "run_cell", _no_training)
    with pytest.raises(ValueError, match="is not empty and is not a sweep folder .*results.csv"):
        sweep_module.run_sweep("learned-alpha", scale="smoke", seeds=1, out=folder, progress=False)
    assert _snapshot(folder) == before and sorted(p.name for p in folder.iterdir()) == ["results.csv", "results.json"]


# ------------------------------------------------------------------ N3: one sweep per folder, cells not cleared

def test_a_second_sweep_on_a_locked_folder_refuses_naming_the_holder(tmp_path, monkeypatch):
    out = _sweep_folder(tmp_path / "sweep")
    monkeypatch.setattr(sweep_module, "run_cell", _no_training)
    with SweepFolderLock(out):
        with pytest.raises(ValueError, match=f"in use by another reluattn sweep \\(PID {os.getpid()}\\)"):
            sweep_module.run_sweep("kv-memory", scale="smoke", seeds=1, out=out, progress=False)
        with pytest.raises(ValueError, match="in use by another reluattn sweep"):
            sweep_module.report_sweep(out)
    # The kernel drops the lock with its holder: a lock held by a killed process stands in nobody's way.
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from reluattn.study.sweep_folder import "
                               "SweepFolderLock; lock = SweepFolderLock(sys.argv[1]).__enter__(); print('locked', "
                               "flush=True); time.sleep(60)", str(out)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    with pytest.raises(ValueError, match="in use by another reluattn sweep"):
        sweep_module.report_sweep(out)
    holder.kill()
    holder.wait()
    assert sweep_module.report_sweep(out)["table"].endswith("results.csv")
    assert (out / SWEEP_LOCK).exists()  # never deleted


def test_a_cell_another_process_holds_is_neither_cleared_nor_marked(tmp_path, fake_child):
    """The audit's N3: a second sweep deleted the running cell's train.log, metrics and cell.json."""
    (cell,) = cells_of("kv-memory", "smoke")[:1]
    run_dir = tmp_path / "sweep" / cell.name / "seed0"
    run_dir.mkdir(parents=True)
    for name, text in [("cell.json", '{"status": "running"}'), ("train.log", "first sweep's output\n"),
                       ("metrics.jsonl", '{"step": 0}\n')]:
        (run_dir / name).write_text(text)
    before = _snapshot(run_dir)
    with RunFolderLock(run_dir):  # a `reluattn train` of this cell is running
        record = sweep_module.run_cell("kv-memory", cell, 0, run_dir, None, "smoke")
    assert record["status"] == "failed" and "in use by another reluattn train" in record["error"]
    assert fake_child.calls == []
    assert {k: v for k, v in _snapshot(run_dir).items() if k != ".reluattn.lock"} == before


# ------------------------------------------------------------------ N5: --report reads sweep.json

def test_report_takes_experiment_and_scale_from_sweep_json_and_refuses_others(tmp_path, capsys):
    out = _sweep_folder(tmp_path / "sweep", "learned-alpha", "smoke")
    (out / "results.csv").write_text("the learned-alpha report\n")
    for wrong in (["scaling", "--scale", "smoke"], ["learned-alpha", "--scale", "cpu"], ["scaling"]):
        assert main(["sweep", *wrong, "--report", "--out", str(out)]) == 1
        error = capsys.readouterr().err
        assert "holds the sweep learned-alpha at scale smoke (its sweep.json)" in error, error
        assert "reluattn sweep learned-alpha --report" in error
    assert (out / "results.csv").read_text() == "the learned-alpha report\n"
    assert not (out / "scaling.png").exists()
    assert main(["sweep", "learned-alpha", "--report", "--out", str(out)]) == 0  # no --scale: sweep.json's
    assert json.loads((out / "results.json").read_text())["scale"] == "smoke"


def test_report_of_the_committed_pilot_logs_still_reads_as_the_pilot(tmp_path, capsys):
    import shutil
    out = tmp_path / "scaling"
    shutil.copytree(ROOT / "docs" / "run-logs" / "pilot" / "scaling", out)
    assert main(["sweep", "scaling", "--report", "--out", str(out), "--scale", "pilot"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["scale"] == "pilot" and results["runs_done"] == results["runs"] == 12
    assert results["runs_stale"] == [] and "warning" not in capsys.readouterr().err


# ------------------------------------------------------------------ N6: a finished cell of another grid

def test_a_finished_cell_trained_with_other_flags_is_not_counted_as_done(tmp_path, monkeypatch):
    out = _sweep_folder(tmp_path / "sweep")
    first, second = cells_of("kv-memory", "smoke")[:2]
    current = _done_cell(out, first)
    old_command = shlex.join(["reluattn", "train", "--out", "x", *train_arguments(second, 0)]).replace(
        "--steps 3", "--steps 6")
    _done_cell(out, second, command=old_command)
    before = _snapshot(out)
    monkeypatch.setattr(sweep_module, "run_cell", _no_training)
    with pytest.raises(ValueError, match=f"1 runs were trained with other flags .*{second.name}/seed0.*new --out"):
        sweep_module.run_sweep("kv-memory", scale="smoke", seeds=1, out=out, cells=[first.name, second.name],
                               progress=False)
    assert {k: v for k, v in _snapshot(out).items() if k != SWEEP_LOCK} == before  # nothing deleted or rewritten
    # The grid's own command is done, whatever its --out and --data were; the report leaves the stale run out.
    record = json.loads((current / "cell.json").read_text())
    record["command"] = record["command"].replace(str(current), "/elsewhere/run") + " --data /some/data.zip"
    assert not is_stale(record, first, 0)
    with pytest.warns(UserWarning, match=f"{second.name}/seed0: another train command"):
        report = sweep_module.report_sweep(out)
    results = json.loads(Path(report["json"]).read_text())
    assert results["runs_stale"] == [f"{second.name}/seed0"] and results["runs_done"] == 1


def test_the_recorded_command_is_shell_quoted_and_reads_back_as_the_grids(tmp_path, fake_child):
    """K10: a path with spaces pastes back; N6's comparison reads the same arguments."""
    fake_child.code = 1  # the cell "fails" at once: only its record matters here
    cell = cells_of("kv-memory", "smoke")[0]
    run_dir = tmp_path / "my sweeps" / "it's here" / cell.name / "seed0"
    record = sweep_module.run_cell("kv-memory", cell, 0, run_dir, "/data/my images.zip", "smoke")
    written = json.loads((run_dir / "cell.json").read_text())
    assert written == record and record["status"] == "failed"
    assert shlex.split(record["command"]) == ["reluattn", "train", "--out", str(run_dir), "--data",
                                              "/data/my images.zip", *train_arguments(cell, 0)]
    assert not is_stale(record, cell, 0) and is_stale(record, cell, 1)
    assert fake_child.calls[0][3:] == ["train", "--out", str(run_dir), "--data", "/data/my images.zip",
                                       *train_arguments(cell, 0)]


# ------------------------------------------------------------------ S4 and C8: the few-shot probe

def test_the_fewshot_output_never_writes_through_a_planted_link(tmp_path, fake_child):
    run_dir = tmp_path / "cell" / "seed0"
    run_dir.mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (run_dir / ".fewshot.json.out").symlink_to(victim)  # the old fixed temporary name
    fake_child.output = json.dumps({"fewshot_accuracy": 0.25, "fewshot_shots": 5})
    assert sweep_module._fewshot(run_dir, None, 5) == 0
    assert victim.read_text() == "precious\n"
    assert json.loads((run_dir / "fewshot.json").read_text())["fewshot_accuracy"] == 0.25
    assert sorted(p.name for p in run_dir.iterdir()) == [".fewshot.json.out", "fewshot.json", "train.log"]


def test_smoke_fewshot_asks_for_fewer_shots_than_the_shipped_datas_rarest_validation_class(fake_child, tmp_path):
    """C8: at smoke scale the 10-shot probe failed on the project's own CIFAR-10 copy (7 images of a class
    in the 128 validation images); the sweep asks the smoke scale for fewer shots."""
    from reluattn.data import Dataset, split_validation
    from reluattn.data.folder import index_image_folder
    _, labels = index_image_folder(SHARED_ZIP).members("train")
    labels = np.asarray(labels)
    full = Dataset(np.zeros((len(labels), 1, 1, 3), np.uint8), labels, tuple(range(10)), "folder", "train", "zip")
    validation = split_validation(full, SCALE_FLAGS["smoke"]["--val-split"], 0)[1]  # the smoke run's data_seed
    rarest = np.bincount(validation.labels, minlength=10).min()
    assert rarest <= FEWSHOT_SHOTS < 128  # the default would fail here
    assert sweep_module.fewshot_shots("smoke") < rarest
    assert sweep_module.fewshot_shots("cpu") == sweep_module.fewshot_shots("pilot") == FEWSHOT_SHOTS
    fake_child.output = "{}"
    run_dir = tmp_path / "seed0"
    run_dir.mkdir()
    sweep_module._fewshot(run_dir, None, sweep_module.fewshot_shots("smoke"))
    assert fake_child.calls[0][3:7] == ["evaluate", "--checkpoint", str(run_dir), "--fewshot"]
    assert fake_child.calls[0][7] == str(sweep_module.fewshot_shots("smoke"))


# ------------------------------------------------------------------ K3, K13, K2

def test_leftover_temporaries_of_a_killed_report_are_removed_and_nothing_else(tmp_path):
    out = _sweep_folder(tmp_path / "sweep", "learned-alpha", "smoke")
    leftovers = [".learned-alpha.png.k2j3.tmp", ".results.csv.ab12.tmp", ".results.json.x.tmp", ".sweep.json.q.tmp"]
    kept = [".results.csv.mine", "notes.tmp", ".other.png.a.tmp"]
    for name in leftovers + kept:
        (out / name).write_text("x")
    sweep_module.report_sweep(out)
    names = {p.name for p in out.iterdir()}
    assert not names & set(leftovers) and set(kept) <= names


def test_out_naming_a_file_is_a_one_line_error(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("mine\n")
    assert main(["sweep", "kv-memory", "--scale", "smoke", "--out", str(afile)]) == 1
    assert main(["sweep", "kv-memory", "--report", "--out", str(afile)]) == 1
    errors = capsys.readouterr().err.splitlines()
    assert errors == [f"reluattn: error: {afile} is a file, not a folder; pass a folder as --out (a new or empty "
                      f"one, or the folder of a sweep)"] * 2
    assert afile.read_text() == "mine\n"


def test_list_into_a_closed_pipe_exits_quietly():
    """K2: `reluattn sweep ... --list | head` printed "reluattn: error: Broken pipe"."""
    process = subprocess.Popen([sys.executable, "-m", "reluattn", "sweep", "alpha-sweep", "--scale", "smoke", "--list"],
                               cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ, PYTHONPATH=str(ROOT)))
    process.stdout.close()  # the reader is gone before the first line (the interpreter takes longer to start)
    stderr = process.stderr.read()
    assert process.wait(timeout=120) == 0 and stderr == ""


def test_list_counts_each_cells_planned_seeds_and_the_finished_runs(tmp_path, capsys):
    """--list says how many seeds each cell plans, how many of the sweep's runs are finished in --out, and
    about how long the rest would take."""
    out = tmp_path / "sweep"
    cells = cells_of("learned-alpha", "smoke")
    done = out / cells[0].name / "seed0"
    done.mkdir(parents=True)
    (done / sweep_module.CELL_RECORD).write_text(json.dumps({"status": "done", "sweep_seconds": 600.0}))
    failed = out / cells[1].name / "seed0"
    failed.mkdir(parents=True)
    (failed / sweep_module.CELL_RECORD).write_text(json.dumps({"status": "failed"}))
    elsewhere = out / cells[2].name / "seed0"  # copied in from a GPU's folder: finished, but not this machine's pace
    elsewhere.mkdir(parents=True)
    (elsewhere / sweep_module.CELL_RECORD).write_text(
        json.dumps({"status": "done", "sweep_seconds": 30.0, "machine": "a 16-core GPU host"}))
    assert main(["sweep", "learned-alpha", "--scale", "smoke", "--seeds", "2", "--list", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{cells[0].name} (2 seeds): reluattn train ")
    # and the time to go: the finished cell's seed 1 at its seed 0's 600 s, the other cells' runs counted
    assert lines[-1] == (f"learned-alpha at scale smoke: {len(cells)} cells, {2 * len(cells)} runs planned, "
                         f"2 finished in {out} (about 10 min 00 s left by this machine's finished runs, "
                         f"and {2 * len(cells) - 3} runs in cells not timed here yet)")


# ------------------------------------------------------------------ --shard K/N: N processes share a grid

def test_shards_split_the_grid_and_each_resumes_only_its_own_runs(tmp_path, monkeypatch, capsys):
    """N sweeps with --shard k/N, each in a folder of its own started from the same finished runs, run every
    pending run exactly once between them; a shard stopped part-way runs, when rerun, only what is left of its
    own share (the share comes from the grid, not from what its folder holds)."""
    cells = cells_of("kv-memory", "smoke")
    base = _sweep_folder(tmp_path / "committed")
    _done_cell(base, cells[0], seed=0)
    ran, fail_after = [], {"left": None}

    def fake_run_cell(experiment, cell, seed, run_dir, data, scale):
        if fail_after["left"] == 0:
            return {"status": "failed", "error": "stopped", "sweep_seconds": 0.0}
        if fail_after["left"] is not None:
            fail_after["left"] -= 1
        ran.append((run_dir.parent.parent.name, cell.name, seed))
        _done_cell(run_dir.parent.parent, cell, seed)
        return {"status": "done", "sweep_seconds": 1.0}
    monkeypatch.setattr(sweep_module, "run_cell", fake_run_cell)
    planned = {(cell.name, seed) for cell in cells for seed in range(3)} - {(cells[0].name, 0)}
    for k in (1, 2, 3):
        shutil.copytree(base, tmp_path / f"shard{k}")
    fail_after["left"] = 1  # shard 2 finishes one run, then its others fail (as if stopped)
    sweep_module.run_sweep("kv-memory", scale="smoke", seeds=3, out=tmp_path / "shard2", shard=(2, 3), progress=False)
    first = list(ran)
    fail_after["left"] = None
    for k in (1, 2, 3):
        sweep_module.run_sweep("kv-memory", scale="smoke", seeds=3, out=tmp_path / f"shard{k}", shard=(k, 3),
                               progress=False)
    runs = [(cell, seed) for _, cell, seed in ran]
    assert len(first) == 1 and sorted(runs) == sorted(planned) and len(runs) == len(set(runs))
    by_shard = {k: {(c, s) for folder, c, s in ran if folder == f"shard{k}"} for k in (1, 2, 3)}
    assert max(map(len, by_shard.values())) - min(map(len, by_shard.values())) <= 1
    # a shard's share is every third run of the grid's seed-major order, whatever finished before
    order = [(cell.name, seed) for seed in range(3) for cell in cells]
    assert by_shard[2] == set(order[1::3]) - {(cells[0].name, 0)}
    assert "shard 2 of 3" in capsys.readouterr().out


@pytest.mark.parametrize("text", ["0/3", "4/3", "3", "a/b", "1/0"])
def test_a_shard_that_is_not_k_of_n_is_a_one_line_usage_error(text, tmp_path, capsys):
    assert main(["sweep", "kv-memory", "--scale", "smoke", "--shard", text, "--out", str(tmp_path / "s")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("reluattn sweep: argument --shard: ") and ("1 <= K <= N" in line or "takes K/N" in line)
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("mode", [["--report"], ["--merge", "elsewhere"]])
@pytest.mark.parametrize("picker", [["--cells", "t17-*"], ["--seeds", "2"], ["--shard", "1/2"]])
def test_a_flag_that_picks_runs_is_refused_with_report_and_merge_not_ignored(mode, picker, tmp_path, capsys):
    """--report and --merge take every finished run; a --cells, --seeds or --shard beside them would be ignored."""
    out = _sweep_folder(tmp_path / "sweep")
    before = _snapshot(out)
    assert main(["sweep", "kv-memory", "--scale", "smoke", "--out", str(out), *mode, *picker]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"reluattn sweep: {picker[0]} only pick the runs") and mode[0] in line
    assert _snapshot(out) == before


def test_list_with_a_shard_counts_only_its_share(tmp_path, capsys):
    cells = cells_of("kv-memory", "smoke")
    assert main(["sweep", "kv-memory", "--scale", "smoke", "--seeds", "2", "--shard", "2/2", "--list",
                 "--out", str(tmp_path / "s")]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith(f"kv-memory at scale smoke: {len(cells)} cells, {len(cells)} runs planned, 0 finished")
