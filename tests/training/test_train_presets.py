"""TrainConfig and the presets: validation, JSON round trip, resolution against a dataset, and how the
command line's flags land in it."""

import json
import re
from pathlib import Path

import pytest

from reluattn.cli import build_parser, train_config_from_args
from reluattn.training.config import TrainConfig, config_differences, train_config_from_dict
from reluattn.training.presets import PRESETS, get_preset

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_round_trip_and_resolve_for_cifar(name):
    preset = PRESETS[name]
    assert preset.preset == name
    assert TrainConfig.from_json(preset.to_json()) == preset
    resolved = preset.resolve(45000, 32, 3, 100)
    assert resolved.model.num_classes == 100
    assert resolved.optimizer.total_steps == preset.epochs * (45000 // preset.batch_size)
    assert 0 < resolved.optimizer.warmup_steps < resolved.optimizer.total_steps
    assert json.loads(json.dumps(resolved.to_dict())) == resolved.to_dict()


def test_preset_sizes_match_their_descriptions():
    tiny = PRESETS["gpu-tiny"].model
    assert (tiny.dim, tiny.depth, tiny.heads, tiny.mlp_dim, tiny.patch_size) == (192, 12, 3, 768, 4)
    small = PRESETS["cpu-small"]
    assert small.model.attention.kind == "relu" and small.model.attention.alpha == 1.0
    assert small.compute_dtype == "bfloat16" and small.label_smoothing == 0.1
    long = PRESETS["gpu-long"].augmentation
    assert long.mixup_alpha > 0 and long.cutmix_alpha > 0


def test_every_preset_is_described_in_the_help(capsys):
    from reluattn.cli import main
    from reluattn.training.presets import PRESET_SUMMARIES
    assert set(PRESET_SUMMARIES) == set(PRESETS)
    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"{name}: {PRESET_SUMMARIES[name]}" in out for name in PRESETS)


def test_presets_turn_the_speed_paths_on_and_no_fast_turns_them_off():
    assert all(preset.fast for preset in PRESETS.values())
    assert TrainConfig(epochs=1).fast is False  # a bare TrainConfig is the plain model
    assert train_config_from_args(parse(), get_preset("cpu-small")).fast is True
    assert train_config_from_args(parse("--no-fast"), get_preset("cpu-small")).fast is False
    assert TrainConfig.from_json(TrainConfig(epochs=1, fast=True).to_json()).fast is True
    # A checkpoint from before the field existed was trained on the speed paths, and says so when read back.
    older = {key: value for key, value in TrainConfig(epochs=1, fast=True).to_dict().items() if key != "fast"}
    assert train_config_from_dict(older).fast is True
    assert train_config_from_dict(TrainConfig(epochs=1).to_dict()).fast is False


def test_make_train_uses_cpu_fast():
    assert re.search(r"-m reluattn train --preset cpu-fast", (ROOT / "Makefile").read_text())
    fast = PRESETS["cpu-fast"]
    assert fast.test_split == 5000 and fast.val_split == 5000 and fast.model.pool == "gap"
    assert fast.model.attention.kind == "relu" and fast.compute_dtype == "auto"
    assert fast.token_keep == (0.5,)  # each training step keeps half of the 64 patch tokens


@pytest.mark.parametrize("change, field", [
    ({"epochs": None}, "exactly one of epochs and steps"),
    ({"steps": 10}, "exactly one of epochs and steps"),
    ({"batch_size": 0}, "batch_size"),
    ({"compute_dtype": "float16"}, "compute_dtype"),
    ({"backend": "torch"}, "backend"),
    ({"label_smoothing": 1.0}, "label_smoothing"),
    ({"dataset": "imagenet"}, "dataset"),
    ({"backend": "numpy"}, "needs backend 'jax'"),  # cpu-small is bfloat16
    ({"fast": 1}, "TrainConfig.fast"),
])
def test_invalid_train_configs_name_the_field(change, field):
    with pytest.raises(ValueError, match=re.escape(field)):
        PRESETS["cpu-small"].replace(**change)


def test_resolve_refuses_what_cannot_work():
    small = PRESETS["cpu-small"]
    with pytest.raises(ValueError, match="fewer than one batch"):
        small.resolve(100, 32, 3, 10)
    with pytest.raises(ValueError, match="not divisible by the patch size"):
        small.resolve(45000, 30, 3, 10)
    with pytest.raises(ValueError, match="warm-up"):
        small.replace(steps=5, epochs=None).resolve(45000, 32, 3, 10)


def parse(*argv):
    return build_parser().parse_args(["train", *argv])


def test_flags_override_the_preset_and_nothing_else():
    base = get_preset("cpu-small")
    config = train_config_from_args(parse("--attention", "softmax", "--qk-norm", "--dim", "64", "--steps", "50",
                                          "--lr", "0.01", "--warmup-steps", "5", "--mixup", "0.2",
                                          "--no-flip", "--clip-norm", "0"), base)
    assert config.model.attention.kind == "softmax" and config.model.attention.qk_norm
    assert config.model.dim == 64 and config.model.depth == base.model.depth
    assert (config.steps, config.epochs) == (50, None)
    assert config.optimizer.learning_rate == 0.01 and config.optimizer.clip_norm is None
    assert config.optimizer.warmup_steps == 5 and config.warmup_epochs is None
    assert config.augmentation.mixup_alpha == 0.2 and not config.augmentation.flip
    assert config.resolve(1000, 32, 3, 10).optimizer.total_steps == 50
    assert train_config_from_args(parse(), base) == base  # no flags: the preset itself
    numpy = train_config_from_args(parse("--backend", "numpy"), base)  # cpu-small is bfloat16: JAX only
    assert (numpy.backend, numpy.compute_dtype) == ("numpy", "float32")
    with pytest.raises(ValueError, match="needs backend 'jax'"):
        train_config_from_args(parse("--backend", "numpy", "--compute-dtype", "bfloat16"), base)


def test_config_differences_and_saved_configs():
    saved = PRESETS["cpu-small"].resolve(45000, 32, 3, 10)
    changed = saved.replace(eval_every=7, model=saved.model.replace(depth=3))
    assert config_differences(saved.to_dict(), changed.to_dict()) == ["model.depth: saved 6, now 3"]
    on_disk = dict(saved.to_dict(), data={"class_names": ["a", "b"]})  # a checkpoint's config.json
    assert train_config_from_dict(json.loads(json.dumps(on_disk))) == saved
