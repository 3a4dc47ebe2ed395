"""What a checkpoint must be before `evaluate` or `--resume` uses it: arrays that fit its config.json,
checked from the .npz headers before anything is unpacked; a config.json that is the one the parameters
were trained with; a LATEST inside the run; and a checkpoint pruned by a running train is read again, not
called corrupted. In-process NumPy runs on the tiny image folder (one subprocess measures memory)."""

import json
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from reluattn.cli import main
from reluattn.training import run_dir as ck
from train_helpers import numpy_run
from train_helpers import data, environment, finished, one_error_line  # noqa: F401  (shared fixtures)


@pytest.fixture
def run(finished, tmp_path):
    """A copy of the finished run to damage."""
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    return out


def rewrite_npz(path, drop=(), add=None, declare=None):
    """Rebuild the .npz at `path` without the members `drop`, with the arrays `add` ({name: array}), and with
    `declare` = (name, shape) replaced by a deflated float32 array of zeros of that shape, written in 4 MiB
    blocks (so a 400 MB array costs this process no memory and the file stays small)."""
    temporary = path.with_name("rebuilt.npz")
    with zipfile.ZipFile(path) as old, zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as new:
        for info in old.infolist():
            name = info.filename[:-4]
            if name in drop or (declare and name == declare[0]):
                continue
            new.writestr(info, old.read(info))
        for name, array in (add or {}).items():
            with new.open(f"{name}.npy", "w") as member:
                np.lib.format.write_array(member, np.asarray(array), allow_pickle=False)
        if declare:
            name, shape = declare
            with new.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array_header_1_0(member, {"descr": "<f4", "fortran_order": False, "shape": shape})
                block = bytes(4 << 20)
                left = 4 * int(np.prod(shape))
                while left:
                    member.write(block[:min(left, len(block))])
                    left -= min(left, len(block))
    temporary.replace(path)


def latest(run):
    return ck.resolve_checkpoint(run)


# ------------------------------------------------------------------------- arrays that fit, checked first

# Loads a checkpoint, then resumes its (complete) run, in a process whose address space is capped 200 MB above
# what importing took; prints how much the peak resident memory grew and what each did.
CAPPED_LOAD = r"""
import contextlib, io, resource, sys
from reluattn.cli import main
from reluattn.training.run_dir import CheckpointError, load_checkpoint
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
size = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (size + (200 << 20), resource.RLIM_INFINITY))
try:
    load_checkpoint(sys.argv[1])
    outcome = "loaded"
except CheckpointError as error:
    outcome = "CheckpointError: " + str(error)
except MemoryError:
    outcome = "MemoryError"
err = io.StringIO()
with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
    code = main(["train", "--no-progress", "--out", sys.argv[1], "--resume"])
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) >> 10
print(grown)
print(outcome.replace("\n", " "))
print(code, err.getvalue().strip().replace("\n", " | "))
"""


def test_a_huge_array_in_params_npz_is_refused_from_its_header_in_bounded_memory(run):
    # A params.npz of about 400 KB whose head/b unpacks to 100 million float32 (400 MB): evaluate and --resume (on
    # the complete run, which used to answer "already complete" without reading it) refuse it from the header.
    rewrite_npz(latest(run) / "params.npz", declare=("head/b", (100_000_000,)))
    assert (latest(run) / "params.npz").stat().st_size < 1 << 20
    result = subprocess.run([sys.executable, "-c", CAPPED_LOAD, str(run)], capture_output=True, text=True,
                            timeout=300)
    grown, outcome, resumed = result.stdout.strip().split("\n")
    assert outcome.startswith("CheckpointError: ") and "head/b has shape (100000000,), expected (3,)" in outcome, \
        (outcome, result.stderr[-500:])
    code, message = resumed.split(" ", 1)
    assert code == "1" and "head/b has shape (100000000,)" in message and "|" not in message
    assert int(grown) < 50, f"peak resident memory grew by {grown} MB"


@pytest.mark.parametrize("damage, fragment", [
    ({"add": {"head/extra": np.zeros(3, np.float32)}}, "unexpected leaf head/extra (3,)"),
    ({"drop": ["ln_f/bias"]}, "missing ln_f/bias"),
    ({"drop": ["head/b"], "add": {"head/b": np.array(["a", "b", "c"])}}, "head/b (<U1)"),
])
def test_params_that_do_not_fit_are_refused_even_by_a_complete_run(run, capsys, damage, fragment):
    rewrite_npz(latest(run) / "params.npz", **damage)
    line = one_error_line(capsys, ["train", "--no-progress", "--out", str(run), "--resume"])
    assert fragment in line and str(latest(run) / "params.npz") in line
    line = one_error_line(capsys, ["evaluate", "--checkpoint", str(run), "--json"])
    assert fragment in line


def test_an_oversized_optimizer_array_is_refused_from_its_header(run, capsys):
    rewrite_npz(latest(run) / "opt_state.npz", declare=("0/mu/head/b", (1_000_000,)))
    line = one_error_line(capsys, ["train", "--no-progress", "--out", str(run), "--resume"])
    assert "opt_state.npz do not fit its config.json" in line and "larger than any parameter" in line


# --------------------------------------------------------------------------------- config.json is bound

def test_config_json_edited_to_another_attention_kind_is_refused(run, capsys):
    path = latest(run) / "config.json"
    config = json.loads(path.read_text())
    assert config["model"]["attention"]["kind"] == "relu"
    config["model"]["attention"]["kind"] = "softmax"  # same shapes: nothing else would notice
    path.write_text(json.dumps(config, indent=2, sort_keys=True))
    line = one_error_line(capsys, ["evaluate", "--checkpoint", str(run)])
    assert f"{path} was changed after the checkpoint was written" in line
    assert "restore the original config.json" in line


def test_config_json_nested_too_deeply_is_named(run, capsys):
    (latest(run) / "config.json").write_text("[" * 200_000)
    line = one_error_line(capsys, ["evaluate", "--checkpoint", str(run)])
    assert str(latest(run) / "config.json") in line and "nested too deeply" in line
    line = one_error_line(capsys, ["train", "--no-progress", "--out", str(run), "--resume"])
    assert str(latest(run) / "config.json") in line


# ------------------------------------------------------------------------------- LATEST and pruning

def test_latest_pointing_outside_the_run_is_refused(run, finished, capsys):
    (run / "checkpoints" / "LATEST").write_text(f"../../{finished.parent.name}/run/checkpoints/step_00000008")
    line = one_error_line(capsys, ["evaluate", "--checkpoint", str(run)])
    assert "not one of this run's step_* folders" in line and "LATEST" in line


def test_a_checkpoint_pruned_while_it_is_read_is_read_again_at_the_new_latest(run, monkeypatch):
    # What `evaluate` meets while a train with --keep-checkpoints 1 saves step 12 and prunes step 8 between
    # LATEST being read and the checkpoint's files being opened.
    root = run / "checkpoints"
    real = ck.resolve_checkpoint
    calls = []

    def resolve_then_prune(path):
        found = real(path)
        if not calls:
            shutil.copytree(found, root / "step_00000012")
            (root / "LATEST").write_text("step_00000012")
            for name in ("config.json", "params.npz", "opt_state.npz", "state.json"):
                (found / name).unlink()  # what pruning deletes, in its order
        calls.append(found.name)
        return found

    monkeypatch.setattr(ck, "resolve_checkpoint", resolve_then_prune)
    loaded = ck.load_checkpoint(run)
    assert calls == ["step_00000008", "step_00000012"] and loaded["path"].name == "step_00000012"
    gone = root / "step_00000008"
    gone.mkdir(exist_ok=True)
    (gone / "params.npz").write_bytes(b"")  # a checkpoint named itself is not swapped for another
    with pytest.raises(ck.CheckpointError, match="deleted while it was read"):
        ck.load_checkpoint(gone)
