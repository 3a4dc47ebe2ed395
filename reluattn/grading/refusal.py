"""Refusing reluattn's own implementation as an answer.

An exercise asks for a function that reluattn already has. A checker that passed reluattn's own function
would grade nothing, so the checkers refuse it, whether it is passed directly or called from inside the
student's function (seen by a trace function on calls while the student's code runs). Functions are recognised by
their code object, found by name in the reluattn modules that are loaded, so a function keeps being
recognised when it moves to another module. The building blocks an exercise may use (e.g. `layers.softmax`
in a memory read, the student's own backward of a smaller layer) are allowed: only the functions that are
the answer are listed.

    watching(exercise) as watch    a context in which watch.used names the first refused function called
    refused(exercise, function)    the refused function `function` is (or wraps), else None
"""

from __future__ import annotations

import inspect
import sys

# Functions that compute an attention output: the answer to every attention-forward exercise.
ATTENTION_FORWARDS = ("heads_attention_forward", "core_forward", "attention_forward", "attention",
                      "blocked_attention_forward", "dense_attention", "blocked_attention", "multi_head_attention",
                      "pallas_attention", "full_attention", "reference_attention")
ATTENTION_BACKWARDS = ("heads_attention_backward", "core_backward", "attention_backward")

# {exercise: names of reluattn functions that are its answer}
ANSWERS = {
    "pointwise_weights": ("pointwise_weights", "attention_weights_forward", "causal_attention_weights_forward",
                          "length_factor", "attention_weights"),
    "expected_activation": ("expected_activation",),
    "output_variance": ("output_variance",),
    "dense_backward": ("dense_backward",),
    "layernorm_backward": ("layernorm_backward",),
    "gelu_backward": ("gelu_backward", "gelu_derivative"),
    "softmax_backward": ("softmax_backward",),
    "attention_weights_backward": ("attention_weights_backward", "causal_attention_weights_backward"),
    "attention_core_backward": ATTENTION_BACKWARDS,
    "self_attention_backward": ("self_attention_backward",),
    "block_backward": ("block_backward",),
    "relu_attention": ("relu_attention", *ATTENTION_FORWARDS),
    "attention_vjp": ("attention_vjp", *ATTENTION_FORWARDS, *ATTENTION_BACKWARDS),
    "accuracy_standard_error": ("accuracy_standard_error",),
    "attention_rollout": ("attention_rollout",),
    "memory_read": ("memory_read",),
    "top_share": ("top_share",),
    "blocked_relu_attention": ("blocked_relu_attention", *ATTENTION_FORWARDS),
    "online_softmax_attention": ("online_softmax_attention", *ATTENTION_FORWARDS),
}


def _code_of(function):
    """The code object behind a function (through functools.wraps and jax.jit wrappers), else None."""
    try:
        function = inspect.unwrap(function)
    except (ValueError, TypeError):
        return None
    return getattr(function, "__code__", None)


def _answers(exercise: str) -> dict:
    """{id(code): (code, "module.name")} for every loaded reluattn function that answers `exercise`."""
    found = {}
    for module_name, module in list(sys.modules.items()):
        if module is None or not (module_name == "reluattn" or module_name.startswith("reluattn.")):
            continue
        for name in ANSWERS.get(exercise, ()):
            function = getattr(module, name, None)
            code = _code_of(function) if callable(function) else None
            defined_in = getattr(inspect.unwrap(function), "__module__", "") if code is not None else ""
            if code is not None and defined_in.startswith("reluattn."):
                found[id(code)] = (code, f"{defined_in}.{name}")
    return found


def refused(exercise: str, function) -> str | None:
    """"module.name" when `function` is (or wraps) reluattn's own answer to `exercise`, else None."""
    code = _code_of(function)
    hit = _answers(exercise).get(id(code))
    return hit[1] if hit is not None and hit[0] is code else None


class watching:
    """While active, records in `.used` the first reluattn answer to `exercise` that gets called."""

    def __init__(self, exercise: str):
        self.answers = _answers(exercise)
        self.used = None

    def _trace(self, frame, event, arg):
        # Called on "call" events only (a global trace function); returning None asks for no line events.
        if self.used is None:
            hit = self.answers.get(id(frame.f_code))
            if hit is not None and hit[0] is frame.f_code:
                self.used = hit[1]

    def __enter__(self):
        self.previous = sys.gettrace()
        if self.answers:
            sys.settrace(self._trace)
        return self

    def __exit__(self, *exception):
        sys.settrace(self.previous)
        return False
