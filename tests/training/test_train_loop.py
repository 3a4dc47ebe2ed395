"""The training loop in-process: metrics.jsonl and the summary, resume bookkeeping, refusing to resume a
different run, and stopping on a non-finite loss with the last good checkpoint kept."""

import json

import numpy as np
import pytest

from reluattn.cli import main
from reluattn.training.run_dir import list_checkpoints, read_metrics, resolve_checkpoint
from train_helpers import assert_bit_identical, final_arrays, numpy_run, tiny_args
from train_helpers import data, environment  # noqa: F401  (module fixtures)

KEYS = {"step", "epoch", "split", "loss", "accuracy", "learning_rate", "images_per_s", "time"}


def test_metrics_lines_and_summary(data, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(numpy_run(data, out, steps=8)) == 0
    records = read_metrics(out)
    train = [r for r in records if r["split"] == "train"]
    val = [r for r in records if r["split"] == "val"]
    assert all(set(record) == KEYS for record in train)
    assert all(set(record) == KEYS | {"attention"} for record in val)  # test_attention_statistics.py checks it
    assert [r["step"] for r in train] == [2, 4, 6, 8]
    assert [r["step"] for r in val] == [4, 8]
    # 60 training images (72 minus 12 held out) make 7 full batches of 8 per epoch.
    assert train[-1]["epoch"] == pytest.approx(8 / 7, abs=1e-4)
    assert all(0 <= r["accuracy"] <= 1 and np.isfinite(r["loss"]) and r["learning_rate"] > 0 for r in records)
    assert [r["time"] for r in records] == sorted(r["time"] for r in records)
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    assert summary.startswith("reluattn: done: 8/8 steps")
    best = max(r["accuracy"] for r in val)
    assert f"validation accuracy best {best:.4f}" in summary and f"final {val[-1]['accuracy']:.4f}" in summary
    saved = json.loads((out / "summary.json").read_text())
    assert saved["best_val_accuracy"] == best and saved["steps"] == 8
    state = json.loads((resolve_checkpoint(out) / "state.json").read_text())
    assert state["step"] == 8 and [entry["accuracy"] for entry in state["validation"]] == [r["accuracy"] for r in val]


def test_resume_drops_metrics_past_the_checkpoint(data, tmp_path, capsys):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert main(numpy_run(data, whole)) == 0
    assert main(numpy_run(data, cut)) == 0
    # As if killed after writing metrics for steps 5-8 but before checkpoint 8 was complete:
    (cut / "checkpoints" / "step_00000008" / "state.json").unlink()
    (cut / "checkpoints" / "LATEST").write_text("step_00000008")  # pointing at the incomplete one
    assert len(read_metrics(cut)) == 6
    assert main(numpy_run(data, cut) + ["--resume"]) == 0
    assert "resuming" in capsys.readouterr().out
    ours = [(r["step"], r["split"], r["loss"]) for r in read_metrics(cut)]
    assert ours == [(r["step"], r["split"], r["loss"]) for r in read_metrics(whole)]
    assert_bit_identical(final_arrays(cut), final_arrays(whole))


def test_resume_refuses_a_different_configuration(data, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(numpy_run(data, out, steps=4)) == 0
    capsys.readouterr()
    assert main(numpy_run(data, out, steps=6, **{"--attention": "softmax"}) + ["--resume"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "model.attention.kind: saved 'relu', now 'softmax'" in err and "steps: saved 4, now 6" in err
    # Changing only when to log, validate and checkpoint is allowed; a finished run says so.
    assert main(numpy_run(data, out, steps=4, **{"--log-every": 1}) + ["--resume"]) == 0
    assert "already complete" in capsys.readouterr().out


def test_a_new_run_refuses_an_existing_run_directory(data, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(numpy_run(data, out, steps=4)) == 0
    capsys.readouterr()
    assert main(numpy_run(data, out, steps=4)) == 1
    assert "pass --resume" in capsys.readouterr().err


@pytest.mark.parametrize("backend", ["jax", "numpy"])
def test_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(data, tmp_path, capsys, backend):
    out = tmp_path / "run"
    # Step 1 has learning rate 0 (warm-up); from step 2 on it is 1e30 and the parameters blow up.
    args = tiny_args(data, out, steps=12, **{"--backend": backend, "--lr": 1e30, "--warmup-steps": 3,
                                             "--checkpoint-every": 1, "--log-every": 1})
    assert main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    assert "loss became nan" in err[0] and "at step 3" in err[0]
    assert "step_00000002" in err[0] and "kept" in err[0]
    assert [p.name for p in list_checkpoints(out)] == ["step_00000001", "step_00000002"]
    assert resolve_checkpoint(out).name == "step_00000002"
    assert all(np.isfinite(array).all() for array in final_arrays(out).values())
    lines = [r for r in read_metrics(out) if r["split"] == "train"]
    assert lines[-1]["step"] == 3 and lines[-1]["loss"] is None  # logged as null, not NaN (valid JSON)
