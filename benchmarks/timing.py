"""The one timer of the benchmark scripts: wall-clock seconds of calls that wait for their result.

    seconds = timed(call)                               # one call
    best, median = time_calls({"a": f, "b": g}, 10)["a"]  # interleaved rounds after a warm-up call each
    best = best_seconds(call, 10)                       # min over calls (no warm-up)

Every call passed in must block until its work is done (jax.block_until_ready for JAX), or the timer
measures dispatch only. The minimum is the estimate of an op's cost on a shared machine (load only ever
adds time); the median says how much the runs moved.
"""

from __future__ import annotations

import statistics
import time


def timed(call) -> float:
    """Seconds one call of `call()` took."""
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def time_calls(calls: dict, repeats: int, warmup: int = 1) -> dict:
    """{name: (min, median) seconds} of each call over `repeats` rounds after `warmup` calls each. The
    rounds interleave the calls (a, b, c, a, b, c, ...), so a burst of load from another job on a shared
    machine slows one round of every row rather than all the repeats of one row."""
    for call in calls.values():
        for _ in range(warmup):
            call()
    times = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            times[name].append(timed(call))
    return {name: (min(values), statistics.median(values)) for name, values in times.items()}


def best_seconds(call, calls: int) -> float:
    """The fastest of `calls` calls (warm up first where compilation or caches matter)."""
    return min(timed(call) for _ in range(calls))


def median_seconds(call, repeats: int, warmup: int = 3) -> float:
    """The median of `repeats` calls after `warmup` untimed ones."""
    for _ in range(warmup):
        call()
    return statistics.median(timed(call) for _ in range(repeats))
