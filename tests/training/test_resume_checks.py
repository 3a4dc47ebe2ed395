"""What --resume checks before it continues a run (its data source and fingerprint, its state, finite
arrays), `evaluate --json` on a broken checkpoint, and user mistakes that must be clear errors, not
internal ones. In-process NumPy runs on the tiny image folder."""

import json
import os
import shutil

import numpy as np
import pytest
from PIL import Image

from reluattn.cli import main
from reluattn.training.run_dir import list_checkpoints, save_checkpoint
from train_helpers import assert_bit_identical, final_arrays, numpy_run
from train_helpers import data, environment, finished, one_error_line  # noqa: F401  (shared fixtures)


def cut_back_to_step_4(finished, tmp_path):
    """A copy of the finished run as if it had been stopped right after checkpoint 4."""
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    shutil.rmtree(out / "checkpoints" / "step_00000008")
    (out / "checkpoints" / "LATEST").write_text("step_00000004")
    (out / "summary.json").unlink()
    return out


def resume_args(out, **flags):
    """The hint a stopped run prints, plus `flags`: `reluattn train --out R --resume`."""
    args = ["train", "--no-progress", "--out", str(out), "--resume"]
    for name, value in flags.items():
        args += [name] if value is True else [name, str(value)]
    return args


# ------------------------------------------------------------------------------------- 4. the run's data

def test_resume_without_data_reads_the_data_the_run_recorded(finished, tmp_path, capsys):
    out = cut_back_to_step_4(finished, tmp_path)
    assert main(resume_args(out)) == 0, capsys.readouterr().err
    assert "resuming" in capsys.readouterr().out
    assert_bit_identical(final_arrays(out), final_arrays(finished))


def test_resume_on_different_images_is_refused_unless_allowed(finished, data, tmp_path, capsys):
    out = cut_back_to_step_4(finished, tmp_path)
    other = tmp_path / "other"
    shutil.copytree(data, other)
    for image in sorted((other / "train" / "cat").iterdir())[:3]:  # same shapes, classes and counts
        Image.fromarray(np.full((8, 8, 3), 255, np.uint8)).save(image)
    line = one_error_line(capsys, resume_args(out, **{"--data": other}))
    assert "not the ones the run was trained on" in line and "--allow-different-data" in line
    assert [p.name for p in list_checkpoints(out)] == ["step_00000004"]
    saved = json.loads((list_checkpoints(out)[-1] / "config.json").read_text())["data"]
    assert main(resume_args(out, **{"--data": other, "--allow-different-data": True})) == 0
    resumed = json.loads((list_checkpoints(out)[-1] / "config.json").read_text())["data"]
    assert (resumed["mean"], resumed["std"]) == (saved["mean"], saved["std"])  # the run's normalisation kept
    assert resumed["fingerprint"] != saved["fingerprint"]  # and the images it now continues on recorded


# ------------------------------------------------------------------------------------------- 5. NaNs

def poisoned(finished, tmp_path):
    """A copy of the finished run whose latest checkpoint holds a NaN parameter."""
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    path = list_checkpoints(out)[-1] / "params.npz"
    with np.load(path) as saved:
        arrays = {key: saved[key] for key in saved.files}
    arrays["head/w"] = arrays["head/w"].copy()
    arrays["head/w"][0, 0] = np.nan
    np.savez(path, **arrays)
    return out


def test_evaluate_json_on_nan_parameters_prints_valid_json_and_fails(finished, data, tmp_path, capsys):
    out = poisoned(finished, tmp_path)
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(out), "--data", str(data), "--json"]) == 1
    captured = capsys.readouterr()
    result = json.loads(captured.out, parse_constant=lambda name: pytest.fail(f"{name} is not JSON"))
    assert result["accuracy"] is None and result["loss"] is None and result["n"] == 18
    assert "non-finite parameters" in result["error"] and "head/w" in result["error"]
    assert "non-finite parameters" in captured.err


def test_resume_refuses_a_nan_checkpoint_instead_of_calling_it_good(finished, data, tmp_path, capsys):
    out = poisoned(finished, tmp_path)
    line = one_error_line(capsys, resume_args(out, **{"--data": data}))
    assert "non-finite" in line and "head/w" in line and "not a good checkpoint" in line


def test_a_non_finite_checkpoint_is_never_saved(tmp_path):
    params = {"w": np.array([[1.0, np.inf]], np.float32)}
    with pytest.raises(ValueError, match="refusing to save.*w hold non-finite"):
        save_checkpoint(tmp_path, 1, {}, params, {}, {})
    with pytest.raises(ValueError, match="mu/w hold non-finite"):
        save_checkpoint(tmp_path, 1, {}, {"w": np.ones(2, np.float32)}, {"mu/w": np.array([np.nan])}, {})
    assert list_checkpoints(tmp_path) == []


def test_no_validation_record_is_written_from_non_finite_parameters(data, tmp_path, capsys, monkeypatch):
    # The update of step 4 (a validation step) makes the parameters NaN while its loss, computed before the
    # update, is finite: the run must stop without scoring them.
    from reluattn.training.engine import NumpyEngine
    from reluattn.training.run_dir import read_metrics
    original = NumpyEngine.step

    def step(self, step, indices):
        metrics = original(self, step, indices)
        if step == 3:
            self.params["head"]["b"] = np.full_like(self.params["head"]["b"], np.nan)
        return metrics

    monkeypatch.setattr(NumpyEngine, "step", step)
    out = tmp_path / "run"
    line = one_error_line(capsys, numpy_run(data, out))
    assert "parameters became non-finite by step 4" in line and "no checkpoint had been saved yet" in line
    assert [r for r in read_metrics(out) if r["split"] != "train"] == []


# ------------------------------------------------------------------------------ 12. clear user errors

def test_seed_beyond_64_bits_is_a_clear_error(data, tmp_path, capsys):
    line = one_error_line(capsys, numpy_run(data, tmp_path / "run", **{"--seed": 2 ** 63}), code=2)
    assert "seed must be below 2**63" in line


def test_a_model_too_big_for_memory_says_what_it_would_need(data, tmp_path, capsys, monkeypatch):
    from reluattn.training import config
    monkeypatch.setattr(config, "memory_available_bytes", lambda: 16 * 2 ** 30)  # 16 GiB free
    line = one_error_line(capsys, numpy_run(data, tmp_path / "run", **{"--dim": 100000}))
    # 40,010,100,019 parameters (the 100000 x 300000 and 100000 x 100000 attention matrices: 4e10) x 16 bytes
    assert "40,010,100,019 parameters" in line and "596.2 GiB" in line and "16.0 GiB" in line and "--dim" in line
    assert not (tmp_path / "run").exists()  # refused before the run folder was made


def test_the_memory_check_compares_with_the_memory_available_not_the_total():
    # A model needing more than what is free now but less than the machine's total passed before, and then
    # grew to 13.7 GB. Sized here halfway between this machine's MemAvailable and MemTotal (no allocation).
    from reluattn.config import ViTConfig
    from reluattn.training.config import check_fits_in_memory, training_memory_bytes
    meminfo = dict(line.split(":") for line in open("/proc/meminfo"))
    total, available = (int(meminfo[name].split()[0]) * 1024 for name in ("MemTotal", "MemAvailable"))
    target = (total + available) / 2
    dim = 2 * round(np.sqrt(target / 16 / 4) / 2)  # ~4 D^2 parameters of 16 bytes each; D even (2 heads)
    model = ViTConfig(image_size=8, patch_size=4, num_classes=3, dim=dim, depth=1, heads=2, mlp_dim=16)
    assert available < training_memory_bytes(model) < total, (available, training_memory_bytes(model), total)
    with pytest.raises(ValueError, match="GiB of memory available now"):
        check_fits_in_memory(model)


def test_clip_norm_must_not_be_negative(data, tmp_path, capsys):
    line = one_error_line(capsys, numpy_run(data, tmp_path / "run", **{"--clip-norm": -1}), code=2)
    assert "--clip-norm" in line and "0 to turn clipping off" in line


@pytest.mark.parametrize("state, fragment", [({"epoch": 0.57}, 'holds no valid "step"'),
                                             ({"step": "4"}, 'holds no valid "step"'),
                                             ({"step": 1000000}, "says step 1000000, beyond this run's 8 steps")])
def test_a_damaged_state_json_is_a_clear_error(finished, data, tmp_path, capsys, state, fragment):
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    (list_checkpoints(out)[-1] / "state.json").write_text(json.dumps(state))
    line = one_error_line(capsys, resume_args(out, **{"--data": data}))
    assert fragment in line and "state.json" in line and "corrupted" in line
