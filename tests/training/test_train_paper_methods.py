"""The paper methods from the command line: every new `train` / `evaluate` flag lands in the config, the
presets for them, --image-size's upsampling (training and evaluation alike), FLOPs and the device in
summary.json, and the regulariser / learned alpha and gamma in the train records."""

import json
import math

import numpy as np
import pytest

from reluattn.cli import build_parser, main, train_config_from_args
from reluattn.config import ViTConfig
from reluattn.training.config import TrainConfig, train_config_from_dict
from reluattn.training.evaluation import with_attention_impl
from reluattn.training.presets import PRESETS, get_preset
from reluattn.training.run_data import channel_statistics, upsample_images
from reluattn.training.run_dir import read_metrics
from train_helpers import tiny_args
from train_helpers import data, environment  # noqa: F401  (module fixtures)


def config_from(*flags, preset="cpu-small"):
    return train_config_from_args(build_parser().parse_args(["train", *flags]), get_preset(preset))


@pytest.mark.parametrize("flags, field, value", [
    (["--attention-reg-weight", "0.05"], "reg_weight", 0.05),
    (["--entropy-margin", "0.5"], "entropy_margin", 0.5),
    (["--learn-alpha"], "learn_alpha", True),
    (["--learn-scale"], "learn_scale", True),
    (["--gated", "--gate-activation", "identity"], "gate_activation", "identity"),
    (["--impl", "blocked"], "impl", "blocked"),
    (["--block-size", "64"], "block_size", 64),
])
def test_attention_flags_reach_the_attention_config(flags, field, value):
    attention = config_from(*flags).model.attention
    assert getattr(attention, field) == value
    assert getattr(get_preset("cpu-small").model.attention, field) != value  # the flag changed it


def test_no_learn_alpha_turns_a_presets_learning_off():
    assert config_from("--no-learn-scale", preset="reluformer").model.attention.learn_scale is False
    assert config_from(preset="reluformer").model.attention.learn_scale is True


def test_image_size_is_stored_in_the_train_config_and_survives_json():
    config = config_from("--image-size", "64", "--patch-size", "2")
    assert config.image_size == 64 and get_preset("cpu-small").image_size is None
    assert TrainConfig.from_json(config.to_json()) == config
    older = {key: value for key, value in config.to_dict().items() if key != "image_size"}
    assert train_config_from_dict(older).image_size is None  # a checkpoint from before the field
    with pytest.raises(ValueError, match="TrainConfig.image_size"):
        config.replace(image_size=0)


def test_bad_values_are_refused_with_the_field_named(capsys):
    assert main(["train", "--attention-reg-weight", "-1", "--steps", "1"]) == 2
    assert "--attention-reg-weight must be >= 0.0" in capsys.readouterr().err
    assert main(["train", "--gate-activation", "tanh"]) == 2
    assert "--gate-activation" in capsys.readouterr().err


def test_evaluate_takes_impl_block_size_and_fewshot():
    args = build_parser().parse_args(["evaluate", "--checkpoint", "run", "--impl", "blocked", "--block-size", "32",
                                      "--fewshot", "10", "--json"])
    assert (args.impl, args.block_size, args.fewshot, args.fewshot_seeds) == ("blocked", 32, 10, 5)
    changed = with_attention_impl(get_preset("cpu-small"), "blocked", 32)
    assert (changed.model.attention.impl, changed.model.attention.block_size) == ("blocked", 32)
    assert with_attention_impl(get_preset("cpu-small")) == get_preset("cpu-small")


# ------------------------------------------------------------------------------------------- presets

def test_the_method_presets_are_what_they_say():
    small, qknorm = PRESETS["cpu-small"], PRESETS["cpu-small-qknorm"]
    assert qknorm.model.attention.qk_norm and not small.model.attention.qk_norm
    assert qknorm.replace(preset="cpu-small", model=small.model) == small  # nothing else differs
    reluformer = PRESETS["reluformer"].model.attention
    assert (reluformer.kind, reluformer.alpha, reluformer.scale) == ("relu", 0.5, pytest.approx(math.sqrt(2)))
    assert reluformer.learn_scale and not reluformer.learn_alpha
    assert (reluformer.reg_weight, reluformer.entropy_margin) == (0.01, 0.7)
    for name, side, tokens, impl in (("long-257", 32, 257, "dense"), ("long-1025", 64, 1025, "blocked")):
        preset = PRESETS[name]
        resolved = preset.resolve(45000, preset.image_size or 32, 3, 10)
        assert resolved.model.image_size == side and resolved.model.num_tokens == tokens, name
        assert resolved.model.attention.impl == impl, name


# -------------------------------------------------------------------------------------------- upsampling

def test_nearest_neighbour_upsampling_repeats_pixels_and_keeps_the_statistics():
    images = np.random.default_rng(0).integers(0, 256, (3, 4, 4, 3), dtype=np.uint8)
    big = upsample_images(images, 8)
    assert big.shape == (3, 8, 8, 3) and big.dtype == np.uint8
    np.testing.assert_array_equal(big[:, ::2, ::2], images)
    np.testing.assert_array_equal(big[:, 1::2, 1::2], images)
    assert channel_statistics(big) == channel_statistics(images)
    assert upsample_images(images, None) is images and upsample_images(images, 4) is images
    with pytest.raises(ValueError, match="whole multiple of the stored image side 4"):
        upsample_images(images, 6)


def test_image_size_upsamples_for_training_and_for_evaluation(data, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(tiny_args(data, out, steps=4, **{"--backend": "numpy", "--image-size": 16})) == 0
    saved = json.loads(next(out.glob("checkpoints/*/config.json")).read_text())
    assert saved["image_size"] == 16 and saved["model"]["image_size"] == 16
    assert saved["data"]["image_size"] == 16 and saved["data"]["stored_image_size"] == 8
    assert saved["model"]["patch_size"] == 4  # 16 patches + the class token
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(out), "--json"]) == 0  # reads 8x8 images, scores them at 16x16
    assert json.loads(capsys.readouterr().out)["n"] == 18
    # --resume reads the image size from the run (and its data description matches the upsampled images).
    assert main(["train", "--out", str(out), "--resume", "--data", str(data), "--no-progress"]) == 0
    assert "already complete" in capsys.readouterr().out


# ------------------------------------------------------------------------------ summary and train metrics

def test_summary_holds_flops_and_the_device(data, tmp_path):
    out = tmp_path / "run"
    assert main(tiny_args(data, out, steps=4, **{"--backend": "numpy", "--gated": True})) == 0
    summary = json.loads((out / "summary.json").read_text())
    model = ViTConfig(image_size=8, patch_size=4, num_classes=3, dim=16, depth=1, heads=2, mlp_dim=16)
    gated = model.replace(attention=model.attention.replace(gated=True))
    assert summary["flops_per_image"] == gated.flops_per_image() > model.flops_per_image()
    assert summary["train_flops"] == gated.flops_per_image() * 8 * 4  # batch 8, 4 steps
    assert summary["device"] == "the host CPU"


def test_gate_flops_count_its_projection_only():
    plain = ViTConfig()
    gated = plain.replace(attention=plain.attention.replace(gated=True))
    tokens, dim = plain.num_tokens, plain.dim
    assert gated.flops_per_image() - plain.flops_per_image() == 3 * plain.depth * 2 * tokens * dim * dim
    identity = gated.replace(attention=gated.attention.replace(gate_activation="identity"))
    assert identity.flops_per_image() == gated.flops_per_image()  # matmul FLOPs: the activation is not one


def test_train_records_carry_what_else_the_step_reports(data, tmp_path, monkeypatch):
    """A backend whose step also reports the regulariser R gets it into every train record."""
    from reluattn import numpy_backend
    original = numpy_backend.train_step

    def step_with_regulariser(*args, **kwargs):
        params, opt_state, metrics = original(*args, **kwargs)
        return params, opt_state, dict(metrics, attention_regulariser=0.25)

    monkeypatch.setattr(numpy_backend, "train_step", step_with_regulariser)
    out = tmp_path / "run"
    assert main(tiny_args(data, out, steps=4, **{"--backend": "numpy"})) == 0
    train = [r for r in read_metrics(out) if r["split"] == "train"]
    assert train and all(r["attention_regulariser"] == 0.25 for r in train)


@pytest.mark.parametrize("flag", ["--learn-alpha", "--learn-scale"])
def test_learned_alpha_and_gamma_are_logged_per_step_and_per_validation(data, tmp_path, flag):
    """Needs the model side of the learned length factor (parameters attn.length.alpha / log_scale)."""
    out = tmp_path / "run"
    assert main(tiny_args(data, out, steps=4, **{"--backend": "numpy", flag: True, "--lr": 0.05})) == 0
    records = read_metrics(out)
    train = [r for r in records if r["split"] == "train"]
    val = [r for r in records if r["split"] == "val"]
    assert all(len(r["alpha"]) == 1 and len(r["alpha"][0]) == 2 for r in train)  # one block, two heads
    assert all(len(r["gamma"][0]) == 2 for r in train)
    assert all("alpha" in r["attention"] and "gamma" in r["attention"] for r in val)
    learned = "alpha" if flag == "--learn-alpha" else "gamma"
    assert train[-1][learned] != train[0][learned]  # it moves with training


# ------------------------------------------------------------------------------------------- token dropping

def test_token_keep_is_stored_validated_and_survives_json():
    config = config_from("--token-keep", "0.25", "1")
    assert config.token_keep == (0.25, 1.0) and get_preset("cpu-small").token_keep == (1.0,)
    assert TrainConfig.from_json(config.to_json()) == config
    older = {key: value for key, value in config.to_dict().items() if key != "token_keep"}
    assert train_config_from_dict(older).token_keep == (1.0,)  # a checkpoint from before the field
    for bad in ((), (0.0,), (1.5,), 0.5):
        with pytest.raises(ValueError, match="TrainConfig.token_keep"):
            config.replace(token_keep=bad)
    with pytest.raises(ValueError, match="needs backend 'jax'"):
        config.replace(backend="numpy", compute_dtype="float32")


def test_tokens_kept_is_drawn_per_step_from_the_seed_alone():
    config = config_from("--token-keep", "0.25", "0.5", "1", "--patch-size", "4")  # 64 patches
    draws = [config.tokens_kept(step) for step in range(300)]
    assert set(draws) == {16, 32, None} and draws == [config.tokens_kept(step) for step in range(300)]
    assert draws != [config.replace(seed=1).tokens_kept(step) for step in range(300)]
    assert {config_from("--patch-size", "4").tokens_kept(step) for step in range(50)} == {None}


def test_training_with_dropped_tokens_runs_one_step_per_length(data, tmp_path, monkeypatch):
    from reluattn.jax_backend import sharding
    made, original = [], sharding.make_sharded_train_step
    monkeypatch.setattr(sharding, "make_sharded_train_step",
                        lambda *a, **k: made.append(k["keep_tokens"]) or original(*a, **k))
    args = tiny_args(data, tmp_path / "run", steps=8, **{"--patch-size": 2}) + ["--token-keep", "0.25", "1"]
    assert main(args) == 0  # 8x8 images, patch 2: 16 patches, 4 kept or all
    assert sorted(made, key=str) == [4, None]
    saved = json.loads(next((tmp_path / "run").glob("checkpoints/*/config.json")).read_text())
    assert saved["token_keep"] == [0.25, 1.0]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    model = ViTConfig.from_dict(saved["model"])
    kept = [train_config_from_dict(saved).tokens_kept(step) or 16 for step in range(8)]  # None: all 16
    assert 4 in kept and 16 in kept  # both lengths drawn, so the sum below tells them apart
    assert summary["train_flops"] == sum(model.flops_per_image(patches=k) for k in kept) * 8  # batch 8
    assert summary["flops_per_image"] == model.flops_per_image()  # an image at inference: all its tokens


def test_train_flops_count_only_the_tokens_each_step_keeps():
    """Dropped tokens skip the blocks, not the patch embedding: a step at K tokens costs the blocks at K (+ the
    class token) and the embedding at all N patches."""
    config = config_from("--token-keep", "0.5", "--patch-size", "4", "--batch-size", "8", "--steps", "10",
                         "--pool", "gap")
    model = config.model
    assert model.flops_per_image(patches=model.num_patches) == model.flops_per_image()
    half = model.flops_per_image(patches=32)
    assert model.flops_per_image() * 0.4 < half < model.flops_per_image() * 0.6
    embedding_and_head = 3 * (2 * model.num_patches * model.patch_dim * model.dim + 2 * model.dim * model.num_classes)
    assert model.flops_per_image(patches=0) == embedding_and_head  # mean pooling: no block token left
    assert config.train_flops(10) == half * 8 * 10
    mixed = config.replace(token_keep=(0.25, 1.0))
    draws = [mixed.tokens_kept(step) for step in range(10)]
    assert mixed.train_flops(10) == sum(model.flops_per_image(patches=16 if k else 64) for k in draws) * 8
    assert config.replace(token_keep=(1.0,)).train_flops(10) == model.train_flops(8, 10)
