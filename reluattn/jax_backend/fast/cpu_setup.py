"""Process settings that make XLA fast on CPU: `configure()`, called by the trainer and the CLI (never on
import; importing this module changes nothing).

XLA:CPU allocates all of a jitted program's intermediate arrays as one block per call (about 0.5-0.7 GB
for a training step of the reference ViT). glibc's malloc hands a block that large straight to the kernel
(mmap) and gives it back on free, so every call touches fresh pages: on the reference model that was
~170,000 page faults and a quarter of the CPU time of each step spent in the kernel zeroing memory
(docs/performance.md, "The ViT training step on CPU" > "What made it faster": malloc keeps XLA's
per-call scratch memory). Asking malloc to serve large blocks from its heap and keep them reuses the block.

    RELUATTN_CPU_SETUP=0     leave the process alone (nothing below is done)

What is done, on Linux with glibc only, before any JAX backend exists (afterwards XLA's threads have
their own malloc arenas and changing the settings would not reach them), and only for settings the user
has not chosen through glibc's environment variables (MALLOC_ARENA_MAX, MALLOC_MMAP_MAX_,
MALLOC_TRIM_THRESHOLD_, MALLOC_TOP_PAD_): one malloc arena shared by all threads, no mmap for large
blocks, no returning of freed heap memory to the system, and heap growth in 64 MiB steps. The cost:
memory freed by the process is kept for reuse rather than returned to the system, so its resident size
stays at its peak. The trainer calls configure() before it loads data, since decoding images starts
threads, and settings made after that do not reach every thread.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

# glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_MAX, M_ARENA_MAX = -1, -2, -4, -8
NEVER_TRIM = 2**31 - 1  # the largest value mallopt takes
TOP_PAD = 64 * 2**20  # grow the heap in 64 MiB steps, so small arrays placed after a freed block don't
                      # leave it a little too small for the next call's block

applied: dict[str, int] = {}  # what configure() changed, for inspection and tests
_hinted: list[bool] = []       # whether the one-time hint below was given

HINT = ("reluattn: the fast path runs on CPU without its malloc set-up, which made the reference ViT's training "
        "step about 1.5x faster (docs/jax_backend.md). Call reluattn.jax_backend.fast.cpu_setup.configure() "
        "first thing in your script, before JAX computes anything (the trainer does); set RELUATTN_CPU_SETUP=0 "
        "to leave malloc alone and silence this.")


def configure() -> dict:
    """Apply the settings above unless opted out, already done, or too late. Returns what was applied."""
    if applied or os.environ.get("RELUATTN_CPU_SETUP", "1") == "0":
        return applied
    try:  # private, but the only way to ask whether a backend already exists; if it moves, do nothing
        from jax._src.xla_bridge import backends_are_initialized
        if backends_are_initialized():
            return applied
    except (ImportError, AttributeError):
        return applied
    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        _keep_large_blocks_in_malloc()
    return applied


def hint_if_not_configured() -> None:
    """Warn once (a UserWarning) when fast code runs on a glibc Linux CPU without configure() having applied
    its settings, unless RELUATTN_CPU_SETUP=0 says the user chose so. Cheap after the first call."""
    if _hinted or applied or os.environ.get("RELUATTN_CPU_SETUP", "1") == "0":
        return
    _hinted.append(True)
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return
    import warnings

    import jax
    if jax.default_backend() == "cpu":
        warnings.warn(HINT, UserWarning, stacklevel=3)


def _keep_large_blocks_in_malloc() -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    settings = {"MALLOC_ARENA_MAX": (M_ARENA_MAX, 1), "MALLOC_MMAP_MAX_": (M_MMAP_MAX, 0),
                "MALLOC_TRIM_THRESHOLD_": (M_TRIM_THRESHOLD, NEVER_TRIM), "MALLOC_TOP_PAD_": (M_TOP_PAD, TOP_PAD)}
    for variable, (parameter, value) in settings.items():
        if variable not in os.environ and libc.mallopt(parameter, value) == 1:  # mallopt returns 1 on success
            applied[variable] = value
