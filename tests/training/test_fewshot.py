"""The few-shot linear probe (reluattn/training/fewshot.py, `reluattn evaluate --fewshot K`): ~100 % on
linearly separable features, chance on random labels, the pre-logits are exactly what the head reads (both
backends), and the command line's JSON carries "fewshot_accuracy"."""

import json

import numpy as np
import pytest

from reluattn import backend as get_backend
from reluattn.cli import main
from reluattn.config import ViTConfig
from reluattn.params import init_params
from reluattn.training.augment import normalize
from reluattn.training.fewshot import (L2_REG, fewshot_accuracy, pre_logits, ridge_probe_accuracy,
                                       ridge_probe_scores)
from train_helpers import tiny_args
from train_helpers import data, environment  # noqa: F401  (module fixtures)


def clusters(classes: int, per_class: int, dim: int, spread: float, seed: int = 0):
    """Gaussian clusters around random class centres at distance ~sqrt(2 dim) apart, noise `spread`."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, dim))
    labels = np.repeat(np.arange(classes), per_class)
    return centres[labels] + spread * rng.normal(size=(len(labels), dim)), labels


# More shots than features (the primal solve; with 50 points the default l2 = 2^10 would shrink the weights
# to a centroid dot product, which 5 classes in 4 dimensions defeat, so a light l2) and fewer (the dual).
@pytest.mark.parametrize("dim, l2", [(4, 1e-2), (64, L2_REG)])
def test_separable_features_are_probed_at_about_100_percent(dim, l2):
    features, labels = clusters(5, 200, dim, spread=0.02)
    result = fewshot_accuracy(features, labels, shots=10, seeds=3, l2=l2)
    assert result["fewshot_accuracy"] >= 0.99
    assert result["fewshot_shots"] == 10 and result["fewshot_seeds"] == 3 and result["fewshot_n"] == 1000 - 50


def test_random_labels_are_probed_at_chance():
    features, _ = clusters(5, 400, 32, spread=1.0)
    labels = np.random.default_rng(7).integers(0, 5, len(features))
    result = fewshot_accuracy(features, labels, shots=10, seeds=5)
    assert abs(result["fewshot_accuracy"] - 0.2) < 0.05
    assert result["fewshot_std"] > 0  # the draws differ


@pytest.mark.parametrize("shots", [3, 40])  # the dual solve (fewer points than features) and the primal
def test_the_probe_is_big_visions_ridge_regression(shots):
    """The same predictions as ridge regression solved another way: least squares on X stacked over
    sqrt(l2) I, with X the whitened features and the constant 100 appended, targets 2 onehot - 1."""
    rng = np.random.default_rng(3)
    fit, test = rng.normal(size=(3 * shots, 12)) * 3 + 1, rng.normal(size=(200, 12)) * 3 + 1
    fit_labels, test_labels = np.arange(3 * shots) % 3, rng.integers(0, 3, 200)
    fit[:, 0] += 2 * fit_labels  # some signal, so predictions are not constant
    test[:, 0] += 2 * test_labels
    l2 = 50.0
    mean, std = fit.mean(axis=0), fit.std(axis=0) + 1e-5

    def design(x):
        return np.concatenate([(x - mean) / std, np.full((len(x), 1), 100.0)], axis=1)

    stacked = np.concatenate([design(fit), np.sqrt(l2) * np.eye(13)])
    targets = np.concatenate([2.0 * np.eye(3)[fit_labels] - 1.0, np.zeros((13, 3))])
    weights = np.linalg.lstsq(stacked, targets, rcond=None)[0]
    np.testing.assert_allclose(ridge_probe_scores(fit, fit_labels, test, 3, l2=l2), design(test) @ weights,
                               rtol=1e-6, atol=1e-8)
    expected = np.mean(np.argmax(design(test) @ weights, axis=1) == test_labels)
    assert ridge_probe_accuracy(fit, fit_labels, test, test_labels, 3, l2=l2) == pytest.approx(expected)


def test_bad_requests_say_what_to_change():
    features, labels = clusters(3, 5, 4, spread=0.1)
    with pytest.raises(ValueError, match="more than 5 images of every class"):
        fewshot_accuracy(features, labels, shots=5)
    with pytest.raises(ValueError, match="--fewshot must be a positive"):
        fewshot_accuracy(features, labels, shots=0)
    with pytest.raises(ValueError, match="--fewshot-seeds"):
        fewshot_accuracy(features, labels, shots=2, seeds=0)
    with pytest.raises(ValueError, match="two classes"):
        fewshot_accuracy(features, np.zeros_like(labels), shots=2)


@pytest.mark.parametrize("backend", ["numpy", "jax"])
@pytest.mark.parametrize("pool", ["cls", "gap"])
def test_pre_logits_are_what_the_head_reads(backend, pool):
    cfg = ViTConfig(image_size=8, patch_size=4, dim=16, depth=1, heads=2, mlp_dim=16, num_classes=3, pool=pool)
    params = init_params(cfg, seed=0)
    rng = np.random.default_rng(0)
    params["head"]["w"] = rng.normal(size=params["head"]["w"].shape).astype(np.float32)  # not the zero init
    images = rng.integers(0, 256, (5, 8, 8, 3), dtype=np.uint8)
    mean, std = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)
    features = pre_logits(params, images, cfg, mean, std, backend, batch_size=2)  # (5, 16), in 3 batches
    assert features.shape == (5, 16)
    logits = np.asarray(get_backend(backend).apply(params, normalize(images, mean, std), cfg))
    np.testing.assert_allclose(features @ params["head"]["w"] + params["head"]["b"], logits, rtol=1e-4, atol=1e-4)
    # The final LayerNorm (scale 1, bias 0 at init) makes every feature vector zero-mean.
    np.testing.assert_allclose(features.mean(axis=1), 0.0, atol=1e-5)


def test_evaluate_fewshot_json(data, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(tiny_args(data, out, steps=8, **{"--backend": "numpy"})) == 0
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(out), "--split", "train", "--fewshot", "4", "--fewshot-seeds",
                 "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["n"] == 72 and result["fewshot_shots"] == 4 and result["fewshot_seeds"] == 2
    assert result["fewshot_n"] == 72 - 3 * 4
    assert 0.0 <= result["fewshot_accuracy"] <= 1.0 and result["fewshot_std"] >= 0.0
    assert main(["evaluate", "--checkpoint", str(out), "--split", "train", "--json"]) == 0
    assert "fewshot_accuracy" not in json.loads(capsys.readouterr().out)
    assert main(["evaluate", "--checkpoint", str(out), "--split", "test", "--fewshot", "6"]) == 1  # 6 per class
    assert "needs more than 6 images of every class" in capsys.readouterr().err
    assert main(["evaluate", "--checkpoint", str(out), "--split", "train", "--fewshot", "3"]) == 0
    assert "3-shot linear probe accuracy" in capsys.readouterr().out
