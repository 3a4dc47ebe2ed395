"""Turning a wrong answer into a message a student can act on.

    diagnose(what, got, expected, factors=..., mistakes=...)   None when right, else one line saying how
                                                                 it is wrong (shape, sign, factor, ...)
    call_student(function, name, *args)                        runs the student's code; a blank left in
                                                                 place becomes an ExerciseFailed
    report(exercise, problems) / passed(exercise, detail)      raise with every problem, or print a tick
"""

from __future__ import annotations

import copy

import numpy as np

from .finite_differences import relative_error

TOLERANCE = 1e-6  # relative error allowed against the float64 reference


class ExerciseFailed(AssertionError):
    """A student's answer is wrong; the message says how."""


def call_student(function, name: str, *args):
    """function(*args) on private copies of the arguments (so a function that writes into a cache cannot
    spoil the reference), turning the usual signs of an unfinished exercise into ExerciseFailed."""
    if not callable(function):
        raise ExerciseFailed(f"{name}: expected a function, got {type(function).__name__}")
    try:
        result = function(*copy.deepcopy(args))
    except NotImplementedError as error:
        raise ExerciseFailed(f"{name} is not written yet: it (or a function it calls) raised NotImplementedError "
                             f"({error}). Replace the `raise NotImplementedError` line with your code.") from error
    except ExerciseFailed:
        raise
    except Exception as error:
        raise ExerciseFailed(f"{name} raised {type(error).__name__}: {error} (the traceback above shows the line)") \
            from error
    if result is None or result is Ellipsis:
        raise ExerciseFailed(f"{name} returned {result!r}: a `...` or a missing `return` is still in it")
    return result


def _named_factor(ratio: float, factors: dict) -> str:
    for description, value in factors.items():
        if value != 0 and abs(ratio / value - 1.0) < 1e-6:
            return f" — that is {description}"
    return ""


def diagnose(what: str, got, expected, *, factors: dict | None = None, mistakes: dict | None = None,
             tolerance: float = TOLERANCE) -> str | None:
    """None when `got` equals `expected` to `tolerance` (relative to the largest expected entry);
    otherwise a one-line description of the difference.

    factors:  {description: value}, constants a wrong answer may be off by (named when it is)
    mistakes: {message: array}, what a known wrong derivation gives (the message is used when it matches)
    """
    expected = np.asarray(expected, dtype=np.float64)
    if got is None or got is Ellipsis:
        return f"{what} is {got!r}: nothing was computed for it"
    try:
        got = np.asarray(got, dtype=np.float64)
    except (TypeError, ValueError):
        return f"{what} should be an array of numbers, got {type(got).__name__}"
    if got.shape != expected.shape:
        return f"{what} has shape {got.shape}, expected {expected.shape}{_shape_hint(got.shape, expected.shape)}"
    if not np.all(np.isfinite(got)):
        return f"{what} contains NaN or inf ({int(np.sum(~np.isfinite(got)))} of {got.size} entries)"
    if relative_error(got, expected) <= tolerance:
        return None
    for message, wrong in (mistakes or {}).items():
        if np.shape(wrong) == got.shape and relative_error(got, wrong) <= tolerance:
            return f"{what}: {message}"
    if not np.any(got) and np.any(expected):
        return f"{what} is all zeros, but the right answer is not"
    norm = float(np.sum(expected * expected))
    if norm > 0:
        ratio = float(np.sum(got * expected)) / norm
        if relative_error(got, ratio * expected) <= tolerance:
            if abs(ratio + 1.0) < 1e-6:
                return f"{what} has the wrong sign: every entry is the negative of the right one"
            return (f"{what} is off by a constant factor: it is {ratio:.6g} times the right answer"
                    f"{_named_factor(ratio, factors or {})}")
    worst = np.unravel_index(np.argmax(np.abs(got - expected)), got.shape) if got.ndim else ()
    scale = max(float(np.max(np.abs(expected))), 1e-300)
    wrong_entries = int(np.sum(np.abs(got - expected) > tolerance * scale))
    where = f" at index {tuple(int(i) for i in worst)}" if got.ndim else ""
    return (f"{what} is wrong (relative error {relative_error(got, expected):.2g}; {wrong_entries} of {got.size} "
            f"entries differ); e.g.{where} got {got[worst]:.6g}, expected {expected[worst]:.6g}")


def _shape_hint(got: tuple, expected: tuple) -> str:
    if len(got) >= 2 and got == expected[:-2] + expected[-2:][::-1]:
        return " — it looks transposed: check which side of the product each factor goes on"
    if len(got) > len(expected) and got[len(got) - len(expected):] == expected:
        return (" — it has extra leading axes: a parameter used at every position gets the sum of the "
                "gradients from all of them (sum over the batch and token axes)")
    if len(got) < len(expected) and expected[len(expected) - len(got):] == got:
        return " — leading axes are missing: this is a per-example quantity, keep the batch axes"
    if int(np.prod(got)) == int(np.prod(expected)):
        return " — the same number of entries in another layout: check the reshapes and transposes"
    return ""


def report(exercise: str, problems: list) -> None:
    """Raise ExerciseFailed listing every problem (nothing when the list is empty)."""
    problems = [problem for problem in problems if problem]
    if problems:
        lines = "\n".join(f"  - {problem}" for problem in problems)
        raise ExerciseFailed(f"{exercise}: {len(problems)} problem{'s' if len(problems) > 1 else ''}\n{lines}")


def passed(exercise: str, detail: str) -> None:
    print(f"\N{CHECK MARK} {exercise}: {detail}")
