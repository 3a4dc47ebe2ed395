"""One line of an autograder's test: run a checker quietly, True when the answer passes.

The class autograder (course/make_course.py, otter-grader) grades each exercise with doctests such as

    >>> from reluattn.grading.autograde import passes
    >>> passes("check_dense_backward", dense_backward, seed=48213)
    True

A wrong or refused answer prints the checker's message (what the student reads in the grading report) and
gives False; a checker without a `seed` argument is run as the student ran it.
"""

from __future__ import annotations

import contextlib
import inspect
import io

from . import CHECKERS
from .feedback import ExerciseFailed

KNOWN = {name for names in CHECKERS.values() for name in names}


def passes(checker: str, function, seed: int = 0) -> bool:
    """True when reluattn.grading.<checker> accepts `function` for this seed; else False, its message printed."""
    if checker not in KNOWN:
        raise ValueError(f"no checker {checker!r} in reluattn.grading (known: {', '.join(sorted(KNOWN))})")
    from .. import grading
    check = getattr(grading, checker)
    arguments = {"seed": seed} if "seed" in inspect.signature(check).parameters else {}
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            check(function, **arguments)
    except ExerciseFailed as failure:
        print(failure)
        return False
    return True
