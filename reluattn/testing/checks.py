"""Checks of attention implementations against the float64 NumPy reference (forward and hand-written
backward), each raising `MismatchError` (an AssertionError) whose message reports the worst entry.

    check_attention(fn, kinds=...)           fn(q, k, v, attn_cfg) -> out, over drawn cases
    check_attention_grad(fn, kinds=...)      jax.vjp of fn, or vjp=..., against the hand-written backward
    check_blocked(fn, kinds=...)             a tiled fn(q, k, v, attn_cfg, block_size=n, causal=..., ...)
                                             over block sizes that divide L, do not, and exceed it, with masks
    compare_attention(fn, case)              one case, no hypothesis (what the three above run)

fn takes NumPy arrays in the layout of the backends' `attention`, q (B, T, H, Dh), k and v (B, L, H, Dh),
and returns anything np.asarray turns into a (B, T, H, Dh) array (NumPy, JAX, a CPU torch tensor). Its
tolerance follows the dtype of its output (reluattn.testing.tolerances), unless `tolerance=` names one
(e.g. "bfloat16" for float32 outputs of bfloat16 matmuls). Causal cases are drawn only with causal=True;
fn is then called with causal=True, causal_length="per_query" or "global" (causal_lengths= narrows it).
"""

from __future__ import annotations

import inspect
import math

import numpy as np
from hypothesis import HealthCheck, Phase, given
from hypothesis import seed as hypothesis_seed
from hypothesis import settings as hypothesis_settings

from . import reference
from .edge_cases import edge_cases as fixed_edge_cases
from .report import compare, raise_problems
from .strategies import CAUSAL_LENGTHS, INPUT_PROFILES, AttentionCase, attention_cases
from .tolerances import allowance, attention_bounds, tolerance_for

QUERY_AXES = ("batch", "query", "head", "feature")
KEY_AXES = ("batch", "key", "head", "feature")


#: Hypothesis settings for properties of compiled code, the checks' default (in a test of your own:
#: `@settings(compiling, max_examples=n)`): no deadline (compilation is slow and uneven), no shrinking (each
#: shrink step would compile again; the failing case is reported as drawn), no health check on slow draws.
compiling = hypothesis_settings(deadline=None, phases=(Phase.explicit, Phase.reuse, Phase.generate),
                                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


#: The checks' default: `compiling` made reproducible -- the same draws on every run (derandomize) and no
#: example database (a run never depends on what an earlier one failed on). seed= draws other examples.
deterministic = hypothesis_settings(compiling, derandomize=True, database=None)


def run_property(body, strategy, max_examples=None, settings=None, default_examples=20, edge=(), seed=None):
    """Run body(case) on the fixed `edge` cases, then over `strategy` with hypothesis, under `settings`
    (default: `deterministic` with `default_examples` examples); max_examples, when given, overrides the count
    of either; seed (an int): draw reproducibly from that seed instead of derandomizing."""
    chosen = settings if settings is not None else hypothesis_settings(deterministic, max_examples=default_examples)
    if max_examples is not None:
        chosen = hypothesis_settings(chosen, max_examples=max_examples)
    if seed is not None:
        chosen = hypothesis_settings(chosen, derandomize=False)

    @chosen
    @given(case=strategy)
    def property_holds(case):
        body(case)

    if seed is not None:
        property_holds = hypothesis_seed(seed)(property_holds)
    for case in edge:  # the fixed cases first, outside hypothesis: they run whatever the settings
        body(case)
    property_holds()


def jax_vjp(fn):
    """vjp(q, k, v, attn_cfg, dout, **options) -> (out, (dq, dk, dv)) of a JAX-traceable fn, by jax.vjp."""
    import jax  # here: the checks need no JAX unless a JAX function is differentiated
    import jax.numpy as jnp

    def vjp(q, k, v, attn_cfg, dout, **options):
        out, pullback = jax.vjp(lambda q, k, v: fn(q, k, v, attn_cfg, **options), q, k, v)
        return out, pullback(jnp.asarray(dout, out.dtype))
    return vjp


def check_signature(fn, check_name, *, causal=False, block=False, options=None, positional=4):
    """Refuse, up front and in one line, an fn the check could not call: fn(q, k, v, attn_cfg[, causal=True,
    causal_length=...][, block_size=n][, **options])."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or C function: nothing to read, the calls will tell
        return
    keywords = dict.fromkeys(options or {})
    keywords.update({"causal": True, "causal_length": "per_query"} if causal else {})
    keywords.update({"block_size": 1} if block else {})
    call = ", ".join(["q, k, v, attn_cfg" + ", dout" * (positional == 5)] + [f"{name}=..." for name in keywords])
    name = getattr(fn, "__name__", type(fn).__name__)
    if {"bias", "mask"} & set(signature.parameters):  # its 4th argument would be a bias, not the config
        raise TypeError(f"{check_name} calls fn({call}); {name} takes jax.nn.dot_product_attention's arguments "
                        "(bias, mask): use reluattn.testing.check_dot_product_attention for it")
    try:
        signature.bind(*[None] * positional, **keywords)
    except TypeError as error:
        raise TypeError(f"{check_name} calls fn({call}); {name}{signature} cannot take that ({error}): wrap it, or "
                        "pass causal=False / options= to match it") from None


def _edge(edge_cases, kinds, dtype, shapes, configs, options, causal, causal_lengths, block_size=None):
    """The fixed edge cases to run first: "auto" runs them unless shapes, configs or options narrow the draw
    (a function that only takes some shapes or needs options could not run them)."""
    if edge_cases == "auto":
        edge_cases = shapes is None and configs is None and options is None
    if not edge_cases:
        return []
    return fixed_edge_cases(kinds, dtype, causal=causal, causal_lengths=causal_lengths, block_size=block_size)


def _hint_factors(case: AttentionCase) -> dict:
    """Constants a wrong implementation is typically off by, named for the report."""
    cfg, keys, head_dim = case.attn_cfg, case.inputs.k.shape[1], case.inputs.q.shape[-1]
    return {"sqrt(Dh) (a dropped 1/sqrt(Dh)?)": math.sqrt(head_dim), "1/sqrt(Dh)": 1 / math.sqrt(head_dim),
            "Dh": head_dim, f"L^(alpha - 1) (1/L where L^-alpha is meant, L={keys})": keys ** (cfg.alpha - 1.0),
            f"L^alpha (no length factor, L={keys})": keys ** cfg.alpha,
            "L^(2 alpha) (L^+alpha?)": keys ** (2 * cfg.alpha),
            "scale": cfg.scale, "1/scale": 1 / cfg.scale}


def compare_attention(fn=None, case: AttentionCase = None, *, grad=False, vjp=None, tolerance=None):
    """Check fn on one AttentionCase: its output, and with grad=True its (dq, dk, dv) for the incoming
    gradient case.inputs.dout, by `vjp(q, k, v, attn_cfg, dout, **options) -> (dq, dk, dv)` or, without
    one, by jax.vjp of fn. Raises MismatchError (an AssertionError) with the report."""
    if (fn is None) == (vjp is None):
        raise ValueError("give fn (differentiated with jax.vjp when grad=True) or vjp=, not both")
    inputs, options = case.inputs, case.options()
    expected, cache = reference.reference_attention(inputs.q, inputs.k, inputs.v, case.attn_cfg, case.causal,
                                                    case.causal_length)
    if vjp is not None:
        out, grads = None, vjp(inputs.q, inputs.k, inputs.v, case.attn_cfg, inputs.dout, **options)
    elif grad:
        out, grads = jax_vjp(fn)(inputs.q, inputs.k, inputs.v, case.attn_cfg, inputs.dout, **options)
    else:
        out, grads = fn(inputs.q, inputs.k, inputs.v, case.attn_cfg, **options), None
    produced = out if out is not None else grads[0]
    rule = tolerance_for(tolerance if tolerance is not None else np.asarray(produced).dtype)
    pieces = reference.attention_pieces(cache, case.attn_cfg, case.causal, case.causal_length)
    bounds, kinks = attention_bounds(pieces, rule.rtol, None if grads is None else reference.heads_first(inputs.dout))
    allowed = {name: allowance(bound, rule, kinks.get(name, 0.0)).transpose(reference.TO_HEADS_FIRST)
               for name, bound in bounds.items()}
    context = f"{case.describe()}; {rule}"
    problems = []
    if out is not None:
        problems.append(compare("output", out, expected, allowed["out"], axes=QUERY_AXES, context=context,
                                factors=_hint_factors(case)))
    if grads is not None:
        if len(grads) != 3:
            raise_problems([f"the gradient must be (dq, dk, dv); got {len(grads)} arrays"])
        expected_grads = reference.reference_attention_grads(inputs.dout, cache, case.attn_cfg, case.causal)
        for name, got, want, axes in zip(("dq", "dk", "dv"), grads, expected_grads, (QUERY_AXES, KEY_AXES, KEY_AXES)):
            problems.append(compare(f"gradient {name}", got, want, allowed[name], axes=axes, context=context,
                                    factors=_hint_factors(case)))
        if any(problems) and case.attn_cfg.kind in reference.KINKS:
            on_kinks = int(np.isin(pieces.arguments, reference.KINKS[case.attn_cfg.kind]).sum())
            if on_kinks:
                problems.append(f"  hint: {on_kinks} scores sit exactly on a kink of {case.attn_cfg.kind} "
                                f"({', '.join(map(str, reference.KINKS[case.attn_cfg.kind]))}), where the reference's derivative "
                                f"is 0 (jax.nn.relu's; jnp.maximum(s, 0) gives 1/2, s >= 0 gives 1)")
    raise_problems(problems)


def check_attention(fn, *, kinds=None, causal=False, causal_lengths=CAUSAL_LENGTHS, dtype=np.float32, shapes=None,
                    profiles=INPUT_PROFILES, configs=None, options=None, tolerance=None, max_examples=None,
                    settings=None, seed=None, edge_cases="auto"):
    """fn(q, k, v, attn_cfg[, causal=True, causal_length=...]) -> (B, T, H, Dh) against the reference,
    forward, over drawn kinds (default: all), alpha in [0, 2], scale, shapes (`shapes`: an
    attention_shapes strategy; default L = 1..24, Dh = 1..8) and input profiles, in `dtype`. `configs`:
    an attention_configs strategy, to narrow alpha or scale (e.g. attention_configs(["relu"], alphas=1.0)).
    `options`: {name: strategy, list or value} of further keyword arguments fn takes (a kernel's tile
    sizes), drawn with each case. max_examples (default 20) overrides the count of `settings`.

    Deterministic by default: the fixed edge cases (edge_cases.py: scores exactly at the kinks, zero query
    and key rows, all-negative rows; "auto": unless shapes, configs or options narrow the draw) run first,
    then the same drawn examples on every run (settings `deterministic`: derandomized, no example database);
    seed=n draws other examples, reproducibly; settings= replaces the hypothesis settings."""
    check_signature(fn, "check_attention", causal=causal, options=options)
    strategy = attention_cases(kinds, dtype=dtype, shapes=shapes, profiles=profiles, causal=causal,
                               causal_lengths=causal_lengths, configs=configs, options=options)
    edge = _edge(edge_cases, kinds, dtype, shapes, configs, options, causal, causal_lengths)
    run_property(lambda case: compare_attention(fn, case, tolerance=tolerance), strategy, max_examples, settings,
                 edge=edge, seed=seed)


def check_attention_grad(fn=None, *, vjp=None, kinds=None, causal=False, causal_lengths=CAUSAL_LENGTHS,
                         dtype=np.float32, shapes=None, profiles=INPUT_PROFILES, configs=None, options=None,
                         tolerance=None, max_examples=None, settings=None, seed=None, edge_cases="auto"):
    """Gradients (dq, dk, dv) against the reference's hand-written backward (relu' = 0 at 0, relu6' = 0 at
    0 and 6). Give fn (a JAX function: differentiated with jax.vjp, its output checked too) or
    vjp(q, k, v, attn_cfg, dout, **options) -> (dq, dk, dv) (any framework). Options as check_attention:
    the fixed edge cases first (a wrong relu'(0) fails on them every run), then reproducible draws."""
    check_signature(fn if vjp is None else vjp, "check_attention_grad", causal=causal, options=options,
                    positional=4 if vjp is None else 5)
    strategy = attention_cases(kinds, dtype=dtype, shapes=shapes, profiles=profiles, causal=causal,
                               causal_lengths=causal_lengths, configs=configs, options=options)
    edge = _edge(edge_cases, kinds, dtype, shapes, configs, options, causal, causal_lengths)
    run_property(lambda case: compare_attention(fn, case, grad=True, vjp=vjp, tolerance=tolerance), strategy,
                 max_examples, settings, edge=edge, seed=seed)


def check_blocked(fn, *, kinds=None, masks=True, causal_lengths=CAUSAL_LENGTHS, grad=False, dtype=np.float32,
                  shapes=None, block_sizes="drawn", profiles=INPUT_PROFILES, configs=None, options=None,
                  tolerance=None, max_examples=None, settings=None, seed=None, edge_cases="auto"):
    """A tiled implementation fn(q, k, v, attn_cfg, block_size=n[, causal=True, causal_length=...]) against
    the dense reference: block sizes that divide L, do not (a last partial tile) and exceed it (drawn from
    1..L+3 by default), causal masks unless masks=False, and with grad=True its jax.vjp gradients too.
    Other options as check_attention (`options=` for further tile sizes, e.g. {"query_block_size": ...}); the
    edge cases run with block_size=2 (two tiles of their 4 keys)."""
    check_signature(fn, "check_blocked", causal=masks, block=True, options=options)
    strategy = attention_cases(kinds, dtype=dtype, shapes=shapes, profiles=profiles, causal=masks,
                               causal_lengths=causal_lengths, block_sizes=block_sizes, configs=configs,
                               options=options)
    edge = _edge(edge_cases, kinds, dtype, shapes, configs, options, masks, causal_lengths, block_size=2)
    run_property(lambda case: compare_attention(fn, case, grad=grad, tolerance=tolerance), strategy, max_examples,
                 settings, edge=edge, seed=seed)
