"""A few-shot linear probe of a trained model, the way big_vision scores few-shot transfer
(`reluattn evaluate --checkpoint RUN --fewshot K`): closed-form ridge regression on the pre-logits.

    features = pre_logits(params, images, cfg, mean, std)        # (N, D): final LayerNorm, pooled, no head
    result = fewshot_accuracy(features, labels, shots=10, seeds=5)  # {"fewshot_accuracy", "fewshot_std", ...}

For each seed, K images of every class of the split are drawn (np.random.default_rng(seed)) to fit the
probe, and all the split's other images are scored. The probe is big_vision's least-squares one
(google-research/big_vision, evaluators/fewshot_lsr.py; its common config uses l2 = 2^10): features
whitened with the K-shot set's per-feature mean and standard deviation (+1e-5), a constant feature of 100
appended for the bias (nearly unregularised), targets 2 * onehot - 1, weights (X^T X + l2 I)^-1 X^T Y
(solved in the dual, X^T (X X^T + l2 I)^-1 Y, when there are fewer shots than features), prediction the
argmax. Our default is 5 draws (big_vision's config: 3).

Unlike big_vision, which probes other datasets than the one it pre-trained on, the probe here reads the
run's own split (by default its held-out validation images, never trained on): it measures how linearly
separable the model's features are from K examples of each of the classes it was trained on, not
transfer to new classes.
"""

from __future__ import annotations

import numpy as np

L2_REG = 2.0 ** 10        # ridge strength, big_vision's common few-shot config
BIAS_FEATURE = 100.0      # the appended constant feature: large, so the bias is barely regularised
WHITENING_EPSILON = 1e-5  # added to the per-feature standard deviation
FEWSHOT_KEYS = ("fewshot_accuracy", "fewshot_std", "fewshot_shots", "fewshot_seeds", "fewshot_n")


def feature_head(params, cfg):
    """(params, cfg) whose "logits" are the pre-logits: the head replaced by the identity (D x D, bias 0).
    The backends' own apply then returns the final-LayerNorm'ed pooled features, in either backend."""
    dtype = np.asarray(params["head"]["b"]).dtype
    head = {"w": np.eye(cfg.dim, dtype=dtype), "b": np.zeros(cfg.dim, dtype=dtype)}
    return dict(params, head=head), cfg.replace(num_classes=cfg.dim)


def pre_logits(params, images: np.ndarray, cfg, mean, std, backend: str = "jax", batch_size: int = 500):
    """(N, D) float64 pre-logits of uint8 images (N, S, S, C), in batches, with the named backend (float32,
    the plain model)."""
    from .. import backend as get_backend
    from .augment import normalize
    chosen = get_backend(backend)
    feature_params, feature_cfg = feature_head(params, cfg)
    features = [np.asarray(chosen.apply(feature_params, normalize(images[start:start + batch_size], mean, std),
                                        feature_cfg), dtype=np.float64)  # (b, D)
                for start in range(0, len(images), batch_size)]
    return np.concatenate(features)  # (N, D)


def ridge_probe_scores(fit_features, fit_labels, test_features, num_classes: int, l2: float = L2_REG):
    """(m, K) class scores of test_features (m, D) under the ridge probe fitted on (fit_features (n, D),
    fit_labels (n,)); the prediction is their argmax."""
    mean = fit_features.mean(axis=0, keepdims=True)  # (1, D)
    std = fit_features.std(axis=0, keepdims=True) + WHITENING_EPSILON  # (1, D)

    def design(features):
        whitened = (features - mean) / std  # (n, D)
        return np.concatenate([whitened, np.full((len(features), 1), BIAS_FEATURE)], axis=1)  # (n, D + 1)

    x = design(np.asarray(fit_features, np.float64))  # (n, D + 1)
    y = 2.0 * np.eye(num_classes)[np.asarray(fit_labels)] - 1.0  # (n, K), targets in {-1, 1}
    count, width = x.shape
    if count >= width:
        weights = np.linalg.solve(x.T @ x + l2 * np.eye(width), x.T @ y)  # (D + 1, K)
    else:  # fewer shots than features: the same solution through the n x n system
        weights = x.T @ np.linalg.solve(x @ x.T + l2 * np.eye(count), y)  # (D + 1, K)
    return design(np.asarray(test_features, np.float64)) @ weights  # (m, K)


def ridge_probe_accuracy(fit_features, fit_labels, test_features, test_labels, num_classes: int,
                         l2: float = L2_REG) -> float:
    """Accuracy on (test_features, test_labels) of the ridge probe fitted on (fit_features, fit_labels)."""
    scores = ridge_probe_scores(fit_features, fit_labels, test_features, num_classes, l2)  # (m, K)
    return float(np.mean(np.argmax(scores, axis=1) == np.asarray(test_labels)))


def check_fewshot_arguments(shots, seeds) -> None:
    """A clear error for a bad --fewshot / --fewshot-seeds, before any image is read."""
    if isinstance(shots, bool) or not isinstance(shots, int) or shots < 1:
        raise ValueError(f"--fewshot must be a positive whole number of images per class, got {shots!r}")
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise ValueError(f"--fewshot-seeds must be a positive whole number, got {seeds!r}")


def fewshot_accuracy(features, labels, shots: int = 10, seeds: int = 5, l2: float = L2_REG,
                     class_names=None) -> dict:
    """{"fewshot_accuracy" (mean over seeds), "fewshot_std" (over seeds), "fewshot_shots", "fewshot_seeds",
    "fewshot_n" (images scored per draw)} of the K-shot probe on (features (N, D), labels (N,));
    `class_names` (by label) name a class that has too few images."""
    check_fewshot_arguments(shots, seeds)
    labels = np.asarray(labels, dtype=np.int64)
    classes = np.unique(labels)
    if len(classes) < 2:
        raise ValueError("a few-shot probe needs images of at least two classes in the split")
    counts = {int(c): int(np.sum(labels == c)) for c in classes}
    short = [c for c, n in counts.items() if n <= shots]
    if short:
        name = f"{class_names[short[0]]!r} ({short[0]})" if class_names is not None else str(short[0])
        raise ValueError(f"--fewshot {shots} needs more than {shots} images of every class in the split; class "
                         f"{name} has {counts[short[0]]}; lower --fewshot or choose a larger --split")
    # Classes renumbered 0..K-1 among those present, so the targets have no empty columns.
    dense = np.searchsorted(classes, labels)  # (N,)
    accuracies = []
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        fit = np.concatenate([rng.permutation(np.flatnonzero(dense == c))[:shots] for c in range(len(classes))])
        held = np.ones(len(labels), dtype=bool)
        held[fit] = False
        accuracies.append(ridge_probe_accuracy(features[fit], dense[fit], features[held], dense[held],
                                               len(classes), l2))
    return {"fewshot_accuracy": float(np.mean(accuracies)), "fewshot_std": float(np.std(accuracies)),
            "fewshot_shots": shots, "fewshot_seeds": seeds, "fewshot_n": int(len(labels) - shots * len(classes))}


__all__ = ["fewshot_accuracy", "check_fewshot_arguments", "ridge_probe_accuracy", "ridge_probe_scores", "pre_logits", "feature_head", "FEWSHOT_KEYS", "L2_REG"]
