"""The kit is deterministic by default: fixed edge cases first, the same draws on every run, so a wrong relu'(0)
is caught on every run, not one in ten; reports never show a subnormal alpha; an fn the check cannot call is
refused up front in one line. And check_dot_product_attention (jax.nn's signature): it passes reluattn's
drop-in and jax.nn, and catches each masking bug, with a hint."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import reluattn.testing as rt
from reluattn.config import ATTENTION_KINDS
from reluattn.jax_backend import attention, attention_fn, dot_product_attention


def relu_by_maximum(q, k, v, attn_cfg, causal=False, causal_length="per_query"):
    """reluattn's attention, except relu computed as jnp.maximum(s, 0): derivative 1/2 at s = 0, not 0."""
    if attn_cfg.kind != "relu":
        return attention(q, k, v, attn_cfg, causal=causal, causal_length=causal_length)
    q, k, v = (jnp.asarray(x) for x in (q, k, v))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])  # (B, H, T, L)
    weights = attn_cfg.scale * k.shape[1] ** -attn_cfg.alpha * jnp.maximum(scores, 0.0)
    return jnp.einsum("bhqk,bkhd->bqhd", weights, v)  # (B, T, H, Dh)


def test_the_relu_derivative_bug_is_caught_in_20_of_20_fresh_runs():
    """Each run is the kit's defaults from scratch: no example database (the kit uses none), nothing shared."""
    caught = 0
    for _ in range(20):
        try:
            rt.check_attention_grad(relu_by_maximum)
        except rt.MismatchError as error:
            caught += "kind=relu" in str(error) and "kink" in str(error)
    assert caught == 20


def recording(log):
    def fn(q, k, v, attn_cfg, causal=False, causal_length="per_query"):
        log.append((q.tobytes(), attn_cfg.kind, attn_cfg.alpha, causal))
        return attention(q, k, v, attn_cfg, causal=causal, causal_length=causal_length)
    return fn


def test_edge_cases_run_first_and_draws_are_reproducible():
    first, again, seeded, seeded_again = [], [], [], []
    rt.check_attention(recording(first), kinds=["relu", "relu6"], max_examples=6)
    rt.check_attention(recording(again), kinds=["relu", "relu6"], max_examples=6)
    assert first == again
    edge = rt.edge_cases(["relu", "relu6"])
    assert [entry[0] for entry in first[:len(edge)]] == [case.inputs.q.tobytes() for case in edge]
    rt.check_attention(recording(seeded), kinds=["relu", "relu6"], max_examples=6, seed=7)
    rt.check_attention(recording(seeded_again), kinds=["relu", "relu6"], max_examples=6, seed=7)
    assert seeded == seeded_again and seeded[len(edge):] != first[len(edge):]
    assert all(abs(alpha * 1000 - round(alpha * 1000)) < 1e-9 for _, _, alpha, _ in first)  # a grid: no 2.2e-309


def test_the_edge_cases_hold_exact_kinks():
    edge = rt.edge_inputs(np.float64)
    scores = np.einsum("bqhd,bkhd->bhqk", edge.q, edge.k) / 2.0  # (2, H, T, L)
    assert {0.0, 6.0} <= set(np.unique(scores[0]))
    assert (edge.q[0] == 0).all(axis=-1).any() and (edge.k[0] == 0).all(axis=-1).any()  # zero query, zero key
    assert (scores[1] < 0).all(axis=-1).any()  # a row of negative scores


def test_a_function_the_check_cannot_call_is_refused_in_one_line():
    def no_causal(q, k, v, attn_cfg):
        return attention(q, k, v, attn_cfg)

    with pytest.raises(TypeError, match=r"check_attention calls fn\(q, k, v, attn_cfg, causal=\.\.\., causal_length") as info:
        rt.check_attention(no_causal, causal=True)
    assert "\n" not in str(info.value)
    with pytest.raises(TypeError, match="check_dot_product_attention") as info:
        rt.check_attention(jax.nn.dot_product_attention)
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------------------ check_dot_product_attention

BUGS = ("float_mask_cast", "inf_bias_reaches_h", "hidden_keys_counted_in_L", "ignores_key_value_seq_lengths",
        "causal_hides_the_diagonal")


def small_drop_in(bug=None):
    """A jax.nn-style point-wise (and softmax) attention written plainly, with one masking bug switched on."""
    def fn(query, key, value, bias=None, mask=None, *, kind="relu", alpha=1.0, weight_scale=1.0, scale=None,
           is_causal=False, key_value_seq_lengths=None):
        if mask is not None and bug != "float_mask_cast" and jnp.asarray(mask).dtype != bool:
            raise ValueError("mask dtype should be bool")
        if query.ndim == 3:  # no batch axis
            return fn(query[None], key[None], value[None], bias, mask, kind=kind, alpha=alpha,
                      weight_scale=weight_scale, scale=scale, is_causal=is_causal)[0]
        batch, queries, heads, head_dim = query.shape
        keys, repeats = key.shape[1], heads // key.shape[2]
        key, value = (jnp.repeat(x, repeats, axis=2) for x in (key, value))
        scale = 1 / math.sqrt(head_dim) if scale is None else scale
        scores = jnp.einsum("bqhd,bkhd->bhqk", query, key, preferred_element_type=jnp.float32) * scale
        visible = jnp.ones(scores.shape, bool)
        if bias is not None:
            scores = scores + bias
            visible = visible & (bias > -1e4)
        if mask is not None:
            visible = visible & jnp.asarray(mask, bool)
        if is_causal:
            reach = -1 if bug == "causal_hides_the_diagonal" else 0
            visible = visible & jnp.tri(queries, keys, reach, dtype=bool)
        if key_value_seq_lengths is not None and bug != "ignores_key_value_seq_lengths":
            visible = visible & (jnp.arange(keys) < key_value_seq_lengths[:, None, None, None])
        if kind == "softmax":
            weights = jax.nn.softmax(jnp.where(visible, scores, -1e30), axis=-1)
        else:
            counts = keys if bug == "hidden_keys_counted_in_L" else jnp.maximum(visible.sum(-1, keepdims=True), 1)
            safe = scores if bug == "inf_bias_reaches_h" else jnp.where(visible, scores, 0.0)
            h = {"relu": jax.nn.relu, "gelu": lambda s: jax.nn.gelu(s, approximate=True)}[kind]
            weights = jnp.where(visible, weight_scale * counts ** -alpha * h(safe), 0.0)
        return jnp.einsum("bhqk,bkhd->bqhd", weights.astype(value.dtype), value)
    return fn


FEW = dict(max_examples=3, dtypes="float32")


def test_check_dot_product_attention_passes_reluattns_drop_in_and_jax_nn():
    rt.check_dot_product_attention(dot_product_attention, **FEW)
    rt.check_dot_product_attention(jax.nn.dot_product_attention, max_examples=3)  # softmax, bfloat16 too
    rt.check_dot_product_attention(attention_fn("relu", alpha=0.5), kinds=["relu"], alpha=0.5, max_examples=6)
    rt.check_dot_product_attention(small_drop_in(), kinds=["relu", "gelu", "softmax"], **FEW)  # the bugs' base


@pytest.mark.parametrize("bug", BUGS)
def test_check_dot_product_attention_catches_each_masking_bug(bug):
    kinds = ["gelu"] if bug == "inf_bias_reaches_h" else ["relu", "softmax"]
    with pytest.raises(rt.MismatchError) as info:
        rt.check_dot_product_attention(small_drop_in(bug), kinds=kinds, **FEW)
    report = str(info.value)
    expected = {"float_mask_cast": "float mask", "inf_bias_reaches_h": "NaN",
                "hidden_keys_counted_in_L": "hint: the output matches the reference with hidden keys counted in L",
                "ignores_key_value_seq_lengths": "key_value_seq_lengths",
                "causal_hides_the_diagonal": "hint: the output matches the reference with the diagonal hidden"}[bug]
    assert expected in report, report


def test_every_kind_of_the_registry_is_drawn():
    seen = set()

    def fn(query, key, value, bias=None, mask=None, *, kind="relu", **options):
        seen.add(kind)
        return dot_product_attention(query, key, value, bias, mask, kind=kind, **options)

    rt.check_dot_product_attention(fn, grad=False, max_examples=60, dtypes="float32")
    assert seen == set(ATTENTION_KINDS)
