"""`reluattn train`'s flags are made from the config fields (reluattn/training/flags.py): every flag a user,
a doc or `reluattn sweep` may pass is still there, and each one sets the field it is made from."""

import argparse

import pytest

from reluattn.cli import build_parser, train_config_from_args
from reluattn.training.flags import FLAGS
from reluattn.training.presets import get_preset

# The flags as they were when they were last written out by hand: renaming or losing one breaks scripts,
# docs and recorded sweep commands.
TRAIN_FLAGS = """--allow-different-data --alpha --attention --attention-reg-weight --attention-scale --backend --batch-size
--block-size --checkpoint-every --clip-norm --compute-dtype --crop-padding --cutmix --data --data-seed --dataset --depth
--dim --entropy-margin --epochs --eval-every --fast --flip --gate-activation --gated --heads --image-size --impl
--keep-checkpoints --label-smoothing --learn-alpha --learn-scale --log-every --lr --mixup --mlp-activation --mlp-dim
--no-fast --no-flip --no-gated --no-learn-alpha --no-learn-scale --no-progress --no-qk-norm --out --patch-size --pool
--preset --qk-norm --resume --seed --steps --subset --test-split --token-keep --val-split --warmup-epochs --warmup-steps
--weight-decay""".split()


def train_parser() -> argparse.ArgumentParser:
    commands = next(action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction))
    return commands.choices["train"]


def test_every_train_flag_is_still_there():
    flags = {flag for action in train_parser()._actions for flag in action.option_strings}
    assert flags - {"-h", "--help"} == set(TRAIN_FLAGS)


def test_each_flag_takes_its_fields_help_choices_and_kind():
    actions = {action.option_strings[0]: action for action in train_parser()._actions}
    for flag in FLAGS:
        action = actions[flag.name]
        assert action.help == flag.field.metadata["help"] and action.choices == flag.field.metadata["choices"]
        assert action.default is None  # None: keep the preset's value
        assert isinstance(action, argparse.BooleanOptionalAction) == (flag.field.type == "bool"), flag.name


def value_other_than(flag, current):
    """A command-line value for `flag` that its field does not hold now, and the value the field then holds."""
    choices = flag.field.metadata["choices"]
    if choices:
        value = next(choice for choice in choices if choice != current)
        return [flag.name, value], value
    if flag.field.type == "bool":
        return ([flag.name.replace("--", "--no-", 1)] if current else [flag.name]), not current
    if flag.field.type.startswith("tuple"):  # one or more values
        return [flag.name, "0.25", "0.5"], (0.25, 0.5)
    value = 2 * current if current else 2  # doubled widths keep dim a multiple of heads and the image of patches
    if flag.field.type.startswith("float"):
        value = float(value) if current else 0.5
    return [flag.name, str(value)], value


@pytest.mark.parametrize("flag", FLAGS, ids=lambda flag: flag.name)
def test_each_flag_sets_the_field_it_is_made_from(flag):
    base = get_preset("cpu-small")
    current = base
    for name in flag.path:
        current = getattr(current, name)
    argv, expected = value_other_than(flag, current)
    config = train_config_from_args(build_parser().parse_args(["train", *argv]), base)
    for name in flag.path:
        config = getattr(config, name)
    assert config == expected, f"{' '.join(argv)} set {'.'.join(flag.path)} to {config!r}, not {expected!r}"
