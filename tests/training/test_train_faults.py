"""Fault injection: a short training is killed with SIGKILL at random moments, several times in a row, and
resumed each time (started again, its metrics.jsonl deleted, when no checkpoint was saved yet); it ends
bit-identical to a run that never stopped, with each step logged once and no temporary left behind.

The moments are random (a seeded generator picks a step still ahead of the run, waits for the run to log
it, then waits a random part of one step's time, as the uninterrupted run took it), so a kill can land
anywhere: inside a step, a metrics append, a checkpoint write, the LATEST update or the pruning of old
checkpoints. Counting steps rather than seconds keeps the kills landing before the end however busy the
machine is (a delay drawn from the uninterrupted run's wall time once outlasted a resumed run that went
faster than the reference on a loaded CPU). Each process is a fresh
`reluattn train` with the NumPy backend: nothing to compile, so six processes fit in about half a minute
(the JAX backend's resume is held bit-identical by test_train_resume.py, at chosen moments).
"""

import os
import signal
import subprocess
import time

import numpy as np

from reluattn.training.run_dir import list_checkpoints, read_metrics
from train_helpers import assert_bit_identical, cli_command, final_arrays, tiny_args
from train_helpers import cache, data  # noqa: F401  (module fixtures)

# Many small pieces of work to land in: a checkpoint every 3 steps (2 kept), a metrics line every step.
FLAGS = {"--backend": "numpy", "--checkpoint-every": 3, "--keep-checkpoints": 2, "--log-every": 1,
         "--eval-every": 5, "--seed": 5}
STEPS = 60
KILLS = 4
# What a finished run folder holds (the lock file stays: deleting it could let two runs in).
FINISHED = {".reluattn.lock", "metrics.jsonl", "summary.json", "checkpoints"}


def start(out, data, cache, resume: bool, log) -> subprocess.Popen:
    if not resume and (out / "metrics.jsonl").exists():  # killed before its first checkpoint: what the refusal of a
        (out / "metrics.jsonl").unlink()                   # fresh start over logged steps tells the user to do
    args = tiny_args(data, out, steps=STEPS, **FLAGS) + (["--resume"] if resume else [])
    return subprocess.Popen(**cli_command(args, cache), stdout=subprocess.PIPE, stderr=log)


def wait_for(process, start: str) -> float:
    """Read the run's status lines until one starts with `start`; returns that moment."""
    for line in process.stdout:
        if line.startswith(start):
            return time.monotonic()
    return time.monotonic()  # it ended first (the caller sees its exit code)


def test_repeated_sigkills_at_random_moments_end_bit_identical(data, cache, tmp_path):
    reference = tmp_path / "reference"
    with open(tmp_path / "reference.log", "w") as log:
        process = start(reference, data, cache, False, log)
        began = wait_for(process, "reluattn: training ")
        window = wait_for(process, "reluattn: done") - began  # how long the training itself takes
        process.stdout.read()
        assert process.wait(timeout=300) == 0, (tmp_path / "reference.log").read_text()

    out = tmp_path / "run"
    rng = np.random.default_rng(17)
    landed = []
    with open(tmp_path / "killed.log", "w") as log:
        for _ in range(KILLS):
            checkpoints = list_checkpoints(out)
            resumed_at = int(checkpoints[-1].name[5:]) if checkpoints else 0
            if resumed_at + 1 > STEPS - 3:
                break  # too little left to kill inside
            process = start(out, data, cache, bool(checkpoints), log)
            target = int(rng.integers(resumed_at + 1, STEPS - 3 + 1))  # a step ahead, at least 3 before the end
            wait_for(process, f"reluattn: step {target} ")
            time.sleep(rng.uniform(0.0, 1.0) * window / STEPS)  # somewhere in what follows that step's log line
            process.send_signal(signal.SIGKILL)
            process.stdout.read()
            code = process.wait(timeout=300)
            assert code in (0, -signal.SIGKILL), (tmp_path / "killed.log").read_text()
            landed.append(code == -signal.SIGKILL)
            if code == 0:  # it finished before the kill came
                break
    assert sum(landed) >= 2, f"only {sum(landed)} kills landed before the run finished (window {window:.2f} s)"

    with open(tmp_path / "final.log", "w") as log:
        process = start(out, data, cache, bool(list_checkpoints(out)), log)
        process.stdout.read()
        assert process.wait(timeout=300) == 0, (tmp_path / "final.log").read_text()
    assert_bit_identical(final_arrays(out), final_arrays(reference))
    assert_bit_identical(final_arrays(out, "opt_state.npz"), final_arrays(reference, "opt_state.npz"))
    ours = [(r["step"], r["split"], r["loss"], r["accuracy"]) for r in read_metrics(out)]
    assert ours == [(r["step"], r["split"], r["loss"], r["accuracy"]) for r in read_metrics(reference)]
    # No stray temporaries: only what a finished run holds, down to the files in each checkpoint.
    assert set(os.listdir(out)) == FINISHED
    assert sorted(os.listdir(out / "checkpoints")) == ["LATEST", f"step_{STEPS - 3:08d}", f"step_{STEPS:08d}"]
    for checkpoint in list_checkpoints(out):
        assert sorted(os.listdir(checkpoint)) == ["config.json", "opt_state.npz", "params.npz", "state.json"]
