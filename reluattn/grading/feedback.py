"""Turning a wrong answer into a message a student can act on.

    diagnose(what, got, expected, factors=..., mistakes=...)   None when right, else one line saying how
                                                                 it is wrong (shape, sign, factor, ...)
    call_student(function, name, *args)                        runs the student's code; a blank left in
                                                                 place, an error in it, or reluattn's own
                                                                 function in its place becomes an
                                                                 ExerciseFailed
    report(exercise, problems, hint) / passed(exercise, detail)  raise with every problem, or print a tick
    checker                                                    decorator of every public checker: a failure
                                                                 is one short message, with no traceback
                                                                 through the grader

A message the grader cannot explain (no known slip, factor or shape matches) is an `Unrecognised` string;
`report` then adds the exercise's hint, which says what to re-derive.
"""

from __future__ import annotations

import copy
import functools
import sysconfig
import traceback
from pathlib import Path

import numpy as np

from .finite_differences import relative_error
from .refusal import refused_argument, watching

TOLERANCE = 1e-6  # relative error allowed against the float64 reference
PACKAGE = Path(__file__).resolve().parents[1]  # reluattn/


class ExerciseFailed(AssertionError):
    """A student's answer is wrong; the message says how."""

    def _render_traceback_(self) -> list:
        """What IPython and Jupyter show for it: the message alone, without a traceback."""
        return [f"\x1b[0;31m{type(self).__name__}\x1b[0m: {self}"]


class Unrecognised(str):
    """A diagnosis that names no known mistake (the exercise's hint is added to it)."""


def _where(error: BaseException) -> str:
    """' (in f, line 3: `x = a @ b`)' for the innermost frame of the student's code (not of reluattn or an
    installed library), without file paths."""
    libraries = [Path(path).resolve() for path in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["stdlib"]}]
    frames = [frame for frame in traceback.extract_tb(error.__traceback__)
              if not any(Path(frame.filename).resolve().is_relative_to(root) for root in [PACKAGE, *libraries])]
    if not frames:
        return ""
    frame = frames[-1]
    line = f": `{frame.line.strip()}`" if frame.line else ""
    return f" (in {frame.name}, line {frame.lineno}{line})"


def _refuse_if_called(name: str, watch) -> None:
    if watch.used:
        raise ExerciseFailed(f"{name}: {watch.used}; the exercise is to write it yourself")


def call_student(function, name: str, *args):
    """function(*args) on private copies of the arguments (so a function that writes into a cache cannot
    spoil the reference), turning the usual signs of an unfinished exercise, and reluattn's own answer passed
    or called in its place, into ExerciseFailed."""
    if not callable(function):
        raise ExerciseFailed(f"{name}: expected a function, got {type(function).__name__}")
    own = refused_argument(name, function)
    if own:
        raise ExerciseFailed(f"{name}: {own}; the exercise is to write it yourself — pass your own function")
    watch = watching(name)
    try:
        with watch:
            result = function(*copy.deepcopy(args))
    except ExerciseFailed:
        raise
    except Exception as error:
        _refuse_if_called(name, watch)
        if isinstance(error, NotImplementedError):
            raise ExerciseFailed(f"{name} is not written yet: it (or a function it calls) raised NotImplementedError "
                                 f"({error}). Replace the `raise NotImplementedError` line with your code.") from None
        shapes = isinstance(error, ValueError) and ("shape" in str(error) or "matmul" in str(error))
        advice = (" — the shapes of a product or a broadcast do not fit: check which factor needs a transpose and "
                  "which axis a sum runs over") if shapes else ""
        raise ExerciseFailed(f"{name} raised {type(error).__name__}: {error}{_where(error)}{advice}") from None
    _refuse_if_called(name, watch)
    if result is None or result is Ellipsis:
        raise ExerciseFailed(f"{name} returned {result!r}: a `...` or a missing `return` is still in it")
    return result


def checker(function):
    """Decorator of a public checker: an ExerciseFailed raised anywhere inside it is raised again from here,
    without its chain of grader frames (Jupyter shows it as its message alone, see ExerciseFailed)."""
    @functools.wraps(function)
    def run(*args, **kwargs):
        __tracebackhide__ = True  # pytest hides this frame
        try:
            return function(*args, **kwargs)
        except ExerciseFailed as failure:
            message = str(failure)
        raise ExerciseFailed(message)
    return run


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
            named = _named_factor(ratio, factors or {})
            message = f"{what} is off by a constant factor: it is {ratio:.6g} times the right answer{named}"
            return message if named else Unrecognised(message)
    worst = np.unravel_index(np.argmax(np.abs(got - expected)), got.shape) if got.ndim else ()
    scale = max(float(np.max(np.abs(expected))), 1e-300)
    wrong_entries = int(np.sum(np.abs(got - expected) > tolerance * scale))
    where = f" at index {tuple(int(i) for i in worst)}" if got.ndim else ""
    return Unrecognised(f"{what} is wrong (relative error {relative_error(got, expected):.2g}; {wrong_entries} of "
                        f"{got.size} entries differ); e.g.{where} got {got[worst]:.6g}, expected {expected[worst]:.6g}")


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


def report(exercise: str, problems: list, hint: str | None = None) -> None:
    """Raise ExerciseFailed listing every problem (nothing when the list is empty); when one of them names
    no known mistake, `hint` (what to re-derive or look at) follows the list."""
    problems = [problem for problem in problems if problem]
    if problems:
        lines = "\n".join(f"  - {problem}" for problem in problems)
        if hint and any(isinstance(problem, Unrecognised) for problem in problems):
            lines += f"\n  hint: {hint}"
        raise ExerciseFailed(f"{exercise}: {len(problems)} problem{'s' if len(problems) > 1 else ''}\n{lines}")


def passed(exercise: str, detail: str) -> None:
    print(f"\N{CHECK MARK} {exercise}: {detail}")
