"""Model configuration: frozen, hashable, validated dataclasses that round-trip through JSON.

Both backends read the same `ViTConfig`; because it is frozen (hashable) the JAX backend can pass it to
`jax.jit` as a static argument. Every field is checked on construction and a bad value raises a
`ValueError` that names the field, says what was expected and what came.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field

# The point-wise attention kinds of Wortsman et al. (2023), the softmax baseline, and sigmoid(s - log L)
# (from Ramapuram et al. 2024, neither of the two papers reluattn follows).
ATTENTION_KINDS = (
    "softmax",       # softmax over keys (alpha and scale are ignored)
    "relu",          # max(s, 0)
    "relu2",         # max(s, 0)^2  (squared relu)
    "gelu",          # tanh-approximated GELU
    "softplus",      # log(1 + e^s)
    "sigmoid",       # 1 / (1 + e^-s)
    "relu6",         # min(max(s, 0), 6)
    "identity",      # s itself: linear attention, no nonlinearity
    "sigmoid_bias",  # sigmoid(s - log L) (Ramapuram et al. 2024); alpha is ignored. Rows sum to ~e^(1/2)
                     # for large L, where sigmoid with alpha 1 sums to 1/2 (docs/derivations.md)
)
# Adding an attention kind: the tables that must change, and nothing else.
#   1. ATTENTION_KINDS above (config validation, the CLI's --attention choices, every test that draws kinds).
#   2. numpy_backend/attention_weights.py POINTWISE: h and h' (or, for a kind that needs L inside h, like
#      sigmoid_bias, pointwise / pointwise_derivative / length_factor there).
#   3. jax_backend/attention_weights.py POINTWISE: h (autodiff gives h'); the same special cases.
#   4. jax_backend/fast/pallas_attention.py KINDS, if the GPU kernel should support it.
#   5. numpy_backend/attention_weights.py KINKS, if h has kinks (a test finds unlisted ones); and the tuples
#      below (KINDS_WITHOUT_LENGTH_FACTOR, KINDS_WITH_SIGNED_WEIGHTS) if it belongs there. The tests derive
#      their lists of kinds from these, so a new kind is tested everywhere without editing a test.
# Causal, blocked and the fast kernels read h and the length factor from 2-3, so they need no change.
# FFN activations; softmax and softmax_ln are the key-value-memory study of Shen et al. (2023).
MLP_ACTIVATIONS = ("gelu", "relu", "softmax", "softmax_ln")
POOLS = ("cls", "gap")
ATTENTION_IMPLS = ("dense", "blocked")
# The gate's activation: "silu" as in the gated attention unit (Hua et al. 2022), "identity" as Wortsman et
# al. (2023) describe it ("an extra projection" of the block input, multiplied in element-wise).
GATE_ACTIVATIONS = ("silu", "identity")
# Kinds whose weights do not use alpha and scale, so a learned alpha or scale would have nothing to act on.
KINDS_WITHOUT_LENGTH_FACTOR = ("softmax", "sigmoid_bias")
# A bias at or below this hides its key in the jax.nn-style drop-in (dot_product_attention, attention_fn) and its
# NumPy reference, exactly as a False mask entry does: the key neither weighs nor counts in L. It covers -inf,
# Hugging Face Flax's finfo(dtype).min, PyTorch's -1e9 and BERT's -10000; softmax gives such keys weight 0 anyway.
HIDING_BIAS = -1e4
# Kinds whose weights can be negative, where the attention regulariser's log row sum and entropy are undefined.
KINDS_WITH_SIGNED_WEIGHTS = ("gelu", "identity")


FLOAT32_MAX = 3.4028234663852886e38


# The checks every config field runs (here and in training/config.py): a ValueError naming owner.name.
def check_int(owner: str, name: str, value, minimum: int = 1) -> None:
    """An int (not a bool) >= minimum."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{owner}.{name} must be an int, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{owner}.{name} must be >= {minimum}, got {value}")


def check_choice(owner: str, name: str, value, choices) -> None:
    """One of `choices`."""
    if value not in choices:
        raise ValueError(f"{owner}.{name} must be one of {', '.join(choices)}; got {value!r}")


def check_bool(owner: str, name: str, value) -> None:
    """True or False."""
    if not isinstance(value, bool):
        raise ValueError(f"{owner}.{name} must be True or False, got {value!r}")


def check_float(owner: str, name: str, value, *, minimum: float | None = None, positive: bool = False):
    """A finite number (not a bool), >= minimum and > 0 when asked."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{owner}.{name} must be a finite number, got {value!r}")
    if abs(value) > FLOAT32_MAX:  # the models compute in float32 (or narrower): it would be infinite there
        raise ValueError(f"{owner}.{name} must be below {FLOAT32_MAX:.4g} (the largest float32), got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{owner}.{name} must be >= {minimum}, got {value}")
    if positive and value <= 0:
        raise ValueError(f"{owner}.{name} must be > 0, got {value}")


def flag(default, help: str, *, name: str | None = None, metavar: str | None = None, choices=None,
         group: str | None = None):
    """A config field that a `reluattn train` flag sets: `default` as for a plain field; in the field's
    metadata the flag's help, its name when it is not --<field-name-with-dashes>, metavar, choices and help
    group (default: the group of the config holding it). training/flags.py makes the flags from these."""
    return field(default=default, metadata={"help": help, "flag": name, "metavar": metavar, "choices": choices,
                                            "group": group})


def _as_json_types(value):
    if isinstance(value, dict):
        return {key: _as_json_types(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_json_types(item) for item in value]
    return value


class JsonConfig:
    """`to_dict` / `from_dict` / `to_json` / `from_json`, shared by the config classes."""

    def to_dict(self) -> dict:
        """The fields as JSON's types: nested configs as dicts, tuples as lists."""
        return _as_json_types(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, data: dict):
        if not isinstance(data, dict):
            raise ValueError(f"{cls.__name__}.from_dict expects a dict, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{cls.__name__}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"{cls.__name__}: config is not valid JSON ({error})") from None
        return cls.from_dict(data)

    def replace(self, **changes):
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class AttentionConfig(JsonConfig):
    """How attention weights are made from scores s = q.k / sqrt(Dh):  w = scale * L^-alpha * h(s)."""

    # Each field's help (its `reluattn train` flag's, see flag()) says what it does.
    kind: str = flag("relu", "attention weight function h; relu with alpha 1 is ReLU / L", name="--attention",
                     choices=ATTENTION_KINDS)
    alpha: float = flag(1.0, "weights are divided by L**alpha (L = number of keys)")
    scale: float = flag(1.0, "constant factor on point-wise attention weights (ReLUFormer's sqrt(2)/gamma, a "
                        "secondary reading)", name="--attention-scale")
    qk_norm: bool = flag(False, "LayerNorm q and k per head, over Dh, before the dot product (ViT-22B)")
    gated: bool = flag(False, "gate the attention output: times gate_activation(x W_g + b_g), before the projection")
    impl: str = flag("dense", "dense: hold the T x T weights; blocked: walk key blocks (long sequences, JAX)",
                     choices=ATTENTION_IMPLS)
    block_size: int | None = flag(None, "keys per block with --impl blocked (default: the backend's)")
    gate_activation: str = flag("silu", "the gate's activation with --gated: silu (gated attention unit, Hua et "
                                "al. 2022) or identity (Wortsman et al.'s 'extra projection')",
                                choices=GATE_ACTIVATIONS)
    reg_weight: float = flag(0.0, "loss += LAMBDA * R, ReLUFormer's row-sum + entropy regulariser (secondary "
                             "reading); 0: off", name="--attention-reg-weight", metavar="LAMBDA")
    entropy_margin: float = flag(0.7, "c of R's entropy term max(0, H - c log L)", metavar="C")
    learn_alpha: bool = flag(False, "learn the length exponent alpha per layer and head (attn.length.alpha, "
                             "starts at --alpha)")
    learn_scale: bool = flag(False, "learn a log-scale per layer and head (weights * exp(beta), beta = 0 at start)")

    def __post_init__(self):
        owner = "AttentionConfig"
        check_choice(owner, "kind", self.kind, ATTENTION_KINDS)
        check_float(owner, "alpha", self.alpha, minimum=0.0)
        check_float(owner, "scale", self.scale, positive=True)
        check_bool(owner, "qk_norm", self.qk_norm)
        check_bool(owner, "gated", self.gated)
        check_choice(owner, "impl", self.impl, ATTENTION_IMPLS)
        if self.block_size is not None:
            check_int(owner, "block_size", self.block_size)
        check_choice(owner, "gate_activation", self.gate_activation, GATE_ACTIVATIONS)
        check_float(owner, "reg_weight", self.reg_weight, minimum=0.0)
        check_float(owner, "entropy_margin", self.entropy_margin, minimum=0.0)
        check_bool(owner, "learn_alpha", self.learn_alpha)
        check_bool(owner, "learn_scale", self.learn_scale)
        if (self.learn_alpha or self.learn_scale) and self.kind in KINDS_WITHOUT_LENGTH_FACTOR:
            raise ValueError(f"AttentionConfig.learn_alpha / learn_scale need a kind that uses alpha and scale; "
                             f"{self.kind!r} ignores them")
        if self.reg_weight > 0 and self.kind in KINDS_WITH_SIGNED_WEIGHTS:
            raise ValueError(f"AttentionConfig.reg_weight > 0 needs non-negative weights (log row sums, entropies); "
                             f"kind {self.kind!r} can give negative ones")
        if self.reg_weight > 0 and self.impl != "dense":
            raise ValueError("AttentionConfig.reg_weight > 0 needs impl='dense': the blocked kernel never holds the "
                             "rows of weights whose sums and entropies the regulariser reads")
        # Store plain floats so that equal configs hash equally (1 and 1.0 alike) and JSON round-trips.
        object.__setattr__(self, "alpha", float(self.alpha))
        object.__setattr__(self, "scale", float(self.scale))
        object.__setattr__(self, "reg_weight", float(self.reg_weight))
        object.__setattr__(self, "entropy_margin", float(self.entropy_margin))

    @property
    def learned_length(self) -> bool:
        """True when the blocks hold learned length parameters (attn.length.alpha and .log_scale)."""
        return self.learn_alpha or self.learn_scale


@dataclass(frozen=True)
class ViTConfig(JsonConfig):
    """A Vision Transformer. The defaults are the reference model, `REFERENCE_VIT` (ViT 192 wide, 6 deep,
    3 heads, MLP 384, patch 4, class token, 32x32x3 images, 10 classes)."""

    image_size: int = 32          # images are image_size x image_size pixels (set from the data)
    patch_size: int = flag(4, "patch side P in pixels (square patches; the image side must be a multiple)")
    channels: int = 3             # colour channels of the input (set from the data)
    num_classes: int = 10         # K, outputs of the head (set from the data)
    dim: int = flag(192, "token width D")
    depth: int = flag(6, "number of transformer blocks")
    heads: int = flag(3, "attention heads H (dim must be a multiple; Dh = dim / heads)")
    mlp_dim: int = flag(384, "MLP hidden width M (the number of memory slots in Shen et al.)")
    pool: str = flag("cls", "cls: the head reads the class token; gap: the mean over tokens", choices=POOLS)
    mlp_activation: str = flag("gelu", "the MLP's activation (softmax, softmax_ln: Shen et al.'s key-value memory "
                               "study)", choices=MLP_ACTIVATIONS)
    attention: AttentionConfig = field(default_factory=AttentionConfig)

    def __post_init__(self):
        owner = "ViTConfig"
        for name in ("image_size", "patch_size", "channels", "num_classes", "dim", "depth", "heads", "mlp_dim"):
            check_int(owner, name, getattr(self, name))
        if self.num_classes < 2:
            raise ValueError(f"ViTConfig.num_classes must be >= 2, got {self.num_classes}")
        if self.image_size % self.patch_size:
            raise ValueError(
                f"ViTConfig.image_size ({self.image_size}) must be divisible by ViTConfig.patch_size "
                f"({self.patch_size})")
        if self.dim % self.heads:
            raise ValueError(f"ViTConfig.dim ({self.dim}) must be divisible by ViTConfig.heads ({self.heads})")
        check_choice(owner, "pool", self.pool, POOLS)
        check_choice(owner, "mlp_activation", self.mlp_activation, MLP_ACTIVATIONS)
        if isinstance(self.attention, dict):  # from_dict / JSON hands us a plain dict
            object.__setattr__(self, "attention", AttentionConfig.from_dict(self.attention))
        if not isinstance(self.attention, AttentionConfig):
            raise ValueError(f"ViTConfig.attention must be an AttentionConfig, got {type(self.attention).__name__}")

    @property
    def head_dim(self) -> int:
        """Dh, the width of one head."""
        return self.dim // self.heads

    @property
    def num_patches(self) -> int:
        """N, patches per image."""
        return (self.image_size // self.patch_size) ** 2

    @property
    def num_tokens(self) -> int:
        """T, tokens per image: the patches plus the class token when pool == "cls"."""
        return self.num_patches + (1 if self.pool == "cls" else 0)

    @property
    def patch_dim(self) -> int:
        """P*P*C, the length of one flattened patch."""
        return self.patch_size * self.patch_size * self.channels

    def flops_per_image(self, backward: bool = True, patches: int | None = None) -> float:
        """Matmul FLOPs for one image (2 per multiply-add); forward+backward counts 3x the forward.
        `patches`: the patch tokens the blocks see (token dropping; None: all N); the patch embedding sees all N."""
        t = self.num_tokens if patches is None else self.num_tokens - self.num_patches + patches  # T: K [+ class]
        d, m = self.dim, self.mlp_dim
        per_block = 2 * t * d * 3 * d + 2 * t * t * d * 2 + 2 * t * d * d + 2 * t * d * m * 2
        if self.attention.gated:
            per_block += 2 * t * d * d
        forward = 2 * self.num_patches * self.patch_dim * d + self.depth * per_block + 2 * d * self.num_classes
        return forward * (3 if backward else 1)

    def train_flops(self, batch_size: int, steps: int) -> float:
        """Matmul FLOPs of a training run: flops_per_image() (forward + backward) x batch_size x steps (every
        token kept; TrainConfig.train_flops counts token dropping)."""
        return self.flops_per_image() * batch_size * steps


# The reference model, the one the benchmarks and outside speed checks time (at REFERENCE_BATCH_SIZE images
# per step): ViT 192 wide, 6 deep, 3 heads, MLP 384, patch 4, class token, CIFAR-sized input, relu / L
# attention; 65 tokens, 0.752 GFLOP per image for forward + backward (REFERENCE_VIT.flops_per_image()).
REFERENCE_VIT = ViTConfig(image_size=32, patch_size=4, channels=3, num_classes=10, dim=192, depth=6, heads=3,
                          mlp_dim=384, pool="cls", mlp_activation="gelu",
                          attention=AttentionConfig(kind="relu", alpha=1.0))
REFERENCE_BATCH_SIZE = 128


@dataclass(frozen=True)
class OptimizerConfig(JsonConfig):
    """AdamW with decoupled weight decay, global-norm clipping and a warm-up + cosine schedule.

    Both backends implement exactly optax's
        chain(clip_by_global_norm(clip_norm),
              adamw(warmup_cosine_decay_schedule(0, learning_rate, warmup_steps, total_steps,
                                                 end_learning_rate), b1, b2, eps, weight_decay,
                    mask=reluattn.params.decay_mask))
    (the clipping left out when clip_norm is None), so the NumPy optimizer and the optax one give the same
    update for the same gradients. This is the one place the chain is written out.
    """

    learning_rate: float = flag(1e-3, "peak learning rate, reached at the end of the warm-up", name="--lr")
    end_learning_rate: float = 0.0    # where the cosine ends, at total_steps
    warmup_steps: int = flag(0, "linear warm-up from 0 over this many steps (replaces the preset's warm-up epochs)")
    total_steps: int = 1000           # length of the whole schedule (warm-up included)
    weight_decay: float = flag(0.05, "decoupled weight decay, on dense weights only (params.decay_mask)")
    b1: float = 0.9                   # Adam's first-moment decay
    b2: float = 0.999                 # Adam's second-moment decay
    eps: float = 1e-8                 # Adam's denominator guard
    clip_norm: float | None = flag(1.0, "clip gradients to this global L2 norm; 0 turns clipping off")  # None: off

    def __post_init__(self):
        owner = "OptimizerConfig"
        check_float(owner, "learning_rate", self.learning_rate, positive=True)
        check_float(owner, "end_learning_rate", self.end_learning_rate, minimum=0.0)
        check_int(owner, "warmup_steps", self.warmup_steps, minimum=0)
        check_int(owner, "total_steps", self.total_steps)
        if self.warmup_steps >= self.total_steps:
            raise ValueError(f"OptimizerConfig.warmup_steps ({self.warmup_steps}) must be less than "
                             f"OptimizerConfig.total_steps ({self.total_steps})")
        check_float(owner, "weight_decay", self.weight_decay, minimum=0.0)
        for name in ("b1", "b2"):
            value = getattr(self, name)
            check_float(owner, name, value, minimum=0.0)
            if value >= 1:
                raise ValueError(f"OptimizerConfig.{name} must be in [0, 1), got {value}")
        check_float(owner, "eps", self.eps, positive=True)
        if self.clip_norm is not None:
            check_float(owner, "clip_norm", self.clip_norm, positive=True)
        for name in ("learning_rate", "end_learning_rate", "weight_decay", "b1", "b2", "eps"):
            object.__setattr__(self, name, float(getattr(self, name)))
        if self.clip_norm is not None:
            object.__setattr__(self, "clip_norm", float(self.clip_norm))
