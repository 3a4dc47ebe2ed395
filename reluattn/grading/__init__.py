"""Checkers for the tutorials' exercises: each grades a student's function in float64 against reluattn's
reference and finite differences, prints a tick when it is right, and otherwise raises `ExerciseFailed`
with a message that says what is wrong (a shape, a sign, a factor and which one, a known slip, which
input's gradient, which configuration).

    from reluattn.grading import check_layernorm_backward
    check_layernorm_backward(my_layernorm_backward)   # ✓ layernorm_backward: dx, grads['scale'], ... agree

Notebook 01 (why 1/L):            check_pointwise_weights, check_expected_activation, check_output_variance
Notebook 02 (backprop by hand):   check_dense_backward, check_layernorm_backward, check_gelu_backward,
                                  check_softmax_backward, check_attention_weights_backward,
                                  check_attention_core_backward, check_self_attention_backward,
                                  check_block_backward
Notebook 05 (key-value memories): check_memory_read, check_top_share

Tools: `gradient_check(f, arrays, grads)` and `numeric_gradient(f, x)` (central differences, float64),
`relative_error`, and the references `expected_activation`, `output_variance`, `memory_read`, `top_share`.
NumPy only, like the backend it grades.
"""

from .backprop_attention import (check_attention_core_backward, check_attention_weights_backward,
                                 check_block_backward, check_self_attention_backward)
from .backprop_layers import (check_dense_backward, check_gelu_backward, check_layernorm_backward,
                              check_softmax_backward)
from .feedback import ExerciseFailed, diagnose
from .finite_differences import gradient_check, numeric_gradient, relative_error
from .memories import check_memory_read, check_top_share, memory_read, top_share, top_slot_count
from .scaling import (check_expected_activation, check_output_variance, check_pointwise_weights,
                      expected_activation, output_variance)

CHECKERS = {
    "01_why_1_over_L": ("check_pointwise_weights", "check_expected_activation", "check_output_variance"),
    "02_backprop_by_hand": ("check_dense_backward", "check_layernorm_backward", "check_gelu_backward",
                            "check_softmax_backward", "check_attention_weights_backward",
                            "check_attention_core_backward", "check_self_attention_backward",
                            "check_block_backward"),
    "05_key_value_memories": ("check_memory_read", "check_top_share"),
}

__all__ = ["CHECKERS", "ExerciseFailed", "diagnose", "gradient_check", "numeric_gradient", "relative_error",
           "expected_activation", "output_variance", "memory_read", "top_share", "top_slot_count",
           *(name for names in CHECKERS.values() for name in names)]
