"""The shared routine behind every backward checker: verify the reference against finite differences,
run the student's function, compare every gradient it returns, and say exactly what is wrong.
"""

from __future__ import annotations

import numpy as np

from .feedback import ExerciseFailed, diagnose, passed, report
from .finite_differences import TOLERANCE, best_of_three, numeric_gradient, relative_error


def named_leaves(tree, prefix: str) -> dict:
    """{"grads['qkv']['w']": array, ...} for a nested dict; a non-dict is one leaf named `prefix`."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    leaves = {}
    for key in tree:
        leaves.update(named_leaves(tree[key], f"{prefix}[{key!r}]"))
    return leaves


def verified_numeric(loss, arrays: dict, reference: dict, what: str) -> dict:
    """Finite-difference gradients of loss() for each named float64 array in `arrays`, after checking that
    reluattn's own gradients (`reference`, named alike) agree with them: a disagreement is a bug in
    reluattn, not in the student's answer."""
    def measured(name):  # (relative error against the reference, the finite differences)
        numeric = numeric_gradient(loss, arrays[name])
        return relative_error(reference[name], numeric), numeric

    results = {name: best_of_three(lambda: measured(name)) for name in arrays}  # again while over TOLERANCE
    numeric = {name: found for name, (_, found) in results.items()}
    bad = {name: error for name, (error, _) in results.items() if error > TOLERANCE}
    if bad:
        raise RuntimeError(f"reluattn's reference {what} disagrees with finite differences ({bad}); please report it")
    return numeric


def grade(exercise: str, student: dict, reference: dict, numeric: dict, *, factors=None, mistakes=None,
          hints=None, hint: str | None = None, announce: bool = True) -> dict:
    """Compare the student's named arrays with the reference ones; raise ExerciseFailed listing every
    problem, or print a tick and return {name: relative error against finite differences}.

    mistakes: {name: {message: wrong array}} known wrong answers for one output
    hints:    callable(set of wrong names) -> list of extra lines (e.g. which branch of a block is off)
    hint:     what to re-derive, shown when a problem names no known mistake
    """
    problems = []
    for name in student:
        if name not in reference:
            problems.append(f"{name} is not expected here (expected only {', '.join(reference)})")
    wrong = set()
    for name, expected in reference.items():
        if name not in student:
            problems.append(f"{name} is missing")
            wrong.add(name)
            continue
        message = diagnose(name, student[name], expected, factors=factors, mistakes=(mistakes or {}).get(name))
        if message:
            problems.append(message)
            wrong.add(name)
    if wrong and hints is not None:
        problems += hints(wrong)
    report(exercise, problems, hint)
    errors = {name: relative_error(student[name], numeric[name]) for name in numeric}
    if announce:
        names = list(reference)
        what = ", ".join(names) if len(names) <= 4 else f"{names[0]} and all {len(names) - 1} parameter gradients"
        passed(exercise, f"{what} agree with reluattn's backward and with finite differences "
                         f"(largest relative error {max(errors.values()):.1e})")
    return errors


def unpack_pair(exercise: str, result, first: str, grads_names: str):
    """A backward that returns (dx, grads): check the pair's form and name its leaves."""
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        kind = type(result).__name__ + (f" of length {len(result)}" if isinstance(result, (tuple, list)) else "")
        raise ExerciseFailed(f"{exercise} should return a pair ({first}, {grads_names}); got a {kind}")
    dx, grads = result
    return {first: dx, **named_leaves(grads, "grads")}


def avoid_kinks(make_scores, seed: int, margin: float = 1e-3, tries: int = 100):
    """Draw inputs with make_scores(rng) -> (inputs, scores) until no score lies within `margin` of relu's
    kink at 0, where finite differences would be meaningless."""
    for attempt in range(tries):
        inputs, scores = make_scores(np.random.default_rng(seed + 1000 * attempt))
        if np.min(np.abs(scores)) > margin:
            return inputs
    raise RuntimeError("could not draw inputs away from relu's kink")
