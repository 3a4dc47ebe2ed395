"""What attention looks like at initialisation: the numbers docs/initialisation.md and notebook 04 quote.

With q, k and v each a (D, D) Xavier-uniform block (big_vision's separate projections), q and k entries have
unit variance after the block's LayerNorm, so the scores q.k / sqrt(Dh) have standard deviation ~1 and a
relu / L row sums to ~E[relu(z)] = 1/sqrt(2 pi) ~ 0.40. One Xavier over the fused (D, 3D) weight halves the
variance of q and k: scores ~0.5, row sums ~0.20 (these tests fail under it).

Run as a script to print the measured numbers:

    PYTHONPATH=. python tests/test_initialisation.py
"""

from __future__ import annotations

import math

import numpy as np

import reluattn as ra

SEEDS = range(4)  # initialisations averaged over: one head's draw varies, the mean over heads does not


def cifar_like_images(count: int, seed: int = 0) -> np.ndarray:
    """Random (count, 32, 32, 3) images with what the model sees of CIFAR-10: per-channel standardised
    pixels that are correlated within and across patches (a coarse 8 x 8 field plus pixel noise)."""
    rng = np.random.default_rng(seed)
    coarse = rng.normal(size=(count, 8, 8, 3))  # (B, 8, 8, C)
    images = np.repeat(np.repeat(coarse, 4, axis=1), 4, axis=2) + 0.5 * rng.normal(size=(count, 32, 32, 3))
    images = (images - images.mean(axis=(0, 1, 2))) / images.std(axis=(0, 1, 2))  # (B, S, S, C)
    return images.astype(np.float32)


def attention_at_initialisation(params_for_seed, cfg: ra.ViTConfig, images: np.ndarray) -> dict:
    """Per block (averaged over SEEDS, images, heads and queries): the scores' root mean square and the mean
    row sum of relu / L. The scores are read as the weights of kind identity with alpha 0 (w = s exactly)."""
    scores_config = cfg.replace(attention=ra.AttentionConfig(kind="identity", alpha=0.0))
    relu_config = cfg.replace(attention=ra.AttentionConfig(kind="relu", alpha=1.0))
    numpy_backend = ra.backend("numpy")
    score_rms, row_sums = [], []
    for seed in SEEDS:
        params = params_for_seed(cfg, seed)
        _, scores = numpy_backend.apply(params, images, scores_config, return_attention=True)
        _, weights = numpy_backend.apply(params, images, relu_config, return_attention=True)
        score_rms.append([math.sqrt(float(np.mean(np.square(block)))) for block in scores])
        row_sums.append([float(block.sum(axis=-1).mean()) for block in weights])
    return {"score_std": np.mean(score_rms, axis=0), "relu_row_sum": np.mean(row_sums, axis=0)}


def measured() -> dict:
    """The reference config (192 wide, 6 blocks of 3 heads, Dh = 64, patch 4: 65 tokens) on 8 images."""
    return attention_at_initialisation(lambda cfg, seed: ra.init_params(cfg, seed=seed), ra.ViTConfig(),
                                       cifar_like_images(8))


def test_scores_have_unit_std_and_relu_rows_sum_to_one_over_sqrt_two_pi():
    found = measured()
    # Expected 1 and 1/sqrt(2 pi) = 0.399; the fused (D, 3D) Xavier gave 0.50 and 0.20.
    assert 0.85 < found["score_std"].mean() < 1.15, found
    assert 0.33 < found["relu_row_sum"].mean() < 0.47, found
    assert np.all(found["score_std"] > 0.7) and np.all(found["relu_row_sum"] > 0.25), found  # every block


def test_q_k_v_are_separate_xavier_blocks():
    cfg = ra.ViTConfig(dim=64, heads=2, depth=1, mlp_dim=64)
    qkv = ra.init_params(cfg, seed=0)["blocks"][0]["attn"]["qkv"]["w"]  # (D, 3D)
    limit = math.sqrt(6.0 / (64 + 64))  # fan_in = fan_out = D for each of q, k, v
    for block in np.split(qkv, 3, axis=1):  # (D, D) each
        assert 0.9 * limit < np.abs(block).max() <= limit
        assert abs(block.var() - limit**2 / 3) < 0.1 * limit**2 / 3  # a uniform's variance, 1 / D
    assert not np.allclose(qkv[:, :64], qkv[:, 64:128])  # drawn independently


if __name__ == "__main__":
    found = measured()
    print("reference config, 8 CIFAR-like images, init seeds 0-3; per block 1..6, then the mean")
    for name, values in found.items():
        print(f"{name:13s}", " ".join(f"{value:.3f}" for value in values), f"| mean {values.mean():.3f}")
    print(f"expected: score_std 1, relu_row_sum 1/sqrt(2 pi) = {1 / math.sqrt(2 * math.pi):.3f}")
