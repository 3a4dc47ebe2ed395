"""The parameter tree: shapes as docs/api/params.md lists them, deterministic init, tree helpers, check_params."""

import json

import numpy as np
import pytest

import reluattn as ra
from reluattn.params import (check_params, count_params, decay_mask, flatten, param_shapes, tree_map,
                             unflatten)


def shapes_of(tree):
    return {path: leaf.shape for path, leaf in flatten(tree).items()}


def test_tree_matches_spec_for_reference_config():
    cfg = ra.ViTConfig()
    params = ra.init_params(cfg, seed=0)
    shapes = shapes_of(params)
    d, t = 192, 65
    assert shapes["patch_embed/w"] == (48, d) and shapes["patch_embed/b"] == (d,)
    assert shapes["cls_token"] == (d,) and shapes["pos_embed"] == (t, d)
    assert len(params["blocks"]) == 6
    assert shapes["blocks/0/attn/qkv/w"] == (d, 3 * d)
    assert shapes["blocks/5/mlp/fc2/w"] == (384, d)
    assert shapes["head/w"] == (d, 10) and shapes["ln_f/scale"] == (d,)
    assert "blocks/0/attn/q_norm/scale" not in shapes and "blocks/0/attn/gate/w" not in shapes
    assert all(leaf.dtype == np.float32 for leaf in flatten(params).values())


def test_optional_leaves_appear_with_their_options():
    cfg = ra.ViTConfig(pool="gap", mlp_activation="softmax_ln", dim=12, heads=3,
                       attention=ra.AttentionConfig(qk_norm=True, gated=True))
    shapes = shapes_of(ra.init_params(cfg))
    assert "cls_token" not in shapes and shapes["pos_embed"] == (64, 12)
    assert shapes["blocks/0/attn/q_norm/scale"] == (4,) and shapes["blocks/0/attn/k_norm/scale"] == (4,)
    assert shapes["blocks/0/attn/gate/w"] == (12, 12) and shapes["blocks/0/mlp/ln/bias"] == (12,)


def test_init_is_deterministic_by_seed_and_follows_the_documented_scheme():
    cfg = ra.ViTConfig(dim=64, heads=2, depth=2, mlp_dim=128)
    a, b, c = ra.init_params(cfg, seed=1), ra.init_params(cfg, seed=1), ra.init_params(cfg, seed=2)
    for path, leaf in flatten(a).items():
        np.testing.assert_array_equal(leaf, flatten(b)[path])
    assert not np.array_equal(a["blocks"][0]["attn"]["qkv"]["w"], c["blocks"][0]["attn"]["qkv"]["w"])
    assert np.all(a["cls_token"] == 0) and np.all(a["blocks"][1]["ln2"]["scale"] == 1)
    assert np.all(a["blocks"][0]["mlp"]["fc1"]["b"] == 0)
    limit = np.sqrt(6 / (64 + 128))  # Xavier uniform for fc1 (64, 128); qkv's blocks: tests/test_initialisation.py
    fc1 = a["blocks"][0]["mlp"]["fc1"]["w"]
    assert np.abs(fc1).max() <= limit and np.abs(fc1).max() > 0.9 * limit
    assert abs(a["pos_embed"].std() - 0.02) < 0.005


def test_flatten_unflatten_round_trip():
    cfg = ra.ViTConfig(dim=8, heads=2, depth=3, mlp_dim=8, attention=ra.AttentionConfig(qk_norm=True))
    params = ra.init_params(cfg)
    again = unflatten(flatten(params))
    assert json.dumps(tree_map(np.shape, again)) == json.dumps(tree_map(np.shape, params))
    assert isinstance(again["blocks"], list) and len(again["blocks"]) == 3
    assert count_params(params) == sum(np.prod(s) for s in flatten(
        param_shapes(cfg), is_leaf=lambda x: isinstance(x, tuple)).values())


def test_decay_mask_only_dense_weights():
    cfg = ra.ViTConfig(dim=8, heads=2, depth=1, mlp_dim=8, attention=ra.AttentionConfig(gated=True))
    mask = flatten(decay_mask(ra.init_params(cfg)))
    assert mask["head/w"] and mask["blocks/0/attn/gate/w"] and mask["patch_embed/w"]
    assert not mask["pos_embed"] and not mask["cls_token"] and not mask["head/b"]
    assert not mask["blocks/0/ln1/scale"] and not mask["ln_f/bias"]


def test_check_params_says_what_is_wrong():
    cfg = ra.ViTConfig(dim=8, heads=2, depth=1, mlp_dim=8)
    params = ra.init_params(cfg)
    check_params(params, cfg)
    params["head"]["w"] = np.zeros((8, 11))
    with pytest.raises(ValueError, match=r"head/w has shape \(8, 11\), expected \(8, 10\)"):
        check_params(params, cfg)
    del params["ln_f"]
    with pytest.raises(ValueError, match="missing ln_f/bias"):
        check_params(params, cfg)
    with pytest.raises(ValueError, match="missing blocks/0/attn/q_norm"):
        check_params(ra.init_params(cfg), cfg.replace(attention=ra.AttentionConfig(qk_norm=True)))
    with pytest.raises(ValueError, match="unexpected leaf cls_token"):
        check_params(ra.init_params(cfg), cfg.replace(pool="gap"))
