"""What a training run computes: `TrainConfig`, and the `AugmentationConfig` inside it.

A `TrainConfig` is everything that decides what a run computes: the model, the optimizer, the data
order, augmentation, precision and backend. Like the model configs it is frozen, validated on
construction and round-trips through JSON; a checkpoint stores it, and `--resume` refuses a command line
that would change it. The named starting points of `reluattn train --preset NAME` are in presets.py.

Some numbers depend on the dataset (its image size and class count, how many steps an epoch holds), so
a config is completed by `config.resolve(num_train, image_size, channels, num_classes)` once the data is
loaded: that sets the model's input/output sizes, `optimizer.total_steps` and the warm-up in steps.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field

import numpy as np

from .. import BACKENDS
from ..config import JsonConfig, OptimizerConfig, ViTConfig, check_bool, check_choice, check_float, check_int, flag
from ..data import DATASETS
from ..params import flatten

COMPUTE_DTYPES = ("float32", "bfloat16", "auto")  # auto: the faster of the two here (dtype_probe.py)
SEED_LIMIT = 2 ** 63
# Fields that change how a run reports, not what it computes: a resumed run may change them freely.
OPERATIONAL_FIELDS = ("eval_every", "checkpoint_every", "log_every", "keep_checkpoints")
# What a checkpoint written before a field existed implies for it: the JAX backend always took its speed paths.
IMPLIED_BY_OLDER_CHECKPOINTS = {"fast": True, "image_size": None}


@dataclass(frozen=True)
class AugmentationConfig(JsonConfig):
    """Training-time augmentation (augment.py): on device inside the jitted step with the JAX backend, on
    the host with --backend numpy (crop and flip only). Frozen, so it can be a static jit argument."""

    crop_padding: int = flag(4, "random crop: pad each side by this many pixels, crop back at a random offset; 0: off")
    flip: bool = flag(True, "random horizontal flips (with probability 1/2)")
    mixup_alpha: float = flag(0.0, "mixup with lambda ~ Beta(alpha, alpha); 0: off", name="--mixup")
    cutmix_alpha: float = flag(0.0, "cutmix with lambda ~ Beta(alpha, alpha); 0: off (both on: one per batch)",
                               name="--cutmix")

    def __post_init__(self):
        owner = "AugmentationConfig"
        check_int(owner, "crop_padding", self.crop_padding, minimum=0)
        check_bool(owner, "flip", self.flip)
        for name in ("mixup_alpha", "cutmix_alpha"):
            check_float(owner, name, getattr(self, name), minimum=0.0)
            object.__setattr__(self, name, float(getattr(self, name)))

    @property
    def mixes(self) -> bool:
        """Whether mixup or cutmix is on (labels then become (B, K) soft targets)."""
        return self.mixup_alpha > 0 or self.cutmix_alpha > 0


@dataclass(frozen=True)
class TrainConfig(JsonConfig):
    """One training run. Exactly one of `epochs` and `steps` sets its length."""

    # Each field's help is its `reluattn train` flag's (config.flag); group: where --help lists the flag.
    preset: str | None = None          # the preset it started from (a label; the fields below are the truth)
    model: ViTConfig = field(default_factory=ViTConfig, metadata={"group": "model"})
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig,  # total_steps is set by resolve()
                                       metadata={"group": "optimizer"})
    batch_size: int = flag(128, "images per step, over all devices", group="run")
    epochs: int | None = flag(None, "run length in passes over the training split (the last partial batch is "
                              "dropped)", group="run")
    steps: int | None = flag(None, "run length in optimizer steps (instead of --epochs)", group="run")
    warmup_epochs: float | None = flag(None, "linear warm-up in epochs, made optimizer steps once the data is known "
                                       "(instead of --warmup-steps)", group="optimizer")
    seed: int = flag(0, "initialisation, data order and augmentation seed", group="run")
    data_seed: int = flag(0, "seed of the validation hold-out and the subset (fixed across --seed)", group="data")
    dataset: str | None = flag(None, "dataset kind (default: detected from --data)", choices=DATASETS, group="data")
    val_split: int = flag(5000, "training images held out for validation (0: use 'test')", group="data")
    test_split: int = flag(0, "training images held out as a test split that no choice is made on, scored once at "
                           "the end (for data without a test split; 0: none)", group="data")
    subset: int | None = flag(None, "train on only this many images (quick runs)", group="data")
    eval_every: int | None = flag(None, "steps between validations (default: each epoch)", group="run")
    checkpoint_every: int | None = flag(None, "steps between checkpoints (default: each epoch)", group="run")
    log_every: int = flag(20, "steps between metric fetches from the device (checked) and log lines", group="run")
    keep_checkpoints: int = flag(3, "how many of the newest checkpoints to keep on disk", group="run")
    label_smoothing: float = flag(0.0, "target = (1 - ls) * onehot + ls / K", group="optimizer")
    augmentation: AugmentationConfig = field(default_factory=AugmentationConfig, metadata={"group": "optimizer"})
    compute_dtype: str = flag("float32", "matmul precision (JAX backend; parameters, optimizer state and loss stay "
                              "float32); auto: the faster of the two on this machine, from a short probe when the "
                              "run starts", choices=COMPUTE_DTYPES, group="run")
    backend: str = flag("jax", "jax (jit, data parallel) or numpy (the reference model; small runs)",
                        choices=BACKENDS, group="run")
    fast: bool = flag(False, "the JAX backend's opt-in speed paths (on in every preset; --no-fast: the plain model)",
                      group="run")
    image_size: int | None = flag(None, "upsample the images to N x N (nearest neighbour, on the host; a whole "
                                  "multiple of the stored size) before training; evaluation upsamples the same way",
                                  metavar="N", group="data")
    token_keep: tuple[float, ...] = flag((1.0,), "token dropping: each training step keeps this fraction of every "
                                         "image's patch tokens; several: one drawn per step, so the sequence "
                                         "length varies (default 1: all)", metavar="FRACTION", group="optimizer")

    def __post_init__(self):
        owner = "TrainConfig"
        for name, kind in (("model", ViTConfig), ("optimizer", OptimizerConfig),
                           ("augmentation", AugmentationConfig)):
            value = getattr(self, name)
            if isinstance(value, dict):  # from_dict / JSON hands us plain dicts
                object.__setattr__(self, name, kind.from_dict(value))
            elif not isinstance(value, kind):
                raise ValueError(f"{owner}.{name} must be a {kind.__name__}, got {type(value).__name__}")
        if self.preset is not None and not isinstance(self.preset, str):
            raise ValueError(f"{owner}.preset must be a name or None, got {self.preset!r}")
        check_int(owner, "batch_size", self.batch_size)
        if (self.epochs is None) == (self.steps is None):
            raise ValueError(f"{owner}: set exactly one of epochs and steps; got epochs={self.epochs!r}, "
                             f"steps={self.steps!r}")
        if self.epochs is not None:
            check_int(owner, "epochs", self.epochs)
        if self.steps is not None:
            check_int(owner, "steps", self.steps)
        if self.warmup_epochs is not None:
            check_float(owner, "warmup_epochs", self.warmup_epochs, minimum=0.0)
            object.__setattr__(self, "warmup_epochs", float(self.warmup_epochs))
        for name in ("seed", "data_seed"):
            check_int(owner, name, getattr(self, name), minimum=0)
            if getattr(self, name) >= SEED_LIMIT:  # JAX's random keys take signed 64-bit seeds
                raise ValueError(f"{owner}.{name} must be below 2**63 = {SEED_LIMIT}, got {getattr(self, name)}")
        if self.dataset is not None:
            check_choice(owner, "dataset", self.dataset, DATASETS)
        check_int(owner, "val_split", self.val_split, minimum=0)
        check_int(owner, "test_split", self.test_split, minimum=0)
        if self.test_split and not self.val_split:
            raise ValueError(f"{owner}.test_split needs a validation split (val_split > 0): the test images are "
                             f"carved from the training images, and nothing may be chosen on them")
        for name in ("subset", "eval_every", "checkpoint_every"):
            if getattr(self, name) is not None:
                check_int(owner, name, getattr(self, name))
        check_int(owner, "log_every", self.log_every)
        check_int(owner, "keep_checkpoints", self.keep_checkpoints)
        check_float(owner, "label_smoothing", self.label_smoothing, minimum=0.0)
        if self.label_smoothing >= 1:
            raise ValueError(f"{owner}.label_smoothing must be in [0, 1), got {self.label_smoothing}")
        object.__setattr__(self, "label_smoothing", float(self.label_smoothing))
        check_choice(owner, "compute_dtype", self.compute_dtype, COMPUTE_DTYPES)
        if isinstance(self.token_keep, (int, float)) or not self.token_keep:
            raise ValueError(f"{owner}.token_keep must be a non-empty list of fractions, got {self.token_keep!r}")
        for fraction in self.token_keep:
            check_float(owner, "token_keep", fraction, minimum=0.0)
            if not 0 < fraction <= 1:
                raise ValueError(f"{owner}.token_keep holds fractions in (0, 1], got {fraction}")
        object.__setattr__(self, "token_keep", tuple(float(f) for f in self.token_keep))
        check_choice(owner, "backend", self.backend, BACKENDS)
        check_bool(owner, "fast", self.fast)
        if self.image_size is not None:
            check_int(owner, "image_size", self.image_size)
        if self.backend == "numpy" and self.compute_dtype == "auto":
            object.__setattr__(self, "compute_dtype", "float32")  # the only one the NumPy backend has
        if self.backend == "numpy" and self.compute_dtype != "float32":
            raise ValueError(f"{owner}.compute_dtype {self.compute_dtype!r} needs backend 'jax' (the NumPy "
                             f"backend computes in the parameters' dtype, float32)")
        if self.backend == "numpy" and self.token_keep != (1.0,):
            raise ValueError(f"{owner}.token_keep needs backend 'jax' (token dropping runs inside its jitted step)")

    # ----------------------------------------------------------------------------- dataset-dependent sizes

    def steps_per_epoch(self, num_train: int) -> int:
        """Full batches in one pass over `num_train` training images."""
        return num_train // self.batch_size

    def tokens_kept(self, step: int) -> int | None:
        """K, the patch tokens each image keeps at training step `step` (None: all): one of token_keep, drawn
        from (seed, step) alone, so a resumed run draws what the uninterrupted one did."""
        fraction = self.token_keep[np.random.default_rng((self.seed, step)).integers(len(self.token_keep))]
        keep = max(1, round(fraction * self.model.num_patches))
        return None if keep == self.model.num_patches else keep

    def train_flops(self, steps: int) -> float:
        """Matmul FLOPs of the first `steps` training steps, forward + backward, each step at the patch tokens
        it kept (tokens_kept)."""
        if len(set(self.token_keep)) == 1:  # every step keeps the same number
            return self.model.flops_per_image(patches=self.tokens_kept(0)) * self.batch_size * steps
        per_image = sum(self.model.flops_per_image(patches=self.tokens_kept(step)) for step in range(steps))
        return per_image * self.batch_size

    def total_steps(self, num_train: int) -> int:
        return self.steps if self.steps is not None else self.epochs * self.steps_per_epoch(num_train)

    def resolve(self, num_train: int, image_size: int, channels: int, num_classes: int) -> "TrainConfig":
        """This config completed for a dataset: model input/output sizes, schedule length, warm-up steps."""
        if self.steps_per_epoch(num_train) < 1:
            raise ValueError(f"the training split has {num_train} images, fewer than one batch of "
                             f"{self.batch_size}; lower --batch-size or raise --subset")
        if image_size % self.model.patch_size:
            raise ValueError(f"the images are {image_size}x{image_size} pixels, not divisible by the patch "
                             f"size {self.model.patch_size}; choose another --patch-size")
        model = self.model.replace(image_size=image_size, channels=channels, num_classes=num_classes)
        total = self.total_steps(num_train)
        warmup = self.optimizer.warmup_steps
        if self.warmup_epochs is not None:
            warmup = int(round(self.warmup_epochs * self.steps_per_epoch(num_train)))
        if warmup >= total:
            raise ValueError(f"the warm-up ({warmup} steps) must be shorter than the run ({total} steps); "
                             f"pass a smaller --warmup-steps (0 turns it off) or a longer --steps/--epochs")
        optimizer = self.optimizer.replace(total_steps=total, warmup_steps=warmup)
        return self.replace(model=model, optimizer=optimizer)


def training_memory_bytes(model: ViTConfig) -> int:
    """A lower bound on the memory training `model` takes: float32 parameters, gradients and AdamW's two
    moments (activations come on top)."""
    from ..params import param_shapes
    shapes = flatten(param_shapes(model), is_leaf=lambda leaf: isinstance(leaf, tuple))
    return 4 * 4 * sum(math.prod(shape) for shape in shapes.values())


def memory_available_bytes() -> int | None:
    """The memory a new allocation can get now without swapping (Linux's MemAvailable; else the free
    pages), or None where neither is knowable."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_fits_in_memory(model: ViTConfig) -> None:
    """A clear error, before anything is allocated, for a model this machine cannot hold now (a lower bound
    compared with the memory available, not the total: other programs hold the rest)."""
    needed = training_memory_bytes(model)
    available = memory_available_bytes()
    if available is None:  # not knowable here: let the allocation decide
        return
    if needed > available:
        gib = 2.0 ** 30
        raise ValueError(f"this model has {needed // 16:,} parameters; training it needs at least "
                         f"{needed / gib:,.1f} GiB (float32 parameters, gradients and two AdamW moments, "
                         f"activations not counted), more than the {available / gib:,.1f} GiB of memory available "
                         f"now; choose a smaller --dim, --depth or --mlp-dim")


def config_differences(saved: dict, new: dict, prefix: str = "", ignore=OPERATIONAL_FIELDS) -> list[str]:
    """["model.attention.kind: saved 'relu', now 'softmax'", ...] between two config dicts."""
    differences = []
    for key in sorted(set(saved) | set(new)):
        name = f"{prefix}{key}"
        if not prefix and key in ignore:
            continue
        before, after = saved.get(key, "<absent>"), new.get(key, "<absent>")
        if isinstance(before, dict) and isinstance(after, dict):
            differences += config_differences(before, after, f"{name}.", ignore)
        elif before != after:
            differences.append(f"{name}: saved {before!r}, now {after!r}")
    return differences


def train_config_from_dict(data: dict) -> TrainConfig:
    """A TrainConfig from a checkpoint's config.json (which also holds a "data" description)."""
    if not isinstance(data, dict):
        raise ValueError(f"a training config must be a JSON object, got {type(data).__name__}")
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    data = {**IMPLIED_BY_OLDER_CHECKPOINTS, **data}
    return TrainConfig.from_dict({key: value for key, value in data.items() if key in known})


__all__ = ["AugmentationConfig", "TrainConfig", "COMPUTE_DTYPES", "OPERATIONAL_FIELDS", "check_fits_in_memory",
           "config_differences", "memory_available_bytes", "train_config_from_dict", "training_memory_bytes"]
