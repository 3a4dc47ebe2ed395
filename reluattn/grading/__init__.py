"""Checkers for the exercises of the tutorials' student versions (tutorials/exercises/).

Each checker takes the student's function, runs it on private copies of its inputs, and grades it in float64
against reluattn's reference and, for a backward pass, against central finite differences. A right answer
prints a tick; a wrong one raises `ExerciseFailed` with one short message that names the mistake (a shape, a
sign, a factor and which one, a known slip, which input's gradient, which configuration) or, when it cannot,
says what to re-derive (never the answer). Refused, with a message that says why (refusal.py): any reluattn
function passed as the answer; reluattn's answer called from inside yours (the drop-ins
`jax_backend.dot_product_attention` and NumPy's included, jitted or not) or pasted in with its docstring;
finite differences (`numeric_gradient`, `gradient_check`) inside your function; and JAX (`jax.grad`,
`jax.vjp`, ...) inside a NumPy backward of notebook 02. The exercise is to write it.

    from reluattn.grading import check_layernorm_backward
    check_layernorm_backward(my_layernorm_backward)   # ✓ layernorm_backward: dx, grads['scale'], ... agree

The checkers of each notebook:

    01 why 1/L                  check_pointwise_weights, check_expected_activation, check_output_variance
    02 backprop by hand         check_dense_backward, check_layernorm_backward, check_gelu_backward,
                                check_softmax_backward, check_attention_weights_backward,
                                check_attention_core_backward, check_self_attention_backward,
                                check_block_backward
    03 the same model in JAX    check_relu_attention, check_attention_vjp (JAX code is graded without
                                importing JAX: NumPy arrays in, np.asarray on what comes back)
    04 training on CIFAR-10     check_accuracy_standard_error, check_attention_rollout
    05 key-value memories       check_memory_read, check_top_share
    06 parallelism              check_blocked_relu_attention, check_online_softmax_attention

Tools for checking your own code: `gradient_check(f, arrays, grads)` and `numeric_gradient(f, x)` (central
differences in float64), `relative_error` and `diagnose`. The reference answers are not exported here.
NumPy only, like the backend it grades.
"""

from .backprop_attention import (check_attention_core_backward, check_attention_weights_backward,
                                 check_block_backward, check_self_attention_backward)
from .backprop_layers import (check_dense_backward, check_gelu_backward, check_layernorm_backward,
                              check_softmax_backward)
from .blocked_attention import check_blocked_relu_attention, check_online_softmax_attention
from .feedback import ExerciseFailed, diagnose
from .finite_differences import gradient_check, numeric_gradient, relative_error
from .jax_attention import check_attention_vjp, check_relu_attention
from .memories import check_memory_read, check_top_share
from .scaling import check_expected_activation, check_output_variance, check_pointwise_weights
from .training import check_accuracy_standard_error, check_attention_rollout

CHECKERS = {
    "01_why_1_over_L": ("check_pointwise_weights", "check_expected_activation", "check_output_variance"),
    "02_backprop_by_hand": ("check_dense_backward", "check_layernorm_backward", "check_gelu_backward",
                            "check_softmax_backward", "check_attention_weights_backward",
                            "check_attention_core_backward", "check_self_attention_backward",
                            "check_block_backward"),
    "03_same_model_in_jax": ("check_relu_attention", "check_attention_vjp"),
    "04_training_on_cifar10": ("check_accuracy_standard_error", "check_attention_rollout"),
    "05_key_value_memories": ("check_memory_read", "check_top_share"),
    "06_parallelism": ("check_blocked_relu_attention", "check_online_softmax_attention"),
}

__all__ = ["CHECKERS", "ExerciseFailed", "diagnose", "gradient_check", "numeric_gradient", "relative_error",
           *(name for names in CHECKERS.values() for name in names)]
