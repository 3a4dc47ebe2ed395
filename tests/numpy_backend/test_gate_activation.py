"""The gate's activation (AttentionConfig.gate_activation): o = attn_out * phi(x W_g + b_g) with phi = silu
(the gated attention unit, Hua et al. 2022) or identity (Wortsman et al. 2023's "extra projection"), the
NumPy backend: the forward against a plain formula (the JAX layer against it: tests/parity/
test_learned_length_and_gate.py). The NumPy
backward of both is checked against finite differences in test_numpy_layers.test_self_attention_backward,
and the whole models against each other by the property tests (the strategies draw gate_activation)."""

import numpy as np
import pytest

from reluattn.config import AttentionConfig
from reluattn.numpy_backend.multihead_attention import self_attention_forward
from test_numpy_layers import attention_params, normal


@pytest.mark.parametrize("gate_activation", ["silu", "identity"])
def test_gate_multiplies_by_phi_of_the_projection(gate_activation):
    heads, dim = 2, 6
    x = normal(3, 2, 4, dim)
    params = attention_params(4, dim, dim // heads, False, True)
    params["proj"] = {"w": np.eye(dim), "b": np.zeros(dim)}  # so the output is the gated heads
    ungated = self_attention_forward(x, params, AttentionConfig(kind="relu"), heads)[0]
    gated = self_attention_forward(x, params, AttentionConfig(kind="relu", gated=True,
                                                              gate_activation=gate_activation), heads)[0]
    logits = x @ params["gate"]["w"] + params["gate"]["b"]
    phi = logits / (1 + np.exp(-logits)) if gate_activation == "silu" else logits
    np.testing.assert_allclose(gated, ungated * phi, rtol=1e-12, atol=1e-14)
