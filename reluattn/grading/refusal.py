"""Refusing reluattn's own implementation, automatic differentiation and finite differences as an answer.

An exercise asks for a function that reluattn already has. A checker that passed reluattn's own function
would grade nothing, so the checkers refuse:

  - any reluattn function passed as the answer (whatever it computes: the exercise is the student's code);
  - reluattn's answer to the exercise called from inside the student's function, including the drop-ins
    (`jax_backend.dot_product_attention`, `attention_fn`, the NumPy reference of it) and every other
    attention entry point for an attention exercise, seen by a trace function on calls while the student's
    code runs (JAX's caches are emptied first, so a jitted call runs its Python again and is seen);
  - a copy of such a function pasted into the notebook, with its docstring: the same bytecode, names and
    docstring under new variable names is recognised (a copy without the docstring, or changed, is not:
    the same answer written independently compiles to the same bytecode, so that is for the rubric);
  - finite differences (`numeric_gradient`, `gradient_check`: the checker's own ground truth) anywhere, and
    any JAX call inside a NumPy backward of notebook 02 (`jax.grad`, `jax.vjp`, ...): the exercise is to
    derive the gradient by hand.

The building blocks an exercise may use (e.g. `layers.softmax` in a memory read, the student's own backward
of a smaller layer, reluattn's config classes) are not refused: only the functions listed as answers are.

    refused_argument(exercise, function)   why `function` may not be passed as the answer, else None
    watching(exercise) as watch            a context in which watch.used says what refused thing was called
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # reluattn/

# Functions that compute an attention output: the answer to every attention-forward exercise.
ATTENTION_FORWARDS = ("heads_attention_forward", "core_forward", "attention_forward", "attention",
                      "blocked_attention_forward", "dense_attention", "blocked_attention", "multi_head_attention",
                      "pallas_attention", "full_attention", "reference_attention", "dot_product_attention",
                      "attention_fn", "_drop_in", "core_attention", "self_attention_forward", "reference_gradients")
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

# The NumPy backwards of notebook 02: derived by hand, so JAX may not run inside them.
NUMPY_BACKWARDS = ("dense_backward", "layernorm_backward", "gelu_backward", "softmax_backward",
                   "attention_weights_backward", "attention_core_backward", "self_attention_backward",
                   "block_backward")
FINITE_DIFFERENCES = ("numeric_gradient", "gradient_check", "best_of_three", "verified_numeric")


def _code_of(function):
    """The code object behind a function (through functools.partial, functools.wraps and jax.jit wrappers,
    bound methods), else None."""
    while isinstance(function, functools.partial):
        function = function.func
    try:
        function = inspect.unwrap(function)
    except (ValueError, TypeError):
        return None
    function = getattr(function, "__func__", function)
    return getattr(function, "__code__", None)


@functools.lru_cache(maxsize=4096)
def _in_package(filename: str) -> bool:
    try:
        return Path(filename).resolve().is_relative_to(PACKAGE)
    except (OSError, ValueError):
        return False


def _fingerprint(code) -> tuple | None:
    """What a pasted copy keeps: the bytecode, the names it loads and the docstring (not the variable names or
    the comments); None for a function without a docstring. The docstring is what tells a paste from the same
    answer written independently, which compiles to the same bytecode when it is the natural one."""
    docstring = code.co_consts[0] if code.co_consts and isinstance(code.co_consts[0], str) else None
    if not docstring or len(docstring) < 20:
        return None
    return code.co_code, code.co_names, docstring


def _answers(exercise: str) -> dict:
    """{id(code): (code, "module.name")} for every loaded reluattn function that answers `exercise`."""
    found = {}
    for module_name, module in list(sys.modules.items()):
        if module is None or not (module_name == "reluattn" or module_name.startswith("reluattn.")):
            continue
        for name in ANSWERS.get(exercise, ()):
            function = getattr(module, name, None)
            code = _code_of(function) if callable(function) else None
            if code is not None and _in_package(code.co_filename):
                defined_in = getattr(inspect.unwrap(function), "__module__", module_name)
                found[id(code)] = (code, f"{defined_in}.{name}")
    return found


def refused_argument(exercise: str, function) -> str | None:
    """Why `function` may not be passed as the answer to `exercise` (one clause), else None."""
    code = _code_of(function)
    if code is None:
        return None
    if _in_package(code.co_filename):
        target = inspect.unwrap(function.func if isinstance(function, functools.partial) else function)
        name = f"{getattr(target, '__module__', 'reluattn')}.{getattr(target, '__qualname__', code.co_name)}"
        return f"you passed reluattn's implementation ({name})"
    pasted = {_fingerprint(known): name for known, name in _answers(exercise).values()}.get(_fingerprint(code))
    if pasted and _fingerprint(code) is not None:
        return f"your function is reluattn's implementation ({pasted}) copied in"
    return None


def _jax_roots() -> tuple:
    """The folders of jax and jaxlib, found without importing them."""
    roots = []
    for name in ("jax", "jaxlib"):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.origin:
            roots.append(Path(spec.origin).resolve().parent)
    return tuple(roots)


class watching:
    """While active, records in `.used` (a clause for the message) the first refused call made while the
    student's code runs: reluattn's answer to `exercise` (called or pasted), finite differences, or JAX
    inside a NumPy backward."""

    def __init__(self, exercise: str):
        self.exercise = exercise
        self.answers = _answers(exercise)
        self.pasted = {_fingerprint(code): name for code, name in self.answers.values()}
        self.pasted.pop(None, None)
        self.jax_roots = _jax_roots() if exercise in NUMPY_BACKWARDS else ()
        self.used = None
        self._seen = {}

    def _verdict(self, code):
        """A clause saying why a call of `code` is refused, or None (memoised per code object)."""
        key = id(code)
        if key in self._seen and self._seen[key][0] is code:
            return self._seen[key][1]
        verdict = None
        hit = self.answers.get(key)
        if hit is not None and hit[0] is code:
            verdict = f"your function calls reluattn's implementation ({hit[1]})"
        elif _in_package(code.co_filename):
            if code.co_name in FINITE_DIFFERENCES and code.co_filename.endswith(("finite_differences.py", "harness.py")):
                verdict = (f"your function calls reluattn.grading's {code.co_name} (finite differences): they are "
                           f"what the checker grades against, so an answer computed with them proves nothing")
        elif self.jax_roots and any(_is_under(code.co_filename, root) for root in self.jax_roots):
            verdict = ("your function runs JAX (jax.grad, jax.vjp or another JAX call): this backward is to be derived "
                       "by hand and written in NumPy, so automatic differentiation is refused here")
        elif _fingerprint(code) in self.pasted:
            verdict = f"your function runs a copy of reluattn's implementation ({self.pasted[_fingerprint(code)]})"
        self._seen[key] = (code, verdict)
        return verdict

    def _trace(self, frame, event, arg):
        # Called on "call" events only (a global trace function); returning None asks for no line events.
        if self.used is None:
            self.used = self._verdict(frame.f_code)

    def __enter__(self):
        jax = sys.modules.get("jax")
        if jax is not None and hasattr(jax, "clear_caches"):
            jax.clear_caches()  # a jitted function called before would run compiled code without Python frames
        self.previous = sys.gettrace()
        sys.settrace(self._trace)
        return self

    def __exit__(self, *exception):
        sys.settrace(self.previous)
        return False


@functools.lru_cache(maxsize=4096)
def _is_under(filename: str, root: Path) -> bool:
    try:
        return Path(filename).resolve().is_relative_to(root)
    except (OSError, ValueError):
        return False
