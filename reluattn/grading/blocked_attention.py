"""Checkers for notebook 06 (parallelism): relu / L attention computed one key block at a time, and the
online softmax.

Both student functions take q (..., T, Dh), k and v (..., L, Dh) and a block size, and are graded against
the full computation (reluattn's NumPy multi-head core) for block sizes that divide L, that do not, of 1
key and larger than L. Then their memory is measured (tracemalloc, which sees NumPy's arrays) on a long
sequence: a blocked algorithm must never hold the whole T x L score matrix. The online softmax is also
run on sharp float32 scores (around 100), where exponentials taken without subtracting a maximum overflow.
"""

from __future__ import annotations

import math
import tracemalloc

import numpy as np

from ..config import AttentionConfig
from ..numpy_backend import multihead_attention
from .feedback import ExerciseFailed, call_student, checker, diagnose, passed, report

BLOCK_SIZES = (4, 3, 1, 10, 16)  # with L = 10 keys: divides, does not divide, one key, all keys, more than L
KINDS = {"relu": AttentionConfig(kind="relu", alpha=1.0), "softmax": AttentionConfig(kind="softmax")}
MEMORY_SHAPE = (256, 4096, 16)  # T, L, Dh of the memory check: the T x L scores would take 8 MiB in float64
MEMORY_BLOCK = 64


HINTS = {"relu": "out = the sum over key blocks b of relu(q k_b^T / sqrt(Dh)) v_b, divided once by the total L",
         "softmax": "re-derive §3's update: per query, what must happen to what was accumulated against the old "
                    "maximum when a block raises it (e^(s - m') in terms of e^(s - m)), and when to divide"}


def full_attention(q, k, v, kind: str):
    """The reference: reluattn's multi-head core, on arrays with leading axes (..., T, Dh)."""
    lead = q.shape[:-2]
    as_heads = [x.reshape((1, -1) + x.shape[-2:]) for x in (q, k, v)]  # (1, batch, T or L, Dh)
    out, _, _ = multihead_attention.heads_attention_forward(*as_heads, KINDS[kind])
    return out.reshape(lead + out.shape[-2:])  # (..., T, Dh)


def _blocks(num_keys: int, block_size: int):
    return [slice(start, min(start + block_size, num_keys)) for start in range(0, num_keys, block_size)]


def _relu_mistakes(q, k, v, block_size) -> dict:
    num_queries, num_keys = q.shape[-2], k.shape[-2]
    scores = q @ k.swapaxes(-1, -2) / math.sqrt(q.shape[-1])  # (..., T, L)
    relu = np.maximum(scores, 0.0)  # (..., T, L)
    blocks = _blocks(num_keys, block_size)
    full_blocks = [block for block in blocks if block.stop - block.start == block_size]
    return {
        "each block was divided by its own length; every weight is divided by the total L":
            sum(relu[..., b] @ v[..., b, :] / (b.stop - b.start) for b in blocks),
        "the keys left over in the last, shorter block are missing (L is not always a multiple of the block)":
            sum((relu[..., b] @ v[..., b, :] for b in full_blocks), np.zeros(q.shape[:-1] + v.shape[-1:]))
            / num_keys,
        "the blocks' reads were averaged; they must be added (each is already divided by L)":
            relu @ v / num_keys / len(blocks),
        f"that divides by T = {num_queries}, the number of queries: relu attention divides by L, the number of "
        f"keys": relu @ v / num_queries,
    }


def _softmax_mistakes(q, k, v, block_size) -> dict:
    scores = q @ k.swapaxes(-1, -2) / math.sqrt(q.shape[-1])  # (..., T, L)
    blocks = _blocks(k.shape[-2], block_size)
    per_block = []
    for b in blocks:
        weights = np.exp(scores[..., b] - scores[..., b].max(-1, keepdims=True))  # (..., T, block)
        per_block.append(weights @ v[..., b, :] / weights.sum(-1, keepdims=True))
    # Online softmax that forgets to rescale the accumulated output (but rescales the normaliser), and the
    # same without the final division.
    running_max = np.full(q.shape[:-1] + (1,), -np.inf)
    normaliser, unscaled, correct = 0.0, 0.0, 0.0
    for b in blocks:
        new_max = np.maximum(running_max, scores[..., b].max(-1, keepdims=True))
        weights = np.exp(scores[..., b] - new_max)
        normaliser = normaliser * np.exp(running_max - new_max) + weights.sum(-1, keepdims=True)
        unscaled = unscaled + weights @ v[..., b, :]
        correct = correct * np.exp(running_max - new_max) + weights @ v[..., b, :]
        running_max = new_max
    return {
        "each block was softmaxed on its own and the reads added; softmax's weights must sum to 1 over the whole "
        "row: keep a running maximum and normaliser (the online softmax)": sum(per_block),
        "the accumulated output is not rescaled by e^(m_old - m_new) when the maximum grows":
            unscaled / normaliser,
        "the final division by the normaliser z is missing": correct,
    }


def _peak_bytes(function, *args) -> int:
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        function(*args)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def _check_blocked(exercise: str, student, kind: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    q, k, v = rng.normal(size=(2, 3, 7, 8)), rng.normal(size=(2, 3, 10, 8)), rng.normal(size=(2, 3, 10, 8))
    problems = []
    for block_size in BLOCK_SIZES:
        expected = full_attention(q, k, v, kind)  # (B, H, T, Dh)
        got = call_student(student, exercise, q, k, v, block_size)
        mistakes = (_relu_mistakes if kind == "relu" else _softmax_mistakes)(q, k, v, block_size)
        factors = {"sqrt(Dh): the scores must be divided by sqrt(Dh)": math.sqrt(8.0)}
        if kind == "relu":
            factors["L: the factor 1/L is missing"] = float(k.shape[-2])
        problems.append(diagnose(f"block_size={block_size} (T = 7 queries, L = 10 keys)", got, expected,
                                 factors=factors, mistakes=mistakes))
    report(exercise, problems, HINTS[kind])
    if kind == "softmax":  # sharp float32 scores: e^s overflows unless a maximum is subtracted first
        sharp = [x.astype(np.float32) for x in (30.0 * q, k, v)]
        expected = full_attention(*(x.astype(np.float64) for x in sharp), kind)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            got = call_student(student, exercise, *sharp, 4)
        message = diagnose("with sharp float32 scores (the largest near 100)", got, expected, tolerance=1e-5)
        if message and not np.all(np.isfinite(np.asarray(got, dtype=np.float64))):
            message += (" — e^s overflows float32 above s = 88: subtract the running maximum before taking "
                        "exponentials")
        report(exercise, [message])
    num_queries, num_keys, head_dim = MEMORY_SHAPE
    long_q, long_k, long_v = (rng.normal(size=(length, head_dim)) for length in (num_queries, num_keys, num_keys))
    dense_bytes = 8 * num_queries * num_keys
    peak = _peak_bytes(lambda: call_student(student, exercise, long_q, long_k, long_v, MEMORY_BLOCK))
    if peak >= dense_bytes / 2:
        raise ExerciseFailed(
            f"{exercise} is right, but with T = {num_queries} queries, L = {num_keys} keys and block_size = "
            f"{MEMORY_BLOCK} it allocated {peak / 2 ** 20:.1f} MiB at its peak, as much as the whole T x L score "
            f"matrix ({dense_bytes / 2 ** 20:.0f} MiB): compute one block of keys at a time, "
            f"k[..., start:start + block_size, :], and never the full q @ k^T")
    passed(exercise, f"equals the full computation for block sizes {', '.join(map(str, BLOCK_SIZES))} with L = 10"
                     f"{' and with sharp float32 scores' if kind == 'softmax' else ''}; peak memory "
                     f"{peak / 2 ** 20:.2f} MiB at T = {num_queries}, L = {num_keys}, block {MEMORY_BLOCK} (the "
                     f"T x L scores alone would take {dense_bytes / 2 ** 20:.0f} MiB)")


@checker
def check_blocked_relu_attention(student_attention, seed: int = 0) -> None:
    """student_attention(q, k, v, block_size) -> relu / L attention (..., T, Dh), one key block at a time."""
    _check_blocked("blocked_relu_attention", student_attention, "relu", seed)


@checker
def check_online_softmax_attention(student_attention, seed: int = 0) -> None:
    """student_attention(q, k, v, block_size) -> softmax attention (..., T, Dh) by the online softmax."""
    _check_blocked("online_softmax_attention", student_attention, "softmax", seed)
