"""`--test-split N`: N training images held out as a test split no choice is made on, disjoint from the
validation images, scored once at the end of the run, and rebuilt the same way by `evaluate --split test`."""

import json

import numpy as np
import pytest

from reluattn.cli import main
from reluattn.data import load_dataset
from reluattn.training.config import TrainConfig
from reluattn.training.run_data import load_run_data
from train_helpers import make_folder_dataset, numpy_run


@pytest.fixture(scope="module")
def train_only_data(tmp_path_factory):
    """An image folder with only a train split (like the shared CIFAR-10 zip): 3 classes x 30 images."""
    root = make_folder_dataset(tmp_path_factory.mktemp("train-only"), train_per_class=30, test_per_class=1)
    for image in (root / "test").rglob("*.png"):
        image.unlink()
    for folder in sorted((root / "test").rglob("*"), reverse=True):
        folder.rmdir()
    (root / "test").rmdir()
    return root


def _rows(dataset) -> set:
    return {image.tobytes() for image in dataset.images}


def test_the_three_splits_are_disjoint_and_cover_the_training_images(train_only_data):
    config = TrainConfig(steps=1, val_split=12, test_split=15)
    run_data = load_run_data(config, train_only_data, progress=False)
    train, validation, test = (_rows(d) for d in (run_data.train, run_data.validation, run_data.test))
    assert (len(run_data.train), len(run_data.validation), len(run_data.test)) == (63, 12, 15)
    assert not (train & validation) and not (train & test) and not (validation & test)
    assert train | validation | test == _rows(load_dataset(train_only_data, "train"))
    assert run_data.description["num_test"] == 15


def test_the_test_images_do_not_depend_on_the_validation_size(train_only_data):
    tests = [_rows(load_run_data(TrainConfig(steps=1, val_split=v, test_split=15), train_only_data,
                                 progress=False).test) for v in (6, 20)]
    assert tests[0] == tests[1]


def test_without_a_test_split_validation_is_unchanged(train_only_data):
    old = load_run_data(TrainConfig(steps=1, val_split=12), train_only_data, progress=False)
    assert old.test is None and old.description["num_test"] == 0
    from reluattn.data import split_validation
    np.testing.assert_array_equal(old.validation.images,
                                  split_validation(load_dataset(train_only_data, "train"), 12, 0)[1].images)


def test_a_run_scores_its_test_split_once_and_evaluate_agrees(train_only_data, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(numpy_run(train_only_data, run, steps=6, **{"--test-split": 15})) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["num_test"] == 15 and 0.0 <= summary["test_accuracy"] <= 1.0
    assert "test accuracy" in summary["summary"]
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(run), "--data", str(train_only_data), "--json"]) == 0  # default: test
    result = json.loads(capsys.readouterr().out)
    assert result["n"] == 15
    assert result["accuracy"] == pytest.approx(summary["test_accuracy"], abs=1e-12)
    assert result["loss"] == pytest.approx(summary["test_loss"], rel=1e-5)


def test_a_test_split_needs_a_validation_split_and_data_without_its_own(train_only_data, tmp_path):
    with pytest.raises(ValueError, match="test_split needs a validation split"):
        TrainConfig(steps=1, val_split=0, test_split=5)
    with_test = make_folder_dataset(tmp_path / "with-test")
    with pytest.raises(Exception, match="has a test split of its own"):
        load_run_data(TrainConfig(steps=1, val_split=12, test_split=5), with_test, progress=False)


def test_compute_dtype_auto_is_probed_once_and_recorded(train_only_data, tmp_path, capsys):
    """--compute-dtype auto: a probe picks float32 or bfloat16, the run's config records the pick, and
    --resume keeps it without probing again."""
    from train_helpers import tiny_args
    from reluattn.training.run_dir import load_checkpoint
    run = tmp_path / "auto"
    assert main(tiny_args(train_only_data, run, steps=4, **{"--compute-dtype": "auto"})) == 0
    line = [l for l in capsys.readouterr().out.splitlines() if "compute dtype auto" in l]
    assert len(line) == 1 and "float32" in line[0] and "bfloat16" in line[0]
    picked = line[0].split("auto: ", 1)[1].split(" ", 1)[0]
    assert picked in ("float32", "bfloat16")
    assert load_checkpoint(run)["config"]["compute_dtype"] == picked
    assert main(["train", "--out", str(run), "--resume", "--compute-dtype", "auto",
                 "--no-progress"]) == 0
    assert "compute dtype auto" not in capsys.readouterr().out
    assert load_checkpoint(run)["config"]["compute_dtype"] == picked
