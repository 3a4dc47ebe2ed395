"""Configs: every invalid value raises a ValueError naming the field; JSON round-trips; hashable."""

import json

import pytest
from hypothesis import given, strategies as st

import reluattn as ra
from reluattn.config import ATTENTION_KINDS, MLP_ACTIVATIONS, REFERENCE_VIT, OptimizerConfig


@pytest.mark.parametrize("changes, field", [
    (dict(dim=100, heads=3), "dim"),
    (dict(image_size=30, patch_size=4), "image_size"),
    (dict(pool="max"), "pool"),
    (dict(mlp_activation="swish"), "mlp_activation"),
    (dict(depth=0), "depth"),
    (dict(heads=-1), "heads"),
    (dict(num_classes=1), "num_classes"),
    (dict(channels=2.5), "channels"),
    (dict(patch_size=True), "patch_size"),
    (dict(attention="relu"), "attention"),
])
def test_invalid_vit_config_names_the_field(changes, field):
    with pytest.raises(ValueError, match=f"ViTConfig.{field}"):
        ra.ViTConfig(**changes)


@pytest.mark.parametrize("changes, field", [
    (dict(kind="tanh"), "kind"),
    (dict(alpha=-0.5), "alpha"),
    (dict(alpha=float("nan")), "alpha"),
    (dict(scale=0.0), "scale"),
    (dict(qk_norm="yes"), "qk_norm"),
    (dict(gated=1), "gated"),
    (dict(impl="flash"), "impl"),
    (dict(block_size=0), "block_size"),
    (dict(gate_activation="gelu"), "gate_activation"),
    (dict(reg_weight=-1.0), "reg_weight"),
    (dict(entropy_margin=float("inf")), "entropy_margin"),
    (dict(learn_alpha="no"), "learn_alpha"),
    (dict(learn_scale=0), "learn_scale"),
    (dict(kind="softmax", learn_alpha=True), "learn_alpha"),
    (dict(kind="sigmoid_bias", learn_scale=True), "learn_alpha / learn_scale"),
])
def test_invalid_attention_config_names_the_field(changes, field):
    with pytest.raises(ValueError, match=f"AttentionConfig.{field}"):
        ra.AttentionConfig(**changes)


@pytest.mark.parametrize("changes, field", [
    (dict(learning_rate=0), "learning_rate"),
    (dict(warmup_steps=10, total_steps=10), "warmup_steps"),
    (dict(b2=1.0), "b2"),
    (dict(clip_norm=-1.0), "clip_norm"),
    (dict(weight_decay=-0.1), "weight_decay"),
])
def test_invalid_optimizer_config_names_the_field(changes, field):
    with pytest.raises(ValueError, match=f"OptimizerConfig.{field}"):
        OptimizerConfig(**changes)


def test_unknown_field_in_from_dict_is_named():
    data = ra.ViTConfig().to_dict()
    data["widht"] = 3
    with pytest.raises(ValueError, match="widht"):
        ra.ViTConfig.from_dict(data)


def test_bad_json_is_a_value_error():
    with pytest.raises(ValueError, match="not valid JSON"):
        ra.ViTConfig.from_json("{dim: 3")


configs = st.builds(
    lambda heads, head_dim, patch, grid, kind, alpha, qk, gated, pool, act: ra.ViTConfig(
        image_size=patch * grid, patch_size=patch, dim=heads * head_dim, heads=heads, depth=2, mlp_dim=16,
        pool=pool, mlp_activation=act,
        attention=ra.AttentionConfig(kind=kind, alpha=alpha, qk_norm=qk, gated=gated)),
    st.integers(1, 4), st.integers(1, 8), st.integers(1, 4), st.integers(1, 4),
    st.sampled_from(ATTENTION_KINDS), st.floats(0, 2), st.booleans(), st.booleans(),
    st.sampled_from(["cls", "gap"]), st.sampled_from(MLP_ACTIVATIONS))


@given(configs)
def test_json_round_trip_and_hash(cfg):
    text = json.dumps(cfg.to_dict())
    again = ra.ViTConfig.from_dict(json.loads(text))
    assert again == cfg
    assert hash(again) == hash(cfg)
    assert isinstance(again.attention, ra.AttentionConfig)
    assert ra.ViTConfig.from_json(cfg.to_json()) == cfg


def test_int_and_float_alpha_are_the_same_config():
    assert ra.AttentionConfig(alpha=1) == ra.AttentionConfig(alpha=1.0)
    assert hash(ra.AttentionConfig(alpha=1)) == hash(ra.AttentionConfig(alpha=1.0))


def test_configs_are_frozen():
    cfg = ra.ViTConfig()
    with pytest.raises(Exception):
        cfg.dim = 3


def test_reference_config_flops():
    # The reference model: 0.753 GFLOP per image for forward+backward (matmuls only here).
    cfg = ra.ViTConfig()
    assert cfg == REFERENCE_VIT  # the defaults are the reference model
    assert cfg.num_tokens == 65 and cfg.head_dim == 64
    assert abs(cfg.flops_per_image() / 1e9 - 0.753) < 0.002


def test_train_flops_counts_every_image_of_every_step():
    cfg = ra.ViTConfig()
    assert cfg.train_flops(batch_size=128, steps=10) == 1280 * cfg.flops_per_image()
    assert cfg.train_flops(batch_size=1, steps=0) == 0
