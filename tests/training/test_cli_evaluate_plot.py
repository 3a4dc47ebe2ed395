"""`evaluate` (checked against a direct computation with the other backend), `plot` and `attention`."""

import json

import numpy as np
import pytest
from PIL import Image

import reluattn as ra
from reluattn.cli import main
from reluattn.data import load_dataset, split_validation
from reluattn.training.plots import attention_rollout
from reluattn.training.run_dir import load_checkpoint, read_metrics
from train_helpers import tiny_args
from train_helpers import data, environment  # noqa: F401  (module fixtures)


@pytest.fixture(scope="module")
def runs(data, tmp_path_factory):
    """A JAX run (class token, relu) and a NumPy one (mean pooling, softmax), 8 steps each."""
    root = tmp_path_factory.mktemp("runs")
    assert main(tiny_args(data, root / "relu", steps=8)) == 0
    assert main(tiny_args(data, root / "softmax", steps=8, **{"--backend": "numpy", "--attention": "softmax",
                                                               "--pool": "gap"})) == 0
    return root / "relu", root / "softmax"


def direct_evaluation(run, images, labels):
    """Accuracy and mean cross-entropy of the run's checkpoint, computed here with the NumPy backend."""
    saved = load_checkpoint(run)
    cfg = ra.ViTConfig.from_dict(saved["config"]["model"])
    mean, std = (np.array(saved["config"]["data"][key], np.float32) for key in ("mean", "std"))
    logits = np.asarray(ra.backend("numpy").apply(saved["params"], (images / 255.0 - mean) / std, cfg), np.float64)
    log_probs = logits - logits.max(1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(1, keepdims=True))
    return (logits.argmax(1) == labels).mean(), -log_probs[np.arange(len(labels)), labels].mean()


def test_evaluate_json_matches_a_direct_computation(runs, data, capsys):
    relu, _ = runs
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(relu), "--data", str(data), "--json"]) == 0
    out = capsys.readouterr().out
    assert len(out.strip().splitlines()) == 1
    result = json.loads(out)
    assert set(result) == {"accuracy", "loss", "n", "error"} and result["error"] is None
    test = load_dataset(data, "test")  # the default split: the dataset has a test split
    accuracy, loss = direct_evaluation(relu, test.images, test.labels)
    assert result["n"] == len(test) == 18
    assert result["accuracy"] == pytest.approx(accuracy, abs=1e-12)
    assert result["loss"] == pytest.approx(loss, rel=1e-4)


def test_evaluate_without_data_reads_the_dataset_the_run_was_trained_on(runs, data, capsys):
    """No --data and no RELUATTN_DATA (the module's environment): the run's own data path, not a download.
    A sweep resumed without --data scores its few-shot probe this way."""
    relu, _ = runs
    scores = []
    for argv in (["--data", str(data)], []):
        capsys.readouterr()
        assert main(["evaluate", "--checkpoint", str(relu), "--split", "val", "--fewshot", "1", "--json", *argv]) == 0
        scores.append(json.loads(capsys.readouterr().out))
    assert scores[0]["error"] is None and scores[0]["n"] == 12
    assert scores[1] == scores[0]


def test_evaluate_val_is_the_runs_held_out_split(runs, data, capsys):
    for run in runs:
        capsys.readouterr()
        assert main(["evaluate", "--checkpoint", str(run), "--data", str(data), "--split", "val", "--json"]) == 0
        result = json.loads(capsys.readouterr().out)
        held_out = split_validation(load_dataset(data, "train"), 12, 0)[1]
        accuracy, loss = direct_evaluation(run, held_out.images, held_out.labels)
        assert result["n"] == 12 and result["accuracy"] == pytest.approx(accuracy, abs=1e-12)
        assert result["loss"] == pytest.approx(loss, rel=1e-4)
        last_validation = [r for r in read_metrics(run) if r["split"] == "val"][-1]
        assert result["loss"] == pytest.approx(last_validation["loss"], rel=1e-5)  # what training logged


def test_evaluate_text_output(runs, data, capsys):
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(runs[1]), "--data", str(data), "--split", "train"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("train: accuracy ") and "n 72" in line


def check_png(path, min_width=300):
    with Image.open(path) as image:
        assert image.format == "PNG" and image.width >= min_width and image.height >= 150
        pixels = np.asarray(image.convert("L"))
    assert pixels.std() > 5  # not a blank canvas


def test_plot_two_runs(runs, tmp_path, capsys):
    output = tmp_path / "curves.png"
    assert main(["plot", *map(str, runs), "--output", str(output)]) == 0
    assert f"wrote {output}" in capsys.readouterr().out
    check_png(output, min_width=800)


@pytest.mark.parametrize("which", [0, 1])
def test_attention_png(runs, data, tmp_path, which):
    output = tmp_path / "attention.png"
    assert main(["attention", "--checkpoint", str(runs[which]), "--data", str(data), "--index", "4",
                 "--output", str(output)]) == 0
    check_png(output)


def test_rollout_of_identity_attention_is_the_identity_and_rows_are_normalised():
    tokens = 5
    identity = [np.eye(tokens)[None].repeat(2, axis=0)] * 3  # 3 blocks, 2 heads
    np.testing.assert_allclose(attention_rollout(identity), np.eye(tokens))
    rng = np.random.default_rng(0)
    relu_like = [np.maximum(rng.normal(size=(2, tokens, tokens)), 0) / tokens for _ in range(2)]
    rollout = attention_rollout(relu_like)
    np.testing.assert_allclose(rollout.sum(axis=1), np.ones(tokens))  # each row a distribution
    # one block by hand: 0.5 * (row-normalised head mean) + 0.5 * I
    mean = relu_like[0].mean(0)
    expected = 0.5 * mean / mean.sum(1, keepdims=True) + 0.5 * np.eye(tokens)
    np.testing.assert_allclose(attention_rollout(relu_like[:1]), expected)


def test_evaluate_val_on_a_grown_dataset_is_refused(runs, data, tmp_path, capsys):
    # One image more in the training split moves the held-out positions onto other images (training ones).
    import shutil
    grown = tmp_path / "grown"
    shutil.copytree(data, grown)
    shutil.copy(grown / "train" / "cat" / "000.png", grown / "train" / "cat" / "999.png")
    for run in runs:
        capsys.readouterr()
        assert main(["evaluate", "--checkpoint", str(run), "--data", str(grown), "--split", "val", "--json"]) == 1
        captured = capsys.readouterr()
        err = captured.err.strip().splitlines()
        assert len(err) == 1 and f"the images in {grown} are not the ones the run was trained" in err[0], err
        assert "--data" in err[0] and "--split test" in err[0]
        printed = json.loads(captured.out)  # --json still prints one object, with the error
        assert printed["accuracy"] is None and "not the ones the run was trained" in printed["error"]
        assert main(["evaluate", "--checkpoint", str(run), "--data", str(grown), "--split", "test"]) == 0


def test_the_fingerprint_of_upsampled_images_is_computed_without_upsampling_them_all(data):
    import dataclasses
    from reluattn.training.run_data import data_fingerprint, upsample_images
    train = load_dataset(data, "train")
    whole = dataclasses.replace(train, images=upsample_images(train.images, 16))
    assert data_fingerprint(train, None, image_size=16) == data_fingerprint(whole, None)
    assert data_fingerprint(train, None, image_size=16) != data_fingerprint(train, None)


@pytest.mark.parametrize("oddity", ["attention that is not a dict", "a binary line", "a non-UTF-8 folder name",
                                    "the metrics file named"])
def test_plot_draws_runs_with_damaged_records_and_odd_names(runs, tmp_path, capsys, oddity):
    import os
    import shutil
    name = os.fsdecode(b"bad\xffout") if oddity == "a non-UTF-8 folder name" else "run"
    run = tmp_path / name
    shutil.copytree(runs[1], run)
    with open(run / "metrics.jsonl", "ab") as metrics:
        if oddity == "attention that is not a dict":
            metrics.write(b'{"step": 9, "split": "val", "accuracy": 0.5, "loss": 1.0, "attention": "junk"}\n')
        if oddity == "a binary line":
            metrics.write(b'\xff\xfe{"step": 10}\x00\n')
    argument = run / "metrics.jsonl" if oddity == "the metrics file named" else run
    capsys.readouterr()
    assert main(["plot", str(argument), "--output", str(tmp_path / "curves.png")]) == 0, capsys.readouterr().err
    check_png(tmp_path / "curves.png")


def test_evaluate_scores_a_regularised_run_with_the_blocked_kernel(data, tmp_path, capsys):
    # The regulariser is a training term: scoring a run trained with it needs no dense weights.
    run = tmp_path / "regularised"
    assert main(tiny_args(data, run, steps=4, **{"--backend": "numpy", "--attention-reg-weight": 1e-3})) == 0
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(run), "--backend", "jax", "--impl", "blocked", "--json"]) == 0
    blocked = json.loads(capsys.readouterr().out)
    assert main(["evaluate", "--checkpoint", str(run), "--backend", "jax", "--json"]) == 0
    dense = json.loads(capsys.readouterr().out)
    assert blocked["error"] is None and blocked["accuracy"] == dense["accuracy"]
    assert blocked["loss"] == pytest.approx(dense["loss"], rel=1e-4)


def test_evaluate_fewshot_with_too_few_images_names_the_class_and_prints_json(runs, data, capsys):
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(runs[1]), "--data", str(data), "--fewshot", "10", "--json"]) == 1
    captured = capsys.readouterr()
    printed = json.loads(captured.out)
    assert printed["accuracy"] is None and "class 'cat' (0) has 6" in printed["error"]
    assert "class 'cat' (0) has 6" in captured.err
