"""The flags of `reluattn train` that set a config field, made from the fields themselves, and the config a
command line gives.

A field made with `reluattn.config.flag(default, help, ...)` in `TrainConfig` or a config inside it (`ViTConfig`,
`AttentionConfig`, `OptimizerConfig`, `AugmentationConfig`) is a flag: its name is --<field-name-with-dashes>
unless the field says another, its help, metavar and choices are the field's, its type the field's (a bool
field is a --x / --no-x pair, a tuple field takes one or more values), and its --help group the field's, else that of the config holding it. Every
flag defaults to None, "keep the preset's (or, with --resume, the saved run's) value"; the value checks are
the configs' own (`__post_init__`).

    FLAGS                                  the flags, in field order
    add_flags(groups, flags)               add_argument for each, into groups[flag.group]
    train_config_from_args(args, base)     base with the given flags applied (the few rules that couple
                                           flags are in _implied)

The command's other options (--preset, --out, --resume, --data, ...) are not config fields; cli.py adds them.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import NamedTuple

from .config import TrainConfig

GROUPS = {"run": "run", "model": "model", "optimizer": "optimizer and regularisation", "data": "data"}  # --help
TYPES = {"int": int, "float": float, "str": None}  # a field's type (its annotation before any "| None")


class Flag(NamedTuple):
    name: str                  # "--attention"
    path: tuple                # where its value goes in a TrainConfig: ("model", "attention", "kind")
    owner: str                 # the config class holding the field: "AttentionConfig"
    field: dataclasses.Field   # its metadata holds help, metavar, choices (config.flag)
    group: str                 # a key of GROUPS

    @property
    def dest(self) -> str:
        """The attribute argparse stores the value in: "--attention-scale" -> "attention_scale"."""
        return self.name[2:].replace("-", "_")


def config_flags(config=TrainConfig, path: tuple = (), group: str | None = None) -> list[Flag]:
    """The flags of `config`'s fields and of the configs inside it, in field order."""
    flags = []
    for field in dataclasses.fields(config):
        field_group = field.metadata.get("group") or group
        if dataclasses.is_dataclass(field.default_factory):  # a config inside this one
            flags += config_flags(field.default_factory, path + (field.name,), field_group)
        elif "help" in field.metadata:
            name = field.metadata["flag"] or "--" + field.name.replace("_", "-")
            flags.append(Flag(name, path + (field.name,), config.__name__, field, field_group))
    return flags


FLAGS = config_flags()


def add_flags(groups: dict, flags=FLAGS) -> None:
    """add_argument for each of `flags` into groups[flag.group] (an argparse parser or argument group)."""
    for flag in flags:
        metadata, kind = flag.field.metadata, flag.field.type.split("|")[0].strip()  # "int | None" -> "int"
        options = {name: metadata[name] for name in ("metavar", "choices") if metadata[name] is not None}
        if kind == "bool":
            options.update(action=argparse.BooleanOptionalAction, default=None)
        elif kind.startswith("tuple["):  # "tuple[float, ...]": one or more values
            options.update(type=TYPES[kind[len("tuple["):].split(",")[0]], nargs="+")
        elif TYPES[kind] is not None:
            options["type"] = TYPES[kind]
        groups[flag.group].add_argument(flag.name, help=metadata["help"], **options)


def train_config_from_args(args, base: TrainConfig) -> TrainConfig:
    """`base` (a preset or the saved run's config) with every flag the user gave applied on top. Flags that
    cannot go together raise a ValueError naming them; a bad value, the config's own ValueError."""
    given = {flag.path: getattr(args, flag.dest) for flag in FLAGS if getattr(args, flag.dest) is not None}
    return _replaced(base, {**given, **_implied(given, base)})


def _implied(given: dict, base: TrainConfig) -> dict:
    """What some flags set besides their own field ({path: value}), after the pairs that exclude each other."""
    for first, second in ((("optimizer", "warmup_steps"), ("warmup_epochs",)), (("epochs",), ("steps",))):
        if first in given and second in given:
            raise ValueError(f"give --{first[-1].replace('_', '-')} or --{second[-1].replace('_', '-')}, not both")
    implied = {}
    if ("epochs",) in given:
        implied[("steps",)] = None
    if ("steps",) in given:
        implied[("epochs",)] = None
    if ("optimizer", "warmup_steps") in given:
        # total_steps is provisional here (resolve() sets it); keep the config valid meanwhile.
        implied[("optimizer", "total_steps")] = max(base.optimizer.total_steps,
                                                    given[("optimizer", "warmup_steps")] + 1)
        implied[("warmup_epochs",)] = None
    clip_norm = given.get(("optimizer", "clip_norm"))
    if clip_norm is not None:
        if not clip_norm >= 0:  # also catches nan
            raise ValueError(f"--clip-norm must be a positive norm, or 0 to turn clipping off; got {clip_norm}")
        implied[("optimizer", "clip_norm")] = clip_norm if clip_norm > 0 else None
    if ("model", "patch_size") in given:  # resolve() sets the image size from the data; until then, one that fits
        side, patch = given.get(("image_size",)) or base.model.image_size, given[("model", "patch_size")]
        implied[("model", "image_size")] = max(-(-side // patch), 1) * patch
    if given.get(("backend",)) == "numpy" and ("compute_dtype",) not in given:
        implied[("compute_dtype",)] = "float32"  # the NumPy backend computes in the parameters' dtype; no bfloat16
    return implied


def _replaced(config, changes: dict):
    """`config` with changes {path: value} made, each config inside it replaced (and so checked) once."""
    own, inner = {}, {}
    for path, value in changes.items():
        if len(path) == 1:
            own[path[0]] = value
        else:
            inner.setdefault(path[0], {})[path[1:]] = value
    own.update({name: _replaced(getattr(config, name), part) for name, part in inner.items()})
    return config.replace(**own) if own else config
