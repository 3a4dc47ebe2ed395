"""Property-test your own attention, backend or kernel against reluattn's float64 NumPy reference.

    import reluattn.testing as rt
    rt.check_attention(my_attention, kinds=["relu", "softmax"])      # raises AssertionError with a report
    rt.check_attention_grad(my_attention, kinds=["relu"])            # gradients (jax.vjp, or vjp=...)
    rt.check_blocked(my_tiled_attention)                             # block sizes and causal masks
    rt.check_dot_product_attention(my_attention_fn)                  # jax.nn's signature: masks, bias, GQA, ...
    rt.check_backend(my_backend_module)                              # apply, loss_and_grad, train_step, ...
    test_my_attention = rt.attention_property_test(my_attention)     # the same as one line in a test file
    rt.assert_trees_close(my_grads, reference_grads, rtol=1e-8)     # trees of arrays, leaf by leaf
    @settings(rt.compiling, max_examples=10)                         # hypothesis settings for compiled code

Every check is deterministic by default: fixed edge cases first (edge_cases.py), then the same draws on every
run (settings `deterministic`); seed= draws others.

Files: strategies.py (hypothesis strategies), checks.py (the attention checks, `compiling`), edge_cases.py (the
fixed cases run first), dot_product_checks.py (check_dot_product_attention), backend_checks.py
(check_backend), tolerances.py (the tolerance of each dtype and why), report.py (the worst-entry report,
trees, relative_error), precision.py (reduced-precision compute against float32), properties.py (pytest
one-liners), reference.py (the only file that imports the backends).

Needs hypothesis: `pip install "reluattn[testing]"`. `import reluattn` itself does not.
"""

try:
    import hypothesis  # noqa: F401
except ImportError:
    raise ImportError('reluattn.testing needs hypothesis, which is not installed: pip install "reluattn[testing]" '
                      '(or pip install hypothesis)') from None

from .backend_checks import check_backend, compare_backend
from .checks import (check_attention, check_attention_grad, check_blocked, compare_attention, compiling,
                     deterministic)
from .dot_product_checks import DotProductCase, check_dot_product_attention, compare_dot_product
from .edge_cases import edge_cases, edge_inputs
from .precision import FLOAT32_CONDITION_FACTOR, ILL_CONDITIONED_DRAW, compute_dtype_errors, float32_against_exact
from .properties import (attention_grad_property_test, attention_property_test, backend_property_test,
                         blocked_property_test)
from .report import MismatchError, assert_trees_close, compare_trees, relative_error
from .strategies import (INPUT_PROFILES, AttentionCase, AttentionInputs, AttentionShape, attention_cases,
                         attention_configs, attention_inputs, attention_shapes, image_batches, make_batch,
                         make_inputs, make_parameters, optimizer_configs, vit_configs, vit_parameters)
from .tolerances import TOLERANCES, Tolerance, tolerance_for

__all__ = [
    "check_attention", "check_attention_grad", "check_dot_product_attention", "compare_dot_product",
    "DotProductCase", "deterministic", "edge_cases", "edge_inputs", "check_blocked", "check_backend", "compare_attention",
    "compare_backend", "compiling", "attention_property_test", "attention_grad_property_test",
    "blocked_property_test", "backend_property_test", "MismatchError", "assert_trees_close", "compare_trees",
    "relative_error", "compute_dtype_errors", "float32_against_exact", "FLOAT32_CONDITION_FACTOR", "ILL_CONDITIONED_DRAW", "INPUT_PROFILES", "AttentionCase", "AttentionInputs", "AttentionShape",
    "attention_cases", "attention_configs", "attention_inputs", "attention_shapes", "image_batches", "make_batch",
    "make_inputs", "make_parameters", "optimizer_configs", "vit_configs", "vit_parameters", "TOLERANCES",
    "Tolerance", "tolerance_for",
]
