"""What `reluattn train` may do to a run folder: one run at a time (an OS lock), no new run over files it did
not write, nothing deleted that it did not write, leftovers of a killed run cleaned, temporaries that no
planted symlink can redirect, and errors that name the file a full disk refused. In-process NumPy runs."""

import errno
import os
import re
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

from reluattn.cli import main
from reluattn.training import files
from reluattn.training.step_loop import StepLoop
from reluattn.training.run_dir import list_checkpoints, read_metrics, resolve_checkpoint, save_checkpoint
from train_helpers import assert_bit_identical, cli_command, final_arrays, numpy_run
from train_helpers import cache, data, environment  # noqa: F401  (module fixtures)


def one_error_line(capsys, argv, code=1) -> str:
    capsys.readouterr()
    assert main(argv) == code
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    return lines[0]


def snapshot(folder) -> dict:
    """{relative path: bytes (or "dir" / "-> target")} of everything under `folder`."""
    found = {}
    for root, dirs, names in os.walk(folder):
        for name in dirs + names:
            path = os.path.join(root, name)
            key = os.path.relpath(path, folder)
            if os.path.islink(path):
                found[key] = "-> " + os.readlink(path)
            elif os.path.isdir(path):
                found[key] = "dir"
            else:
                with open(path, "rb") as handle:
                    found[key] = handle.read()
    return found


# ------------------------------------------------------------------------------------------ 1. the lock

HOLDER = r"""
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, f"{os.getpid()}\n".encode())
print("locked", flush=True)
time.sleep(600)
"""


def test_a_second_run_on_a_locked_folder_refuses_naming_the_holder_and_the_lock_dies_with_it(data, tmp_path,
                                                                                             capsys):
    out = tmp_path / "run"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out / ".reluattn.lock")], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        line = one_error_line(capsys, numpy_run(data, out, steps=4))
        assert f"in use by another reluattn train (PID {holder.pid})" in line and "--out" in line
        assert sorted(os.listdir(out)) == [".reluattn.lock"]  # the refused run wrote nothing
    finally:
        holder.kill()  # SIGKILL: no clean-up runs, the kernel drops the lock
        holder.wait()
    assert main(numpy_run(data, out, steps=4)) == 0


def test_two_trainings_on_one_folder_the_second_refuses(data, cache, tmp_path, capsys):
    out = tmp_path / "run"
    first = subprocess.Popen(**cli_command(numpy_run(data, out, steps=2000, **{"--checkpoint-every": 500}), cache),
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        for line in first.stdout:  # wait until it is training
            if line.startswith("reluattn: training "):
                break
        assert first.poll() is None
        line = one_error_line(capsys, numpy_run(data, out, steps=2000) + ["--resume"])
        assert f"PID {first.pid}" in line
    finally:
        first.kill()
        first.wait()


# ------------------------------------------------------------------------- 2. what a new run may start in

def test_a_new_run_refuses_a_folder_it_did_not_write_and_deletes_nothing(data, tmp_path, capsys):
    out = tmp_path / "mine"
    (out / "checkpoints" / "step_00000004").mkdir(parents=True)
    (out / "checkpoints" / "step_00000004" / "notes.txt").write_text("my notes")
    (out / "metrics.jsonl").write_text('{"step": 1, "mine": true}\n')
    (out / "summary.json").write_text('{"mine": true}')
    before = snapshot(out)
    line = one_error_line(capsys, numpy_run(data, out, steps=4))
    assert "not a reluattn run folder" in line and "--out" in line and "--resume" in line
    assert snapshot(out) == before


def test_a_sweep_cells_record_and_log_do_not_stand_in_the_way(data, tmp_path, capsys):
    out = tmp_path / "cell"
    out.mkdir()
    (out / "cell.json").write_text('{"status": "running"}')  # what `reluattn sweep` writes before training
    (out / "train.log").write_text("")
    assert main(numpy_run(data, out, steps=4)) == 0
    assert (out / "cell.json").read_text() == '{"status": "running"}'
    other = tmp_path / "other"
    other.mkdir()
    (other / "cell.json").write_text("{}")
    (other / "photos").mkdir()  # anything else still stands in the way
    assert "(it holds photos)" in one_error_line(capsys, numpy_run(data, other, steps=4))


def test_a_new_run_refuses_a_folder_holding_a_run_with_checkpoints(data, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(numpy_run(data, out, steps=4)) == 0
    before = snapshot(out)
    line = one_error_line(capsys, numpy_run(data, out, steps=4))
    assert "already holds a run" in line and "--resume" in line
    assert snapshot(out) == before


def test_a_run_stopped_before_its_first_checkpoint_can_be_started_again(data, tmp_path, capsys):
    reference, out = tmp_path / "reference", tmp_path / "run"
    assert main(numpy_run(data, reference, steps=4)) == 0
    (out / "checkpoints" / ".tmp-step_00000004-abc.tmp").mkdir(parents=True)  # killed writing its first checkpoint
    (out / ".reluattn.lock").write_text("12345\n")  # the folder was a reluattn run...
    (out / "metrics.jsonl").write_text("")  # ...that had logged nothing yet
    assert main(numpy_run(data, out, steps=4)) == 0
    assert [r["loss"] for r in read_metrics(out)] == [r["loss"] for r in read_metrics(reference)]
    assert_bit_identical(final_arrays(out), final_arrays(reference))


@pytest.mark.parametrize("what_was_deleted", ["checkpoints", "opt_state.npz", "summary and checkpoints"])
def test_a_run_that_got_somewhere_is_never_started_over(data, tmp_path, capsys, what_was_deleted):
    # A finished run whose checkpoints (or optimizer states, to save space) were deleted is still a run: its
    # summary.json, a step_* folder or metrics past step 0 say so, and a new run there is refused.
    out = tmp_path / "run"
    assert main(numpy_run(data, out, steps=8)) == 0
    if what_was_deleted == "opt_state.npz":
        for step in (out / "checkpoints").glob("step_*"):
            (step / "opt_state.npz").unlink()
    else:
        shutil.rmtree(out / "checkpoints")
    if what_was_deleted == "summary and checkpoints":
        (out / "summary.json").unlink()
    before = snapshot(out)
    line = one_error_line(capsys, numpy_run(data, out, steps=4, **{"--attention": "softmax"}))
    evidence = {"checkpoints": "summary.json", "opt_state.npz": "summary.json",
                "summary and checkpoints": "metrics.jsonl records up to step 8"}[what_was_deleted]
    assert f"holds an earlier run ({evidence})" in line and "another --out" in line
    assert snapshot(out) == before
    (out / "summary.json").unlink(missing_ok=True)
    if what_was_deleted == "opt_state.npz":
        assert "holds an earlier run (checkpoints/step_00000008)" in one_error_line(capsys, numpy_run(data, out))


def test_pruning_old_checkpoints_leaves_files_reluattn_did_not_write(tmp_path):
    params = {"w": np.ones((2, 2), np.float32)}
    first = save_checkpoint(tmp_path, 1, {}, params, {}, {}, keep=1)
    (first / "notes.txt").write_text("mine")
    save_checkpoint(tmp_path, 2, {}, params, {}, {}, keep=1)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_00000002"]
    assert sorted(os.listdir(first)) == ["notes.txt"]  # our four files went, the user's note stayed


def test_pruning_finishes_what_a_killed_pruning_left(tmp_path):
    params = {"w": np.ones((2, 2), np.float32)}
    first = save_checkpoint(tmp_path, 1, {}, params, {}, {}, keep=1)
    (first / "config.json").unlink()  # killed half-way through deleting it
    save_checkpoint(tmp_path, 2, {}, params, {}, {}, keep=1)
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["LATEST", "step_00000002"]


# ----------------------------------------------------------------------- 10. leftovers and temporaries

def test_leftover_temporaries_of_a_killed_run_are_cleaned_on_the_next_run(data, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(numpy_run(data, out, steps=8)) == 0
    checkpoints = out / "checkpoints"
    half = checkpoints / ".tmp-step_00000012-4242"  # as a SIGKILL during a checkpoint write leaves it
    half.mkdir()
    (half / "params.npz").write_bytes(b"half")
    (checkpoints / ".LATEST.abc123.tmp").write_text("step_00000012")
    (out / ".metrics.jsonl.xyz.tmp").write_text("")
    (out / ".summary.json.tmp").write_text("")  # the fixed name older versions used
    assert main(numpy_run(data, out, steps=8) + ["--resume"]) == 0
    assert sorted(os.listdir(out)) == [".reluattn.lock", "checkpoints", "metrics.jsonl", "summary.json"]
    assert not [name for name in os.listdir(checkpoints) if name.startswith(".")]


def test_planted_symlinks_under_temporary_names_are_never_written_through(data, tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "run"
    assert main(numpy_run(data, out, steps=4)) == 0
    for name in (".curves.png.tmp", ".summary.json.tmp", ".metrics.jsonl.tmp", "checkpoints/.LATEST.tmp"):
        (out / name).symlink_to(victim)  # the fixed temporary names older versions wrote through
    assert main(["plot", str(out), "--output", str(out / "curves.png")]) == 0
    assert main(numpy_run(data, out, steps=4) + ["--resume"]) == 0  # truncates metrics.jsonl, rewrites LATEST
    assert victim.read_bytes() == b"precious"
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (out / ".summary.json.tmp").symlink_to(victim)
    files.write_atomically(out / "summary.json", "{}")
    assert victim.read_bytes() == b"precious" and (out / "summary.json").read_text() == "{}"
    # A metrics.jsonl that is itself a link is refused, not appended through.
    (out / "metrics.jsonl").unlink()
    (out / "metrics.jsonl").symlink_to(victim)
    with pytest.raises(OSError, match="symbolic link"):
        files.append_line(out / "metrics.jsonl", "{}")
    assert victim.read_bytes() == b"precious"


def test_files_and_folders_get_the_mode_the_umask_gives_not_a_private_one(data, tmp_path, capsys):
    # A teammate in the user's group can read (and so evaluate) a shared run, as with any file the user makes.
    previous = os.umask(0o022)
    try:
        out = tmp_path / "run"
        assert main(numpy_run(data, out, steps=8)) == 0
        assert main(["plot", str(out), "--output", str(out / "curves.png")]) == 0
        files.write_atomically(out / "metrics.jsonl", (out / "metrics.jsonl").read_text())  # as a resume rewrites it
    finally:
        os.umask(previous)
    modes = {name: oct(os.stat(out / name).st_mode & 0o777) for name in
             ("checkpoints/LATEST", "summary.json", "metrics.jsonl", "curves.png", "checkpoints/step_00000008",
              "checkpoints")}
    assert modes == {"checkpoints/LATEST": "0o644", "summary.json": "0o644", "metrics.jsonl": "0o644",
                     "curves.png": "0o644", "checkpoints/step_00000008": "0o755", "checkpoints": "0o755"}


def test_a_full_disk_names_the_file_it_could_not_write(data, tmp_path, capsys, monkeypatch):
    real_write = os.write

    def full_for_metrics(fd, payload):  # the disk fills up when metrics.jsonl grows
        if os.readlink(f"/proc/self/fd/{fd}").endswith("metrics.jsonl"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, payload)

    monkeypatch.setattr(os, "write", full_for_metrics)
    out = tmp_path / "run"
    line = one_error_line(capsys, numpy_run(data, out, steps=4))
    assert f"could not write {out / 'metrics.jsonl'}: the disk is full" in line
    monkeypatch.undo()

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match=re.escape(f"could not write {tmp_path / 'summary.json'}: the disk is full")):
        files.write_atomically(tmp_path / "summary.json", "{}")
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".summary")]


def test_a_second_ctrl_c_still_names_the_last_checkpoint(data, tmp_path, capsys, monkeypatch):
    original = StepLoop.flush

    def flush(self):  # Ctrl-C twice in a row at step 6 (checkpoint 4 is saved)
        if self.pending and self.pending[-1][0] == 6:
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
        original(self)

    monkeypatch.setattr(StepLoop, "flush", flush)
    out = tmp_path / "run"
    line = one_error_line(capsys, numpy_run(data, out, steps=8), code=130)
    assert str(out / "checkpoints" / "step_00000004") in line and "--resume" in line
    assert resolve_checkpoint(out).name == "step_00000004"


def test_a_second_ctrl_c_during_pruning_names_the_checkpoint_latest_names(data, tmp_path, capsys, monkeypatch):
    from reluattn.training import run_dir
    original = run_dir._prune

    def prune(root, kept, newest):  # Ctrl-C twice while checkpoint 8 prunes checkpoint 4 (LATEST names 8)
        if newest == "step_00000008":
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
        original(root, kept, newest)

    monkeypatch.setattr(run_dir, "_prune", prune)
    out = tmp_path / "run"
    line = one_error_line(capsys, numpy_run(data, out, steps=12, **{"--keep-checkpoints": 1}), code=130)
    assert resolve_checkpoint(out).name == "step_00000008"
    assert str(out / "checkpoints" / "step_00000008") in line and "--resume" in line


def test_every_test_the_promises_in_the_docs_name_exists():
    """docs/training.md's "What reluattn promises about your files" points at tests; each must exist."""
    import ast
    from train_helpers import ROOT
    text = (ROOT / "docs" / "training.md").read_text()
    section = text[text.index("## What reluattn promises about your files"):]
    section = section[:section.index("\n## ")]
    cited = set(re.findall(r"(tests/[\w/]+\.py)::(\w+)", section))
    assert len(cited) > 40
    missing = []
    for path, name in sorted(cited):
        tree = ast.parse((ROOT / path).read_text())
        if name not in {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}:
            missing.append(f"{path}::{name}")
    assert missing == []
