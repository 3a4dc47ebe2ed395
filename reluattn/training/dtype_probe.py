"""`--compute-dtype auto`: float32 or bfloat16 matmuls, whichever this machine runs faster, from a short probe.

bfloat16 halves the bytes a matmul moves, but on a CPU it is faster only where the hardware has bfloat16
units XLA uses (AMX on recent Xeons): on the 2-core AMD EPYC this project is developed on, a bfloat16
training step was no faster than a float32 one. So the choice is measured, not assumed: the probe times the
model's largest matmul (tokens x width times width x 3 width, forward and backward shapes alike) in both
dtypes, a few repeats each after a warm-up, and keeps the faster. The run records what it picked in its
config (so `--resume` continues with it) and prints the probe's timings.
"""

from __future__ import annotations

import time

REPEATS = 5


def _seconds(matmul, a, b) -> float:
    matmul(a, b).block_until_ready()  # compile and warm up
    best = float("inf")
    for _ in range(REPEATS):
        started = time.perf_counter()
        matmul(a, b).block_until_ready()
        best = min(best, time.perf_counter() - started)
    return best


def probe_compute_dtype(batch: int, tokens: int, dim: int) -> tuple[str, dict]:
    """("float32" | "bfloat16", {dtype: seconds}) for a (batch*tokens, dim) @ (dim, 3*dim) matmul."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    if jax.default_backend() != "cpu":  # GPUs and TPUs: bfloat16 has its own units there
        return "bfloat16", {}
    rng = np.random.default_rng(0)
    a = rng.standard_normal((batch * tokens, dim), dtype=np.float32)  # (B*T, D)
    b = rng.standard_normal((dim, 3 * dim), dtype=np.float32)  # (D, 3D)
    timings = {}
    for name, dtype in (("float32", jnp.float32), ("bfloat16", jnp.bfloat16)):
        matmul = jax.jit(lambda x, y, dtype=dtype: jnp.dot(x.astype(dtype), y.astype(dtype),
                                                           preferred_element_type=jnp.float32))
        timings[name] = _seconds(matmul, jnp.asarray(a), jnp.asarray(b))
    return min(timings, key=timings.get), timings


__all__ = ["probe_compute_dtype"]
