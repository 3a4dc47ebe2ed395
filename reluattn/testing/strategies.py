"""Hypothesis strategies for attention and ViT checks: configs, shapes, inputs (well-conditioned and
adversarial) and whole cases, in a dtype of the caller's choice.

Arguments that choose values take a strategy, a list (drawn from) or one value (always used).

    attention_configs(kinds)        AttentionConfig over kinds, alpha in [0, 2], scale, qk-norm, gate (silu or
                                    identity), impl, learned alpha / log-scale, the attention regulariser
    attention_shapes(...)           AttentionShape(batch, queries, keys, heads, head_dim): L = 1, Dh = 1,
                                    T != L (cross_attention=True), long L (long_lengths=True)
    attention_inputs(shape, dtype)  AttentionInputs(q, k, v, dout, profile), profile one of INPUT_PROFILES
    attention_cases(kinds, ...)     AttentionCase: all of the above plus causal / block_size, what the checks run
    vit_configs(...)                small ViTConfigs over every option (pools, MLP activations, attention, the
                                    learned length factor; the regulariser when asked)
    vit_parameters(cfg, dtype)      parameter trees of cfg, moved off their initial values
    image_batches(cfg, dtype)       (images (B, S, S, C), labels (B,) or soft labels (B, K))
    optimizer_configs()             OptimizerConfig over useful ranges, clipping on and off

Input profiles (adversarial ones are where implementations differ):
    "normal"         q, k, v ~ N(0, 1): scores O(1)
    "large_scores"   scores of size 30 to 1000: exp overflows without max-subtraction, relu2 reaches 1e6
    "kinks"          entries in {-1, 0, 1} with zero rows of q and k: exact zero scores (relu's kink, where
                     relu' = 0 by convention), equal scores (ties), whole rows of ties for softmax
    "negative_rows"  some queries whose every score is negative: relu rows of exact zeros
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from hypothesis import strategies as st

from ..config import (ATTENTION_KINDS, GATE_ACTIVATIONS, KINDS_WITH_SIGNED_WEIGHTS, KINDS_WITHOUT_LENGTH_FACTOR,
                      MLP_ACTIVATIONS, POOLS, AttentionConfig, OptimizerConfig, ViTConfig)
from . import reference
from .tolerances import resolve_dtype

INPUT_PROFILES = ("normal", "large_scores", "kinks", "negative_rows")
CAUSAL_LENGTHS = ("per_query", "global")


def as_strategy(value):
    """A strategy as it is, a list or tuple as sampled_from, anything else as just."""
    if isinstance(value, st.SearchStrategy):
        return value
    if isinstance(value, (list, tuple, range)):
        return st.sampled_from(list(value))
    return st.just(value)


def check_kinds(kinds):
    """kinds as a tuple (None: every kind), refusing unknown ones."""
    kinds = ATTENTION_KINDS if kinds is None else ((kinds,) if isinstance(kinds, str) else tuple(kinds))
    unknown = [kind for kind in kinds if kind not in ATTENTION_KINDS]
    if unknown or not kinds:
        raise ValueError(f"kinds must be a non-empty list of {', '.join(ATTENTION_KINDS)}; got {kinds!r}")
    return kinds


# alpha in [0, 2] on a grid of 0.001: reports read alpha=0.731, never a subnormal like 2.2e-309.
ALPHAS = st.integers(0, 2000).map(lambda n: n / 1000)


def attention_configs(kinds=None, *, alphas=ALPHAS, scales=(1.0, 0.5, 2.0), qk_norm=st.booleans(),
                      gated=st.booleans(), impls=("dense", "blocked"), block_sizes=(None, 2, 3, 5),
                      gate_activations=GATE_ACTIVATIONS, learn_alpha=False, learn_scale=False, reg_weights=0.0,
                      entropy_margins=(0.7, 0.3)):
    """AttentionConfigs over `kinds` (None: all). For the attention core only kind, alpha and scale
    matter; qk_norm, gated, gate_activation, impl, the learned length factor and the regulariser are the
    layer's and the model's (vit_configs draws them all). The learned factor and the regulariser are off
    unless asked for (the core refuses the learned factor); where on, options a kind or impl refuses are
    left off for it: no learned factor for softmax and sigmoid_bias, no regulariser for gelu, identity or
    impl="blocked"."""
    impls = as_strategy(impls)

    @st.composite
    def draw_config(draw):
        impl = draw(impls)
        kind = draw(st.sampled_from(check_kinds(kinds)))
        learnable = kind not in KINDS_WITHOUT_LENGTH_FACTOR
        regularisable = kind not in KINDS_WITH_SIGNED_WEIGHTS and impl == "dense"
        return AttentionConfig(kind=kind, alpha=draw(as_strategy(alphas)),
                               scale=draw(as_strategy(scales)), qk_norm=draw(as_strategy(qk_norm)),
                               gated=draw(as_strategy(gated)), impl=impl,
                               block_size=draw(as_strategy(block_sizes)) if impl == "blocked" else None,
                               gate_activation=draw(as_strategy(gate_activations)),
                               learn_alpha=draw(as_strategy(learn_alpha)) if learnable else False,
                               learn_scale=draw(as_strategy(learn_scale)) if learnable else False,
                               reg_weight=draw(as_strategy(reg_weights)) if regularisable else 0.0,
                               entropy_margin=draw(as_strategy(entropy_margins)))
    return draw_config()


class AttentionShape(NamedTuple):
    batch: int       # B
    queries: int     # T
    keys: int        # L (= T unless cross attention)
    heads: int       # H
    head_dim: int    # Dh


LONG_LENGTHS = (257, 512, 1031)


def attention_shapes(*, batch=st.integers(1, 2), heads=st.integers(1, 3), lengths=None, head_dims=None,
                     cross_attention=False, long_lengths=False):
    """AttentionShapes. Default lengths 1..24 (1 included: a single key), head widths 1..8 (1 included);
    long_lengths=True adds L in LONG_LENGTHS; cross_attention=True draws T and L apart."""
    if lengths is None:
        lengths = st.one_of(st.just(1), st.integers(2, 24), *([st.sampled_from(LONG_LENGTHS)] if long_lengths else []))
    lengths, head_dims = as_strategy(lengths), as_strategy(st.integers(1, 8) if head_dims is None else head_dims)

    @st.composite
    def draw_shape(draw):
        keys = draw(lengths)
        queries = draw(lengths) if cross_attention else keys
        return AttentionShape(draw(as_strategy(batch)), queries, keys, draw(as_strategy(heads)), draw(head_dims))
    return draw_shape()


class AttentionInputs(NamedTuple):
    q: np.ndarray     # (B, T, H, Dh)
    k: np.ndarray     # (B, L, H, Dh)
    v: np.ndarray     # (B, L, H, Dh)
    dout: np.ndarray  # (B, T, H, Dh), the incoming gradient for backward checks
    profile: str      # one of INPUT_PROFILES
    seed: int         # make_inputs(shape, profile, seed, dtype) makes them again

    def __repr__(self):
        batch, queries, heads, head_dim = self.q.shape
        shape = AttentionShape(batch, queries, self.k.shape[1], heads, head_dim)
        return f"make_inputs({shape}, {self.profile!r}, seed={self.seed}, dtype={self.q.dtype.name!r})"


def make_inputs(shape: AttentionShape, profile: str, seed: int, dtype=np.float32) -> AttentionInputs:
    """The arrays of one input profile (see the module docstring), rounded to `dtype`."""
    rng = np.random.default_rng(seed)
    batch, queries, keys, heads, head_dim = shape
    query_shape, key_shape = (batch, queries, heads, head_dim), (batch, keys, heads, head_dim)
    q, k, v, dout = (rng.normal(size=s) for s in (query_shape, key_shape, key_shape, query_shape))
    if profile == "large_scores":
        size = rng.choice([30.0, 300.0, 1000.0])  # typical |score|; q.k / sqrt(Dh) has unit variance before
        q, k = q * np.sqrt(size), k * np.sqrt(size)
    elif profile == "kinks":
        q, k = (rng.integers(-1, 2, size=s).astype(np.float64) for s in (query_shape, key_shape))
        q[:, rng.random(queries) < 0.3] = 0.0  # zero queries: every score of the row is exactly 0
        k[:, rng.random(keys) < 0.3] = 0.0  # zero keys: a column of exact zeros
        ties = rng.random(keys) < 0.3
        k[:, ties] = k[:, :1]  # keys equal to key 0: equal scores
    elif profile == "negative_rows":
        k[..., 0] = 1.0 + np.abs(k[..., 0])  # every key's first entry is positive ...
        negative = (rng.random(queries) < 0.5)[None, :, None]  # (1, T, 1): these queries point the other way,
        pointing = -(0.5 + np.abs(rng.normal(size=(batch, queries, heads))))  # (B, T, H) so all their scores are < 0
        q = np.where(negative[..., None], 0.0, q)  # (B, T, H, Dh)
        q[..., 0] = np.where(negative, pointing, q[..., 0])
    elif profile != "normal":
        raise ValueError(f"profile must be one of {', '.join(INPUT_PROFILES)}; got {profile!r}")
    dtype = resolve_dtype(dtype)
    return AttentionInputs(*(x.astype(dtype) for x in (q, k, v, dout)), profile, seed)


def attention_inputs(shape: AttentionShape, dtype=np.float32, profiles=INPUT_PROFILES):
    """AttentionInputs of `shape` in `dtype`, over the input profiles asked for."""
    profiles = as_strategy(profiles)
    return st.builds(lambda profile, seed: make_inputs(shape, profile, seed, dtype), profiles,
                     st.integers(0, 2 ** 32 - 1))


class AttentionCase(NamedTuple):
    """One drawn check: call fn(q, k, v, attn_cfg[, block_size=...][, causal=True, causal_length=...]
    [, **extra]); `extra` holds (name, value) pairs of the caller's own options (a kernel's tile sizes)."""
    inputs: AttentionInputs
    attn_cfg: AttentionConfig
    causal: bool = False
    causal_length: str = "per_query"
    block_size: int | None = None
    extra: tuple = ()

    def options(self) -> dict:
        """The keyword arguments fn is called with."""
        options = dict(self.extra)
        if self.block_size is not None:
            options["block_size"] = self.block_size
        if self.causal:
            options.update(causal=True, causal_length=self.causal_length)
        return options

    def describe(self) -> str:
        cfg = self.attn_cfg
        text = (f"kind={cfg.kind} alpha={cfg.alpha:.6g} scale={cfg.scale:g}, q {self.inputs.q.shape} "
                f"k, v {self.inputs.k.shape} (B, T|L, H, Dh) {self.inputs.q.dtype}, inputs {self.inputs.profile!r}")
        options = ", ".join(f"{name}={value!r}" for name, value in self.options().items())
        return text + (f", {options}" if options else "")

    def __repr__(self):
        options = "".join(f", {name}={value!r}" for name, value in self._asdict().items()
                          if name != "inputs" and (name != "extra" or value))
        return f"AttentionCase({self.inputs!r}{options})"


def attention_cases(kinds=None, *, dtype=np.float32, shapes=None, profiles=INPUT_PROFILES, causal=False,
                    causal_lengths=CAUSAL_LENGTHS, block_sizes=None, configs=None, options=None):
    """AttentionCases. causal=True draws causal and plain cases; block_sizes: None (no block_size
    argument), "drawn" (dividing L, not dividing it, exceeding it) or a strategy/list/value; options:
    {name: strategy, list or value} of further keyword arguments fn takes, drawn into AttentionCase.extra."""
    if configs is not None and kinds is not None:
        raise ValueError("give kinds or configs (an attention_configs strategy over its own kinds), not both")
    configs = configs if configs is not None else attention_configs(kinds, qk_norm=False, gated=False, impls="dense")
    shapes = shapes if shapes is not None else attention_shapes()
    extras = st.fixed_dictionaries({name: as_strategy(value) for name, value in (options or {}).items()})

    @st.composite
    def draw_case(draw):
        shape = draw(as_strategy(shapes))
        block_size = None
        if block_sizes == "drawn":
            block_size = draw(st.integers(1, shape.keys + 3))
        elif block_sizes is not None:
            block_size = draw(as_strategy(block_sizes))
        is_causal = draw(st.booleans()) if causal else False
        return AttentionCase(draw(attention_inputs(shape, dtype, profiles)), draw(configs), is_causal,
                             draw(as_strategy(causal_lengths)) if is_causal else "per_query", block_size,
                             tuple(draw(extras).items()))
    return draw_case()


# ------------------------------------------------------------------------------------------------ ViT

def vit_configs(*, kinds=None, head_dims=(3, 4), impls=("dense", "blocked"), pools=POOLS,
                mlp_activations=MLP_ACTIVATIONS, reg_weights=0.0):
    """Small ViTs (depth 1-2, 1-3 heads, at most 17 tokens) over pools, MLP activations and attention
    configs (the gate's activation and the learned length factor included). No head width of 2: LayerNorm
    over two numbers gives +-1 whatever they are, so its exact gradient vanishes and a backend's is
    rounding noise. The attention regulariser is drawn only when asked (reg_weights=(0.0, 0.5)): in float32
    its entropy gradient, log p + 1 at small p, carries more rounding than model_rtol allows these tiny
    models (float64 is fine)."""
    @st.composite
    def draw_config(draw):
        heads = draw(st.integers(1, 3))
        image_size, patch_size = draw(st.sampled_from([(4, 2), (8, 4), (8, 2)]))
        return ViTConfig(image_size=image_size, patch_size=patch_size, channels=draw(st.sampled_from([1, 3])),
                         num_classes=draw(st.integers(2, 5)), dim=heads * draw(as_strategy(head_dims)),
                         depth=draw(st.integers(1, 2)), heads=heads, mlp_dim=draw(st.sampled_from([4, 12])),
                         pool=draw(as_strategy(pools)), mlp_activation=draw(as_strategy(mlp_activations)),
                         attention=draw(attention_configs(kinds, impls=impls, learn_alpha=st.booleans(),
                                                          learn_scale=st.booleans(), reg_weights=reg_weights)))
    return draw_config()


def make_parameters(cfg: ViTConfig, seed: int, dtype=np.float32) -> dict:
    """init_params(cfg) with every leaf moved by N(0, 0.2) (no zero biases, no unit scales: every
    parameter then carries a gradient of its own), in `dtype`."""
    rng = np.random.default_rng(seed)
    flat = reference.flatten(reference.init_params(cfg, seed=seed % 2 ** 31, dtype=np.float64))
    dtype = resolve_dtype(dtype)
    return reference.unflatten({path: (leaf + rng.normal(0.0, 0.2, leaf.shape)).astype(dtype)
                                for path, leaf in flat.items()})


def vit_parameters(cfg: ViTConfig, dtype=np.float32):
    """Parameter trees of `cfg` (make_parameters over drawn seeds)."""
    return st.builds(lambda seed: make_parameters(cfg, seed, dtype), st.integers(0, 2 ** 32 - 1))


def make_batch(cfg: ViTConfig, seed: int, dtype=np.float32, batch: int = 3, soft_labels: bool = False):
    """(images (B, S, S, C) ~ N(0, 1) in dtype, labels (B,) ints or (B, K) probabilities)."""
    rng = np.random.default_rng(seed)
    images = rng.normal(size=(batch, cfg.image_size, cfg.image_size, cfg.channels)).astype(resolve_dtype(dtype))
    labels = rng.dirichlet(np.ones(cfg.num_classes), size=batch) if soft_labels else \
        rng.integers(0, cfg.num_classes, size=batch)
    return images, labels


def image_batches(cfg: ViTConfig, dtype=np.float32, batch=st.integers(1, 3), soft_labels=st.booleans()):
    """(images, labels) for cfg: batches of 1-3, integer or soft labels."""
    return st.builds(lambda seed, size, soft: make_batch(cfg, seed, dtype, size, soft), st.integers(0, 2 ** 32 - 1),
                     as_strategy(batch), as_strategy(soft_labels))


def optimizer_configs():
    """OptimizerConfigs over their useful ranges, clipping on and off, with and without warm-up."""
    @st.composite
    def draw_config(draw):
        total = draw(st.integers(1, 12))
        return OptimizerConfig(
            learning_rate=draw(st.floats(1e-4, 1e-1)), end_learning_rate=draw(st.sampled_from([0.0, 1e-5])),
            warmup_steps=draw(st.integers(0, total - 1)), total_steps=total,
            weight_decay=draw(st.sampled_from([0.0, 0.05, 0.3])), b1=draw(st.sampled_from([0.0, 0.8, 0.9])),
            b2=draw(st.sampled_from([0.95, 0.999])), eps=draw(st.sampled_from([1e-8, 1e-6, 1e-3])),
            clip_norm=draw(st.sampled_from([None, 0.1, 1.0, 100.0])))
    return draw_config()
