"""check_dot_product_attention: a function with jax.nn.dot_product_attention's signature (reluattn's drop-in,
jax.nn itself, your own attention_fn) against the float64 NumPy reference, forward and gradient, over drawn
jax.nn-style calls: bool masks, biases with -inf and finfo.min entries, is_causal, sequence lengths, local
windows, grouped-query heads, no batch axis, float32 and bfloat16.

    check_dot_product_attention(fn, kinds=None)    raises MismatchError (an AssertionError) with a report

A key a query cannot see does not exist for it: the reference (numpy_backend.dot_product_attention) gives it
no weight and leaves it out of L, however it was hidden. The gradient is checked along random directions
against central finite differences of the reference (float64, away from kinks: the inputs are normal draws).
A float mask must be refused (cast to bool it would invert an additive 0 / -1e9 mask).
"""

from __future__ import annotations

import inspect
from typing import NamedTuple

import numpy as np
from hypothesis import strategies as st

from ..config import ATTENTION_KINDS, HIDING_BIAS
from .checks import run_property
from .report import MismatchError, relative_error
from .strategies import ALPHAS, as_strategy, check_kinds
from .tolerances import resolve_dtype

ARGUMENTS = ("bias", "mask", "scale", "is_causal", "query_seq_lengths", "key_value_seq_lengths", "local_window_size")
# (batch or None for no batch axis, queries T, keys S, kv heads K, query heads per kv head, head width H):
# fixed, since a jitted fn compiles once per shape.
SHAPES = [(1, 1, 1, 1, 1, 1), (2, 4, 4, 1, 2, 4), (2, 3, 5, 2, 1, 3), (1, 5, 3, 1, 1, 2), (None, 4, 4, 2, 2, 2)]
RTOL = {"float32": 2e-5, "float64": 1e-10, "bfloat16": 3e-2, "float16": 5e-3}  # forward, relative_error
GRAD_RTOL = {"float32": 1e-4, "float64": 1e-7, "bfloat16": 6e-2, "float16": 1e-2}  # directional derivative


class DotProductCase(NamedTuple):
    """One call: fn(query, key, value, bias, mask, **keywords) (+ kind, alpha, weight_scale when fn takes kind)."""
    query: np.ndarray   # (B, T, N, H) or (T, N, H)
    key: np.ndarray     # (B, S, K, H)
    value: np.ndarray   # (B, S, K, H)
    dout: np.ndarray    # like query: the incoming gradient
    kind: str
    alpha: float
    weight_scale: float
    arguments: tuple    # (name, value) pairs of jax.nn's arguments, None ones left out

    def describe(self) -> str:
        shown = []
        for name, value in self.arguments:
            if isinstance(value, np.ndarray):
                hidden = f", {int(np.sum(~value))} False" if value.dtype == bool else \
                    f", {int(np.sum(value <= HIDING_BIAS))} <= {HIDING_BIAS:g}" if name == "bias" else f" {value.tolist()}"
                shown.append(f"{name} {value.shape}{hidden}")
            else:
                shown.append(f"{name}={value!r}")
        return (f"kind={self.kind} alpha={self.alpha:g} weight_scale={self.weight_scale:g}, query {self.query.shape} "
                f"key/value {self.key.shape} {self.query.dtype}" + "".join(f", {text}" for text in shown))


def _takes(fn):
    """The names fn takes (all of jax.nn's and kind when it has **kwargs)."""
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return set(ARGUMENTS)
    if any(p.kind == p.VAR_KEYWORD for p in parameters.values()):
        return set(ARGUMENTS) | {"kind", "alpha", "weight_scale"}
    return set(parameters)


def dot_product_cases(kinds, arguments, dtypes, takes_kind, alpha=1.0, weight_scale=1.0):
    """DotProductCases over `kinds`, drawing the jax.nn arguments named in `arguments`."""
    @st.composite
    def draw_case(draw):
        batch, queries, keys, kv_heads, group, head_dim = draw(st.sampled_from(SHAPES))
        heads, dtype = kv_heads * group, resolve_dtype(draw(as_strategy(dtypes)))
        rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
        lead, b = (() if batch is None else (batch,)), (batch or 1)
        q, dout = (rng.normal(size=lead + (queries, heads, head_dim)) for _ in range(2))
        k, v = (rng.normal(size=lead + (keys, kv_heads, head_dim)) for _ in range(2))
        chosen = {}
        score_shape = (heads, queries, keys) if batch is None else (batch, heads, queries, keys)
        if "mask" in arguments:
            style = draw(st.sampled_from(["none", "random", "padding"]))
            if style == "random":
                chosen["mask"] = rng.random(score_shape) < 0.7
            elif style == "padding":
                real = rng.integers(1, keys + 1, size=b)
                padding = np.arange(keys)[None, :] < real[:, None]  # (B, S)
                chosen["mask"] = padding[:, None, None, :] if batch is not None else padding[0][None, None, :]
        if "bias" in arguments:
            style = draw(st.sampled_from(["none", "normal", "-inf", "finfo.min"]))
            if style != "none":
                bias = rng.normal(size=score_shape)
                if style != "normal":
                    hidden = np.finfo(np.float32).min if style == "finfo.min" else -np.inf
                    hides = rng.random(score_shape) < 0.3
                    hides[..., rng.integers(keys)] = False  # the bias alone never hides a whole row (jax.nn: NaN)
                    bias = np.where(hides, hidden, bias)
                chosen["bias"] = bias.astype(np.float32)
        if "scale" in arguments:
            chosen["scale"] = draw(st.sampled_from([None, 0.5, 1.3]))
        if "is_causal" in arguments:
            chosen["is_causal"] = draw(st.booleans())
        if batch is not None and "key_value_seq_lengths" in arguments and draw(st.booleans()):
            chosen["key_value_seq_lengths"] = rng.integers(1, keys + 1, size=batch).astype(np.int32)
        if batch is not None and "query_seq_lengths" in arguments and draw(st.booleans()):
            chosen["query_seq_lengths"] = rng.integers(1, queries + 1, size=batch).astype(np.int32)
        if "local_window_size" in arguments:
            chosen["local_window_size"] = draw(st.sampled_from([None, 1, (2, 0), (0, 1)]))
        kind = draw(st.sampled_from(kinds))
        case_alpha, case_scale = ((draw(ALPHAS), draw(st.sampled_from([1.0, 0.5]))) if takes_kind
                                  else (alpha, weight_scale))
        rounded = (x.astype(dtype) for x in (q, k, v, dout))
        return DotProductCase(*rounded, kind, case_alpha, case_scale,
                              tuple((name, value) for name, value in chosen.items() if value is not None))
    return draw_case()


def fixed_cases(kinds, arguments, takes_kind, alpha=1.0, weight_scale=1.0):
    """The cases run before the drawn ones: each way of hiding keys in `arguments` alone, on (2, 4, 5, 1, 2, 4)
    float32 inputs, for the first point-wise kind of `kinds` and for softmax (when asked)."""
    rng = np.random.default_rng(0)
    q, dout = (rng.normal(size=(2, 4, 2, 4)).astype(np.float32) for _ in range(2))
    k, v = (rng.normal(size=(2, 5, 1, 4)).astype(np.float32) for _ in range(2))
    padding = np.arange(5)[None, :] < np.array([3, 5])[:, None]  # (B, S): 3 real keys, then 5
    ways = {"mask": padding[:, None, None, :], "bias": np.where(padding, 0.0, -np.inf)[:, None, None, :].astype(
        np.float32), "key_value_seq_lengths": np.array([3, 5], np.int32), "query_seq_lengths": np.array([2, 4], np.int32),
        "is_causal": True, "local_window_size": (1, 0)}
    pointwise = [kind for kind in kinds if kind != "softmax"][:1] + (["softmax"] if "softmax" in kinds else [])
    cases = []
    for name in (name for name in ways if name in arguments):
        for kind in pointwise:
            case_alpha = alpha if not takes_kind else 1.0
            cases.append(DotProductCase(q, k, v, dout, kind, case_alpha, weight_scale if not takes_kind else 1.0,
                                        ((name, ways[name]),)))
    return cases


def _call(fn, case, takes_kind, query=None, key=None, value=None):
    keywords = dict(case.arguments)
    positional = [keywords.pop("bias", None), keywords.pop("mask", None)]
    if takes_kind:
        keywords.update(kind=case.kind, alpha=case.alpha, weight_scale=case.weight_scale)
    query, key, value = (case.query if query is None else query, case.key if key is None else key,
                         case.value if value is None else value)
    return fn(query, key, value, *positional, **keywords)


def _reference(case, query, key, value, **changes):
    from ..numpy_backend import dot_product_attention  # here: the kit's other checks need only reference.py
    options = dict(case.arguments, **changes)
    return dot_product_attention(query, key, value, kind=case.kind, alpha=case.alpha, weight_scale=case.weight_scale,
                                 **options)


def _rows_without_keys(case):
    """(..., T, N) bool like the output's rows: the queries that see no key at all. A point-wise kind must
    read 0 there; softmax rows there are not compared (jax.nn averages the values of the keys hidden by the
    mask and by its other arguments, and gives NaN where a -inf bias hides all)."""
    from ..numpy_backend.interop import visible_keys
    options, batched = dict(case.arguments), case.query.ndim == 4
    queries, heads = case.query.shape[-3], case.query.shape[-2]
    shape = ((case.query.shape[0],) if batched else (1,)) + (heads, queries, case.key.shape[-3])
    visible = visible_keys(shape, options.get("bias"), options.get("mask"), options.get("is_causal", False),
                           options.get("query_seq_lengths"), options.get("key_value_seq_lengths"),
                           options.get("local_window_size"))  # (B, N, T, S)
    empty = ~visible.any(axis=-1)  # (B, N, T)
    if "query_seq_lengths" in options:  # padded queries output 0 for every kind, as in jax.nn: compared
        empty &= np.arange(queries)[None, None, :] < np.asarray(options["query_seq_lengths"])[:, None, None]
    empty = empty.transpose(0, 2, 1)  # (B, T, N)
    return empty if batched else empty[0]


def _float64(case):
    return tuple(np.asarray(x, np.float64) for x in (case.query, case.key, case.value))


def _mask_hints(case, got, expected, tol):
    """Which common masking bug fn's output looks like: hidden keys counted in L, a mask ignored, the
    diagonal hidden under is_causal, rows that read nothing, NaN from a -inf bias."""
    hints = []
    options = dict(case.arguments)
    if not np.all(np.isfinite(got)):
        hints.append("NaN or inf in the output: a -inf bias reaching h (gelu(-inf) is NaN), or a softmax over a row "
                     "with no visible key? Keep hidden scores out of h with jnp.where before applying it")
    q, k, v = _float64(case)
    variants = {}
    if case.kind not in ("softmax", "sigmoid_bias") and case.alpha != 0.0:
        from ..numpy_backend.interop import visible_keys
        batched = q.ndim == 4
        qq, kk = (q, k) if batched else (q[None], k[None])
        heads, keys = qq.shape[2], kk.shape[1]
        counts = visible_keys((qq.shape[0], heads, qq.shape[1], keys), options.get("bias"), options.get("mask"),
                              options.get("is_causal", False), options.get("query_seq_lengths"),
                              options.get("key_value_seq_lengths"), options.get("local_window_size"))
        counts = np.maximum(counts.sum(-1), 1).transpose(0, 2, 1)[..., None]  # (B, T, N, 1)
        counted = (expected if batched else expected[None]) * (counts / keys) ** case.alpha
        variants["hidden keys counted in L (L = all S keys, not the ones the query sees)"] = \
            counted if batched else counted[0]
    if "mask" in options:
        variants["the mask ignored"] = _reference(case, q, k, v, mask=None)
    if options.get("is_causal"):
        strict = np.tri(q.shape[-3], k.shape[-3], -1, dtype=bool)  # (T, S): j < i
        mask = strict if "mask" not in options else options["mask"] & strict
        variants["the diagonal hidden under is_causal (j < i where j <= i is meant)"] = \
            _reference(case, q, k, v, mask=mask, is_causal=False)
    for what, variant in variants.items():
        if np.all(np.isfinite(got)) and relative_error(got, variant) <= tol:
            hints.append(f"the output matches the reference with {what}")
    rows_got, rows_expected = np.abs(got).max(axis=-1), np.abs(expected).max(axis=-1)  # (..., T, N)
    silent = (rows_got == 0) & (rows_expected > 0)
    if silent.any():
        hints.append(f"{int(silent.sum())} query rows (at {np.argwhere(silent)[:3].tolist()}...) read nothing where "
                     "the reference reads visible keys: a mask that hides every key of the row?")
    return hints


def compare_dot_product(fn, case, *, grad=True, takes_kind=None):
    """Check fn on one DotProductCase, forward and (grad=True, needs JAX) gradient; raises MismatchError."""
    takes_kind = "kind" in _takes(fn) if takes_kind is None else takes_kind
    dtype = np.dtype(case.query.dtype).name
    tol, grad_tol = RTOL.get(dtype, 1e-4), GRAD_RTOL.get(dtype, 1e-3)
    got = np.asarray(_call(fn, case, takes_kind), np.float64)
    expected = _reference(case, *_float64(case))
    context = f"  in: {case.describe()}"
    if got.shape != expected.shape:
        raise MismatchError(f"output shape {got.shape}, expected {expected.shape}\n{context}")
    ignored = _rows_without_keys(case)[..., None] if case.kind == "softmax" else False  # (..., T, N, 1)
    got, expected = np.where(ignored, 0.0, got), np.where(ignored, 0.0, expected)
    error = relative_error(got, expected) if np.all(np.isfinite(got)) else np.inf
    if error > tol:
        hints = "".join(f"\n  hint: {hint}" for hint in _mask_hints(case, got, expected, tol))
        raise MismatchError(f"output: relative error {error:.3g} > {tol:g} against the float64 NumPy reference"
                            f"\n{context}{hints}")
    if not grad:
        return
    import jax  # here: the forward check needs no JAX
    import jax.numpy as jnp
    inputs = tuple(jnp.asarray(x) for x in (case.query, case.key, case.value))
    out, pullback = jax.vjp(lambda q, k, v: _call(fn, case, takes_kind, q, k, v), *inputs)
    dout = np.where(ignored, 0.0, np.asarray(case.dout, np.float64))
    grads = [np.asarray(g, np.float64) for g in pullback(jnp.asarray(dout, out.dtype))]
    rng = np.random.default_rng(0)
    base, step = list(_float64(case)), 1e-6
    for index, (name, g) in enumerate(zip(("dquery", "dkey", "dvalue"), grads)):
        if not np.all(np.isfinite(g)):
            raise MismatchError(f"gradient {name} has NaN or inf entries (a -inf bias reaching h' in the backward? "
                                f"jnp.where(visible, s, 0) before h keeps it out)\n{context}")
        direction = rng.normal(size=g.shape)
        plus, minus = list(base), list(base)
        plus[index], minus[index] = base[index] + step * direction, base[index] - step * direction
        numeric = np.sum((_reference(case, *plus) - _reference(case, *minus)) * dout) / (2 * step)
        analytic, size = float(np.sum(g * direction)), float(np.sum(np.abs(g * direction))) + 1e-12
        if abs(analytic - numeric) > grad_tol * max(size, abs(numeric)):
            raise MismatchError(f"gradient {name} along a random direction: {analytic:.6g}, the reference's finite "
                                f"difference {numeric:.6g}\n{context}")


def _check_callable(fn, arguments, takes_kind):
    """One line, up front, when fn cannot take the call the check makes."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    keywords = {name: None for name in arguments if name not in ("bias", "mask")}
    keywords.update(dict(kind="relu", alpha=1.0, weight_scale=1.0) if takes_kind else {})
    try:
        signature.bind(None, None, None, None, None, **keywords)
    except TypeError as error:
        name = getattr(fn, "__name__", type(fn).__name__)
        raise TypeError(f"check_dot_product_attention calls fn(query, key, value, bias, mask, **{sorted(keywords)}); "
                        f"{name}{signature} cannot take that ({error}): pass arguments= to narrow the draw") from None


def check_float_mask_refused(fn, takes_kind):
    """fn must refuse a float mask (jax.nn: "mask dtype should be bool"), not cast it to bool."""
    q = np.ones((1, 2, 1, 2), np.float32)
    additive = np.zeros((1, 1, 2, 2), np.float32)
    additive[..., 1] = -1e9
    keywords = dict(kind=ATTENTION_KINDS[1]) if takes_kind else {}
    try:
        fn(q, q, q, None, additive, **keywords)
    except Exception:  # noqa: BLE001 -- any refusal will do; jax.nn raises ValueError
        return
    raise MismatchError("fn accepted a float mask (an additive 0 / -1e9 one): cast to bool it is inverted (its "
                        "-1e9 entries become True). Refuse it as jax.nn does: 'mask dtype should be bool'")


def check_dot_product_attention(fn, *, kinds=None, arguments=None, dtypes=("float32", "bfloat16"), grad=True,
                                alpha=1.0, weight_scale=1.0, max_examples=None, settings=None, seed=None):
    """fn(query, key, value, bias=None, mask=None, *, scale, is_causal, query_seq_lengths,
    key_value_seq_lengths, local_window_size[, kind, alpha, weight_scale]) against the float64 NumPy reference
    (numpy_backend.dot_product_attention), forward and, with grad=True, jax.vjp gradients.

    kinds: the kinds to draw (default: all when fn takes `kind`, else softmax -- jax.nn's); a fn without `kind`
    (e.g. attention_fn("relu"), which fixes it) is checked as kinds[0] with `alpha` and `weight_scale`.
    arguments: the jax.nn arguments to draw (default: those fn's signature names). dtypes: drawn input dtypes.
    Deterministic like the other checks: a float mask must be refused first, then each way of hiding keys is
    run alone on fixed inputs (fixed_cases: a padding mask, a -inf bias, sequence lengths, is_causal, a
    window), then the same draws every run
    (seed=n for others), max_examples (default 20) of them. Raises MismatchError with hints for mask bugs."""
    takes = _takes(fn)
    takes_kind = "kind" in takes
    if kinds is None:
        kinds = ATTENTION_KINDS if takes_kind else ("softmax",)
    kinds = check_kinds(kinds)
    if not takes_kind and len(kinds) != 1:
        raise ValueError(f"fn takes no kind= argument, so it is one kind: pass kinds=[that kind]; got {kinds}")
    arguments = tuple(name for name in ARGUMENTS if name in takes) if arguments is None else tuple(arguments)
    _check_callable(fn, arguments, takes_kind)
    if "mask" in arguments:
        check_float_mask_refused(fn, takes_kind)
    strategy = dot_product_cases(kinds, arguments, dtypes, takes_kind, alpha, weight_scale)
    edge = fixed_cases(kinds, arguments, takes_kind, alpha, weight_scale)
    run_property(lambda case: compare_dot_product(fn, case, grad=grad, takes_kind=takes_kind), strategy,
                 max_examples, settings, edge=edge, seed=seed)
