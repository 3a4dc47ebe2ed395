"""The attention statistics of every validation record (reluattn/training/attention_statistics.py): each
statistic on hand-made weights whose value is known in closed form, the chunked measurement, the learned
alpha / gamma, and what a training run writes into metrics.jsonl."""

import json
import math

import numpy as np
import pytest

from reluattn.cli import main
from reluattn.config import AttentionConfig, ViTConfig
from reluattn.numpy_backend.regulariser import ROW_SUM_FLOOR, attention_regulariser_forward
from reluattn.training.attention_statistics import (attention_statistics, chunk_size,
                                                    learned_length_factors, measure_attention, statistics_images)
from reluattn.training.run_dir import read_metrics, resolve_checkpoint
from train_helpers import tiny_args
from train_helpers import data, environment  # noqa: F401  (module fixtures)

REQUIRED = {"row_sum_mean", "row_sum_std", "entropy_ratio", "zero_fraction", "top_share"}


def rows(*values) -> np.ndarray:
    """One block's weights (B=1, H=1, T, L) from T rows."""
    return np.asarray(values, dtype=np.float64)[None, None]


def test_uniform_rows_have_entropy_ratio_one_and_no_zeros():
    length = 8
    stats = attention_statistics([[np.full((2, 3, 5, length), 1.0 / length)]], entropy_margin=0.7)
    assert stats["row_sum_mean"] == [pytest.approx(1.0)] and stats["row_sum_std"] == [pytest.approx(0.0)]
    assert stats["entropy_ratio"] == [pytest.approx(1.0)]
    assert stats["zero_fraction"] == [0.0]
    assert stats["top_share"] == [pytest.approx(1.0 / length)]  # max(1, round(0.002 * 8)) = one entry
    # |log 1| + max(0, log 8 - 0.7 log 8)
    assert stats["regulariser"] == [pytest.approx(0.3 * math.log(length))]


def test_a_hand_computed_row_and_a_one_hot_row():
    stats = attention_statistics([[rows([0.5, 0.25, 0.25, 0.0], [0.0, 2.0, 0.0, 0.0])]], entropy_margin=0.5)
    entropy = -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))
    assert stats["row_sum_mean"] == [pytest.approx(1.5)] and stats["row_sum_std"] == [pytest.approx(0.5)]
    assert stats["entropy_ratio"] == [pytest.approx((entropy / math.log(4) + 0.0) / 2)]
    assert stats["zero_fraction"] == [pytest.approx(4 / 8)]
    assert stats["top_share"] == [pytest.approx((0.5 + 1.0) / 2)]
    regulariser = (0.0 + max(0.0, entropy - 0.5 * math.log(4))) + (math.log(2.0) + 0.0)
    assert stats["regulariser"] == [pytest.approx(regulariser / 2)]


def test_the_regulariser_statistic_is_the_models_regulariser():
    # One formula: the statistic of non-negative weights is the R the model trains with (numpy_backend).
    weights = np.maximum(np.random.default_rng(0).normal(size=(2, 3, 5, 5)), 0.0) / 5  # (B, H, T, L), relu / L
    weights[0, 0, 1] = 0.0  # an all-zero row
    cfg = AttentionConfig(kind="relu", entropy_margin=0.4)
    stats = attention_statistics([[weights]], entropy_margin=0.4)
    expected = attention_regulariser_forward(weights.astype(np.float32).astype(np.float64), cfg)[0]  # read as float32
    assert stats["regulariser"] == [pytest.approx(expected, rel=1e-12)]


def test_all_zero_rows_count_as_zeros_but_have_no_distribution():
    stats = attention_statistics([[rows([0.0, 0.0, 0.0], [0.0, 1.0, 1.0])]])
    assert stats["zero_fraction"] == [pytest.approx(4 / 6)]
    assert stats["entropy_ratio"] == [pytest.approx(math.log(2) / math.log(3))]  # the live row only
    assert stats["top_share"] == [pytest.approx(0.5)]
    assert stats["row_sum_mean"] == [pytest.approx(1.0)]  # (0 + 2) / 2
    assert np.isfinite(stats["regulariser"][0]) and stats["regulariser"][0] == pytest.approx(
        (abs(math.log(ROW_SUM_FLOOR)) + abs(math.log(2.0))) / 2)
    only_zeros = attention_statistics([[np.zeros((1, 1, 2, 3))]])
    assert only_zeros["entropy_ratio"] == [None] and only_zeros["top_share"] == [None]  # valid JSON, not NaN
    json.dumps(only_zeros, allow_nan=False)


def test_negative_weights_use_their_magnitude_and_the_sum_keeps_the_sign():
    stats = attention_statistics([[rows([-1.0, 1.0])]])
    assert stats["row_sum_mean"] == [0.0]
    assert stats["entropy_ratio"] == [pytest.approx(1.0)]


def test_top_share_takes_the_top_two_tenths_of_a_percent():
    length = 1000  # 0.2 % is 2 entries
    row = np.ones(length)
    row[:2] = 100.0
    stats = attention_statistics([[rows(row)]])
    assert stats["top_share"] == [pytest.approx(200.0 / (200.0 + 998.0))]


def test_blocks_are_kept_apart_and_chunks_are_pooled():
    rng = np.random.default_rng(0)
    block_a = np.maximum(rng.normal(size=(6, 2, 5, 5)), 0.0)
    block_b = np.abs(rng.normal(size=(6, 2, 5, 5)))
    whole = attention_statistics([[block_a, block_b]])
    pooled = attention_statistics([[block_a[:2], block_b[:2]], [block_a[2:], block_b[2:]]])
    for name in REQUIRED | {"regulariser"}:
        assert pooled[name] == pytest.approx(whole[name]), name
    assert whole["zero_fraction"][0] > 0.3 and whole["zero_fraction"][1] == 0.0
    with pytest.raises(ValueError, match="blocks"):
        attention_statistics([[block_a, block_b], [block_a]])
    with pytest.raises(ValueError, match="at least one chunk"):
        attention_statistics([])


def test_learned_alpha_and_gamma_come_from_the_length_parameters():
    length = {"alpha": np.array([1.0, 0.5], np.float32), "log_scale": np.array([0.0, math.log(2.0)], np.float32)}
    params = {"blocks": [{"attn": {"length": length}}, {"attn": {"length": length}}]}
    factors = learned_length_factors(params)
    assert factors["alpha"] == [[1.0, 0.5], [1.0, 0.5]]
    assert factors["gamma"] == [[pytest.approx(1.0), pytest.approx(0.5)]] * 2  # gamma = exp(-beta)
    assert learned_length_factors({"blocks": [{"attn": {"qkv": {}}}]}) == {}
    only_scale = {"blocks": [{"attn": {"length": {"log_scale": np.zeros(2, np.float32)}}}]}
    assert learned_length_factors(only_scale) == {"gamma": [[1.0, 1.0]]}
    stats = attention_statistics([[np.ones((1, 2, 2, 2)), np.ones((1, 2, 2, 2))]], params=params)
    assert stats["alpha"] == factors["alpha"]


def test_measure_attention_reads_equal_chunks_of_the_fixed_batch(monkeypatch):
    cfg = ViTConfig(image_size=8, patch_size=4, dim=8, depth=2, heads=2, mlp_dim=8,
                    attention=AttentionConfig(entropy_margin=0.5))
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (10, 8, 8, 3), dtype=np.uint8)
    table = {bytes(image): np.abs(rng.normal(size=(cfg.depth, cfg.heads, 5, 5))) for image in images}
    seen = []

    def attention_weights(batch):  # a stand-in for an engine: fixed weights per image
        seen.append(len(batch))
        stacked = np.stack([table[bytes(image)] for image in batch])  # (b, depth, H, T, T)
        return [stacked[:, block] for block in range(cfg.depth)]

    expected = attention_statistics([attention_weights(images[:9])], entropy_margin=0.5)
    import reluattn.training.attention_statistics as module
    monkeypatch.setattr(module, "CHUNK_ELEMENTS", 3 * cfg.depth * cfg.heads * 25)  # 3 images per chunk
    seen.clear()
    assert chunk_size(cfg, 10) == 3
    measured = measure_attention(attention_weights, images, cfg)
    assert set(measured) == set(expected)
    for name in expected:
        assert measured[name] == pytest.approx(expected[name]), name
    assert seen == [3, 3, 3]  # equal chunks (one compilation); the tenth image is left out


def test_long_sequences_measure_fewer_images():
    long = ViTConfig(image_size=64, patch_size=2, dim=128, depth=6, heads=4, mlp_dim=256)
    assert long.num_tokens == 1025
    assert statistics_images(long, 5000) == 2 ** 28 // (6 * 4 * 1025 ** 2) == 10
    assert statistics_images(ViTConfig(), 5000) == 256 and statistics_images(ViTConfig(), 100) == 100


@pytest.mark.parametrize("backend", ["numpy", "jax"])
def test_every_validation_record_carries_the_statistics_of_its_checkpoint(data, tmp_path, capsys, backend):
    """The "attention" of the last val record is the statistics of the final parameters on the first
    validation images, recomputed here from the checkpoint with the other backend's weights."""
    from reluattn import backend as get_backend
    from reluattn.training.augment import normalize
    from reluattn.training.evaluation import load_trained
    from reluattn.training.run_data import load_split
    out = tmp_path / "run"
    assert main(tiny_args(data, out, steps=8, **{"--backend": backend})) == 0
    val = [r for r in read_metrics(out) if r["split"] == "val"]
    assert [r["step"] for r in val] == [4, 8]
    assert all(REQUIRED | {"regulariser"} <= set(r["attention"]) for r in val)
    assert all(len(r["attention"][name]) == 1 for r in val for name in REQUIRED)  # one block
    trained = load_trained(resolve_checkpoint(out))
    images, _, _ = load_split(trained["config"], trained["data"], None, "val", progress=False)
    other = get_backend("jax" if backend == "numpy" else "numpy")
    normalized = normalize(images, trained["data"]["mean"], trained["data"]["std"])
    _, weights = other.apply(trained["params"], normalized, trained["config"].model, return_attention=True)
    expected = attention_statistics([[np.asarray(w) for w in weights]])
    for name in REQUIRED:
        assert val[-1]["attention"][name] == pytest.approx(expected[name], abs=1e-4), name
    assert val[0]["attention"] != val[-1]["attention"]  # measured at each validation, not once


def test_plot_adds_a_row_of_attention_panels_when_runs_logged_them(tmp_path):
    from PIL import Image

    from reluattn.training.plots import plot_runs
    train = {"step": 2, "split": "train", "loss": 1.0, "accuracy": 0.5}
    stats = {"row_sum_mean": [0.4, 0.5], "entropy_ratio": [0.9, None], "zero_fraction": [0.5, 0.4],
             "top_share": [0.1, 0.2]}
    heights = {}
    for name, extra in (("plain", {}), ("measured", {"attention": stats})):
        run = tmp_path / name
        run.mkdir()
        val = {"step": 2, "split": "val", "loss": 1.0, "accuracy": 0.5, **extra}
        (run / "metrics.jsonl").write_text(json.dumps(train) + "\n" + json.dumps(val) + "\n")
        output = plot_runs([run], tmp_path / f"{name}.png")
        heights[name] = Image.open(output).size[1]
    assert heights["measured"] > 1.7 * heights["plain"]
