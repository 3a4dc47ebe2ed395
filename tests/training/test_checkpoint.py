"""Checkpoints: round trip, atomicity (a failed write leaves the previous one intact), clear errors."""

import errno
import json

import numpy as np
import pytest

import reluattn as ra
from reluattn.training import run_dir as ck
from reluattn.params import flatten


def small_params():
    return ra.init_params(MODEL, seed=3)


MODEL = ra.ViTConfig(image_size=8, patch_size=4, dim=8, heads=2, depth=2, mlp_dim=8)


def save(run, step, params, **kw):
    opt = {"mu/head/w": np.full((8, 10), step, np.float32), "count": np.array(step)}
    return ck.save_checkpoint(run, step, {"model": MODEL.to_dict()}, params, opt, {"epoch": 1}, **kw)


def test_round_trip_and_latest(tmp_path):
    params = small_params()
    save(tmp_path, 10, params)
    save(tmp_path, 20, params)
    loaded = ck.load_checkpoint(tmp_path)
    assert loaded["path"].name == "step_00000020"
    assert loaded["state"]["step"] == 20 and loaded["state"]["epoch"] == 1
    assert loaded["opt_state"]["count"] == 20
    for path, leaf in flatten(params).items():
        np.testing.assert_array_equal(flatten(loaded["params"])[path], leaf)
    assert isinstance(loaded["params"]["blocks"], list)
    assert ck.load_checkpoint(tmp_path / "checkpoints" / "step_00000010")["state"]["step"] == 10


def test_keeps_only_the_newest(tmp_path):
    for step in (1, 2, 3, 4):
        save(tmp_path, step, small_params(), keep=2)
    assert [p.name for p in ck.list_checkpoints(tmp_path)] == ["step_00000003", "step_00000004"]


def test_full_disk_leaves_previous_checkpoint_intact(tmp_path, monkeypatch):
    params = small_params()
    save(tmp_path, 5, params)

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ck.np, "savez", full_disk)
    with pytest.raises(ck.CheckpointError, match="disk is full"):
        save(tmp_path, 6, params)
    monkeypatch.undo()
    assert ck.load_checkpoint(tmp_path)["state"]["step"] == 5
    assert [p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".tmp")] == []


def test_half_written_checkpoint_is_ignored(tmp_path):
    save(tmp_path, 5, small_params())
    broken = tmp_path / "checkpoints" / "step_00000009"
    broken.mkdir()
    (broken / "config.json").write_text("{}")  # a crash before the rest was written
    (tmp_path / "checkpoints" / "LATEST").write_text("step_00000009")
    assert ck.resolve_checkpoint(tmp_path).name == "step_00000005"


def test_corrupted_files_give_clear_errors(tmp_path):
    directory = save(tmp_path, 1, small_params())
    (directory / "config.json").write_text("{not json")
    with pytest.raises(ck.CheckpointError, match="does not parse as JSON"):
        ck.load_checkpoint(directory)
    (directory / "config.json").write_text(json.dumps({}))
    (directory / "params.npz").write_bytes(b"garbage")
    with pytest.raises(ck.CheckpointError, match="corrupted"):
        ck.load_checkpoint(directory)


def test_missing_checkpoint_is_explained(tmp_path):
    with pytest.raises(ck.CheckpointError, match="no checkpoint at"):
        ck.resolve_checkpoint(tmp_path / "nope")
    with pytest.raises(ck.CheckpointError, match="holds no checkpoint"):
        ck.resolve_checkpoint(tmp_path)


def test_npz_files_hold_no_pickles(tmp_path):
    directory = save(tmp_path, 1, small_params())
    for name in ("params.npz", "opt_state.npz"):
        with np.load(directory / name, allow_pickle=False) as data:
            assert all(data[key].dtype != object for key in data.files)
