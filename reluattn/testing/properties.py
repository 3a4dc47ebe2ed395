"""One line in a test file runs a whole property suite: test functions for pytest (or any runner).

    # test_my_attention.py
    import reluattn.testing as rt
    test_forward = rt.attention_property_test(my_attention, kinds=["relu", "softmax"])
    test_gradients = rt.attention_grad_property_test(my_attention, kinds=["relu"])
    test_tiles = rt.blocked_property_test(my_tiled_attention)
    test_backend = rt.backend_property_test(my_backend)

Each returns a function without arguments that runs the check and raises its report; pytest collects it
under the name it is assigned to. Keyword arguments are those of the check.
"""

from __future__ import annotations

from .backend_checks import check_backend
from .checks import check_attention, check_attention_grad, check_blocked


def _property_test(check, subject, options, what):
    def test():
        check(subject, **options)
    name = getattr(subject, "__name__", type(subject).__name__)
    test.__name__ = f"test_{what}_of_{name}"
    test.__doc__ = f"reluattn.testing.{check.__name__}({name}, **{options!r})"
    return test


def attention_property_test(fn, **options):
    """A test running check_attention(fn, **options)."""
    return _property_test(check_attention, fn, options, "attention")


def attention_grad_property_test(fn=None, **options):
    """A test running check_attention_grad(fn, **options) (give vjp= in options for a non-JAX fn)."""
    return _property_test(check_attention_grad, fn, options, "attention_gradients")


def blocked_property_test(fn, **options):
    """A test running check_blocked(fn, **options)."""
    return _property_test(check_blocked, fn, options, "blocked_attention")


def backend_property_test(module, **options):
    """A test running check_backend(module, **options)."""
    return _property_test(check_backend, module, options, "backend")
