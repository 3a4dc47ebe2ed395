"""A run killed (SIGKILL) at any moment and resumed ends bit-identical to one that never stopped; Ctrl-C and
SIGTERM save a checkpoint and exit cleanly. Each run is a fresh `reluattn train` process."""

import json
import signal

import pytest

from reluattn.training.run_dir import list_checkpoints, read_metrics
from train_helpers import assert_bit_identical, final_arrays, run_cli, tiny_args
from train_helpers import cache, data  # noqa: F401  (module fixtures)

# bfloat16 matmuls, crop, flip and mixup: every random and low-precision piece of the real recipe.
RECIPE = {"--compute-dtype": "bfloat16", "--mixup": 0.4, "--seed": 3}


@pytest.fixture(scope="module")
def reference(data, cache, tmp_path_factory):
    """An uninterrupted 12-step run."""
    out = tmp_path_factory.mktemp("reference") / "run"
    done = run_cli(tiny_args(data, out, **RECIPE), cache)
    assert done.returncode == 0, done.stderr
    return out


def train_steps(run):
    return [r["step"] for r in read_metrics(run) if r["split"] == "train"]


def test_resume_after_sigkill_is_bit_identical(data, cache, reference, tmp_path):
    out = tmp_path / "run"
    # Killed at step 6, two steps after checkpoint 4 (its metrics for steps 5-6 were never written)...
    killed = run_cli(tiny_args(data, out, **RECIPE), cache, kill_mode="flush:SIGKILL:6")
    assert killed.returncode == -signal.SIGKILL
    assert [p.name for p in list_checkpoints(out)] == ["step_00000004"]
    # ...then resumed and killed again while checkpoint 8 was half written...
    killed = run_cli(tiny_args(data, out, **RECIPE) + ["--resume"], cache, kill_mode="checkpoint:SIGKILL:8")
    assert killed.returncode == -signal.SIGKILL
    assert any(path.name.startswith(".tmp-step_00000008") for path in (out / "checkpoints").iterdir())
    assert [p.name for p in list_checkpoints(out)] == ["step_00000004"]  # the half-written one does not count
    with open(out / "metrics.jsonl", "a") as handle:  # and a line cut off by the kill
        handle.write('{"step": 9, "spl')
    # ...and resumed to the end.
    done = run_cli(tiny_args(data, out, **RECIPE) + ["--resume"], cache)
    assert done.returncode == 0, done.stderr
    assert "resuming" in done.stdout and "at step 4 of 12" in done.stdout
    assert_bit_identical(final_arrays(out), final_arrays(reference))
    assert_bit_identical(final_arrays(out, "opt_state.npz"), final_arrays(reference, "opt_state.npz"))
    # metrics.jsonl: each step logged once (lines past the checkpoint dropped on resume), same values.
    assert train_steps(out) == train_steps(reference) == [2, 4, 6, 8, 10, 12]
    mine = [(r["step"], r["split"], r["loss"], r["accuracy"]) for r in read_metrics(out)]
    theirs = [(r["step"], r["split"], r["loss"], r["accuracy"]) for r in read_metrics(reference)]
    assert mine == theirs
    state = json.loads((list_checkpoints(out)[-1] / "state.json").read_text())
    assert state["step"] == 12 and [v["step"] for v in state["validation"]] == [4, 8, 12]


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_signal_saves_a_checkpoint_and_the_run_resumes(data, cache, reference, tmp_path, name):
    out = tmp_path / "run"
    stopped = run_cli(tiny_args(data, out, **RECIPE), cache, kill_mode=f"flush:{name}:6")
    assert stopped.returncode == 128 + getattr(signal, name)
    assert "Traceback" not in stopped.stderr
    message = [line for line in stopped.stderr.splitlines() if name in line]
    assert len(message) == 1 and "--resume" in message[0] and "step 6" in message[0]
    assert list_checkpoints(out)[-1].name == "step_00000006"
    if name == "SIGTERM":
        return  # the resume below is the same for both
    done = run_cli(tiny_args(data, out, **RECIPE) + ["--resume"], cache)
    assert done.returncode == 0, done.stderr
    assert_bit_identical(final_arrays(out), final_arrays(reference))


def test_data_parallel_over_two_devices_computes_the_same_steps(data, cache, reference, tmp_path):
    out = tmp_path / "run"
    done = run_cli(tiny_args(data, out, **RECIPE), cache,
                   extra_env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2"})
    assert done.returncode == 0, done.stderr
    assert "on 2 cpu devices" in done.stdout
    # Same batches and augmentation on two devices: the logged losses agree to float32/bfloat16 rounding
    # (the gradient all-reduce sums in another order, so the parameters are close, not bit-identical).
    two = [r for r in read_metrics(out) if r["split"] == "train"]
    one = [r for r in read_metrics(reference) if r["split"] == "train"]
    assert [r["step"] for r in two] == [r["step"] for r in one]
    assert two[0]["loss"] == pytest.approx(one[0]["loss"], rel=1e-3)
    assert all(abs(a["loss"] - b["loss"]) < 0.02 for a, b in zip(two, one))
