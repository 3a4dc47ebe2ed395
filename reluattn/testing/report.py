"""Comparing one array against the reference, entry by entry, and saying where it is worst.

    problem = compare(what, got, expected, allowed, axes=("batch", "query", "head", "feature"))
    # None when every |got - expected| <= allowed; else a multi-line report of the worst entry:
    # where it is, what was expected, what came, the allowance, how many entries are out, and a hint
    # when the whole array is off by one named factor (sqrt(Dh), L^(1 - alpha), ...).

`MismatchError` (an AssertionError) carries the report as its message. For trees of arrays (parameters,
gradients, optimizer moments; dicts and lists as reluattn.params.flatten walks them):

    assert_trees_close(got, expected, rtol)    every leaf within rtol of its expected leaf's largest entry
    compare_trees(what, got, expected, ...)    the reports behind it (None per matching leaf)
    relative_error(got, expected)              one number: max |got - expected| / max(max |got|, max |expected|)
"""

from __future__ import annotations

import numpy as np

from ..grading.finite_differences import relative_error as _relative_error
from ..params import flatten


class MismatchError(AssertionError):
    """An implementation disagrees with the reference; the message says where, by how much, and on what."""


def _where(index, axes) -> str:
    if axes and len(axes) == len(index):
        return ", ".join(f"{axis} {i}" for axis, i in zip(axes, index))
    return "index " + str(tuple(int(i) for i in index))


def _factor_hint(got, expected, factors) -> str:
    """' -- got = F x expected everywhere (F = name)' when one factor explains the whole difference."""
    norm = float(np.sum(expected * expected))
    if norm == 0.0 or not np.all(np.isfinite(got)):
        return ""
    ratio = float(np.sum(got * expected)) / norm
    if np.linalg.norm(got - ratio * expected) > 1e-3 * np.sqrt(norm) or abs(ratio - 1.0) < 1e-3:
        return ""
    names = [name for name, value in (factors or {}).items() if value != 0 and abs(ratio / value - 1.0) < 1e-3]
    named = f" = {' = '.join(names)}" if names else ""
    return f"\n  the whole array is got = {ratio:.6g} x expected{named}"


def compare(what: str, got, expected, allowed, *, axes=(), context: str = "", factors=None) -> str | None:
    """None when `got` matches, else the report (see the module docstring). `allowed` broadcasts against
    `expected` (per-entry allowance, or one number); `context` says which case was drawn."""
    expected = np.asarray(expected, dtype=np.float64)
    suffix = f"\n  case: {context}" if context else ""
    try:
        got = np.asarray(got).astype(np.float64)
    except (TypeError, ValueError):
        return f"{what}: expected an array of numbers, got {type(got).__name__}{suffix}"
    if got.shape != expected.shape:
        return f"{what}: shape {got.shape}, expected {expected.shape} (axes: {', '.join(axes) or '?'}){suffix}"
    allowed = np.broadcast_to(np.asarray(allowed, dtype=np.float64), expected.shape)
    finite = np.isfinite(got)
    if not np.all(finite):
        index = np.unravel_index(int(np.argmin(finite)), got.shape)
        return (f"{what}: {got.size - int(finite.sum())} of {got.size} entries are NaN or infinite (an overflow?); "
                f"the first at {_where(index, axes)}: expected {expected[index]:.9g}, got {got[index]}{suffix}")
    difference = np.abs(got - expected)
    outside = difference > allowed
    if not np.any(outside):
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        excess = np.where(outside, difference / np.maximum(allowed, np.finfo(np.float64).tiny), 0.0)
    index = np.unravel_index(int(np.argmax(excess)), got.shape)
    return (f"{what}: {int(outside.sum())} of {got.size} entries differ from the reference beyond the tolerance; "
            f"worst at {_where(index, axes)}:\n"
            f"  expected {expected[index]:.9g}, got {got[index]:.9g}, |difference| {difference[index]:.3g} "
            f"> allowed {allowed[index]:.3g}" + _factor_hint(got, expected, factors) + suffix)


def raise_problems(problems, header: str = "") -> None:
    """Raise MismatchError with every non-None report in `problems` (nothing when all are None)."""
    problems = [problem for problem in problems if problem]
    if problems:
        raise MismatchError("\n".join(([header] if header else []) + problems))


def relative_error(got, expected) -> float:
    """max |got - expected| / max(max |got|, max |expected|), each array judged against its own scale (an
    entry-wise ratio is noise where an entry is ~0): reluattn.grading's measure, for two arrays (anything
    np.asarray takes, JAX arrays too) of one size."""
    got, expected = np.asarray(got), np.asarray(expected)
    if got.size != expected.size:
        raise ValueError(f"relative_error compares arrays of one size; got shapes {got.shape} and {expected.shape}")
    return _relative_error(got, expected)


def compare_trees(what: str, got, expected, *, rtol=None, allowed=None, floor=0.0, context: str = "") -> list:
    """One report (None where it matches) per leaf of `expected`, each leaf of `got` within `allowed` (a tree
    like `expected`) or, without it, rtol times the largest |entry| of its expected leaf, plus `floor`.
    A first report names the leaves missing or unexpected, when the two trees' leaves differ."""
    got, expected = flatten(got), flatten(expected)
    if sorted(got) != sorted(expected):
        return [f"{what}: the leaves differ: missing {sorted(set(expected) - set(got))}, "
                f"unexpected {sorted(set(got) - set(expected))}"]
    if allowed is None:
        allowed = {path: rtol * np.max(np.abs(np.asarray(leaf, np.float64)), initial=0.0) + floor
                   for path, leaf in expected.items()}
    else:
        allowed = flatten(allowed)
    return [compare(f"{what} {path}", got[path], expected[path], allowed[path], context=context)
            for path in sorted(expected)]


def assert_trees_close(got, expected, rtol: float, what: str = "tree") -> None:
    """Raise MismatchError, reporting the worst entry of each leaf that is out, unless both trees have the
    same leaves and every leaf is within rtol of the largest |entry| of its expected leaf."""
    raise_problems(compare_trees(what, got, expected, rtol=rtol), f"{what}: leaves beyond rtol {rtol:g} of their "
                                                                  f"largest entry:")
