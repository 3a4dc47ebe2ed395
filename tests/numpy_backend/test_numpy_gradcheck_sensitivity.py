"""The model gradient check must notice a wrong backward: flip the sign of each output of each backward
function in turn (one at a time) and the check of a model that uses it has to fail."""

import numpy as np
import pytest

import reluattn.numpy_backend as backend
from reluattn.config import ATTENTION_KINDS
from reluattn.numpy_backend import attention_weights
from test_numpy_model import check_model_gradients, tiny_config

MODULES = [backend.layers, backend.attention_weights, backend.multihead_attention, backend.mlp, backend.model]

# (function, which output to flip, the config that exercises it); an output is an index into the returned
# tuple, then a key into a gradient dict where there is one.
MUTATIONS = [
    ("dense_backward", (0,), {}), ("dense_backward", (1, "w"), {}), ("dense_backward", (1, "b"), {}),
    ("layernorm_backward", (0,), {}), ("layernorm_backward", (1, "scale"), {}),
    ("layernorm_backward", (1, "bias"), {}),
    ("gelu_backward", (), {}), ("relu_backward", (), {"mlp_activation": "relu"}),
    ("silu_backward", (), {"gated": True}),
    ("softmax_backward", (), {"mlp_activation": "softmax"}),
    ("softmax_backward", (), {"kind": "softmax"}),
    ("attention_weights_backward", (), {}),
    ("heads_attention_backward", (0,), {}), ("heads_attention_backward", (1,), {}),
    ("heads_attention_backward", (2,), {}),
    ("self_attention_backward", (0,), {}), ("self_attention_backward", (1, "qkv"), {}),
    ("self_attention_backward", (1, "proj"), {}), ("self_attention_backward", (1, "gate"), {"gated": True}),
    ("self_attention_backward", (1, "q_norm"), {"qk_norm": True}),
    ("self_attention_backward", (1, "k_norm"), {"qk_norm": True}),
    ("mlp_backward", (0,), {}), ("mlp_backward", (1, "fc1"), {}), ("mlp_backward", (1, "fc2"), {}),
    ("mlp_backward", (1, "ln"), {"mlp_activation": "softmax_ln"}),
    ("block_backward", (0,), {}), ("block_backward", (1, "ln1"), {}), ("block_backward", (1, "attn"), {}),
    ("embed_backward", ("pos_embed",), {}), ("embed_backward", ("cls_token",), {}),
    ("embed_backward", ("patch_embed",), {}),
    ("embed_backward", ("pos_embed",), {"pool": "gap"}),
    ("cross_entropy_backward", (), {}),
]
ATTENTION_KINDS_WITH_DERIVATIVES = [kind for kind in ATTENTION_KINDS if kind != "softmax"]  # h' of each (registry)


def negate(value, where):
    """The value with the part at `where` (tuple indices / dict keys) multiplied by -1, as a tree."""
    if not where:
        if isinstance(value, dict):
            return {key: negate(child, ()) for key, child in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(negate(child, ()) for child in value)
        return -value
    head, rest = where[0], where[1:]
    if isinstance(value, dict):
        return {**value, head: negate(value[head], rest)}
    items = list(value)
    items[head] = negate(items[head], rest)
    return tuple(items)


def patch_everywhere(monkeypatch, name, original, replacement):
    """Replace the function in every module that imported it, and in mlp's table of activations."""
    for module in MODULES:
        if hasattr(module, name):
            monkeypatch.setattr(module, name, replacement)
    for activation, pair in backend.mlp.ACTIVATIONS.items():
        monkeypatch.setitem(backend.mlp.ACTIVATIONS, activation,
                            tuple(replacement if function is original else function for function in pair))


@pytest.mark.parametrize("name, where, options", MUTATIONS, ids=[f"{m[0]}{list(m[1])}{m[2] or ''}" for m in MUTATIONS])
def test_a_flipped_backward_output_fails_the_check(monkeypatch, name, where, options):
    original = next(getattr(module, name) for module in MODULES if hasattr(module, name))
    patch_everywhere(monkeypatch, name, original, lambda *args, **kwargs: negate(original(*args, **kwargs), where))
    with pytest.raises(AssertionError, match="relative errors over"):
        check_model_gradients(tiny_config(**options), seed=3)


@pytest.mark.parametrize("kind", ATTENTION_KINDS_WITH_DERIVATIVES)
def test_a_flipped_attention_weight_derivative_fails_the_check(monkeypatch, kind):
    original = attention_weights.pointwise_derivative
    monkeypatch.setattr(attention_weights, "pointwise_derivative",
                        lambda k, *args: -original(k, *args) if k == kind else original(k, *args))
    with pytest.raises(AssertionError, match="relative errors over"):
        check_model_gradients(tiny_config(kind=kind), seed=3)


def test_the_unmutated_backward_passes():
    check_model_gradients(tiny_config(kind="relu", qk_norm=True, gated=True, mlp_activation="softmax_ln"), seed=3)
