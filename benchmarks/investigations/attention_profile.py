"""Where the time of blocked attention goes: XLA:CPU's own per-op timings of one forward + backward.

    PYTHONPATH=. python benchmarks/investigations/attention_profile.py [--length 2048] [--dtype float32|bfloat16] [--kind relu]
                                                                  [--block-size N] [--query-block-size N] [--heads-per-step G]

Traces --calls calls with jax.profiler (a Perfetto trace in a temporary folder), sums the time of every
XLA op (over both threads), and prints the total per kind of op: the matmuls (YNNPACK fusions), the
element-wise loop fusions (relu, the mask, casts), copies and transposes, and the rest. Op names are
XLA's (`ynn_fusion.3`, `broadcast_maximum_fusion`, ...); `--hlo FILE` writes the optimised HLO to match
them up. Times are wall-clock per op, so load from other jobs inflates them all alike.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import re
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from reluattn.config import ATTENTION_KINDS, AttentionConfig
from reluattn.jax_backend.fast import cpu_setup
from reluattn.jax_backend.long_sequences import blocked_attention

SKIPPED = ("ThunkExecutor", "$", "Pjit", "Common", "while", "closed_call", "call", "SlinkyThreadPool")


def category(name):
    if name.startswith("ynn_fusion"):
        return "matmuls (YNNPACK)"
    if "dot" in name:
        return "matmuls (generic XLA dot)"
    if name.startswith("wrapped_broadcast"):
        return "zero fills"
    if re.search(r"(^|_)add(_|$)", name):
        return "accumulator adds (+= of a tile's matmul)"
    if any(word in name for word in ("copy", "transpose", "dynamic-slice", "dynamic-update-slice", "bitcast")):
        return "copies, slices, transposes"
    return "element-wise (h(s), masks, casts)"


def trace_events(step, arrays, calls) -> list[dict]:
    """The XLA op events ({"name", "ts", "dur", "tid"}, microseconds) of `step(*arrays)` (already compiled)
    called `calls` times, from a jax.profiler trace."""
    with tempfile.TemporaryDirectory() as folder:
        with jax.profiler.trace(folder, create_perfetto_trace=True):
            for _ in range(calls):
                jax.block_until_ready(step(*arrays))
        trace = next(Path(folder).rglob("*.trace.json.gz"))
        events = json.load(gzip.open(trace))["traceEvents"]
    return [event for event in events
            if event.get("ph") == "X" and not event["name"].startswith(SKIPPED) and "PjRt" not in event["name"]]


def op_times(step, arrays, calls, events=None) -> collections.Counter:
    """{XLA op name: ms per call} of `step(*arrays)` (already compiled), from a jax.profiler trace (or from
    `events`, trace_events' result for the same number of calls)."""
    per_op = collections.Counter()
    for event in trace_events(step, arrays, calls) if events is None else events:
        per_op[event["name"]] += event["dur"] / 1000 / calls  # ms per call
    return per_op


def summarise(per_op, categorise=None):
    """(total ms, Counter {kind of op: ms}) of op_times' result."""
    categorise = categorise or category
    per_category = collections.Counter()
    for name, milliseconds in per_op.items():
        per_category[categorise(re.sub(r"\.\d+$", "", name))] += milliseconds
    return sum(per_op.values()), per_category


def print_tables(per_op, per_category, total, top):
    print("| ops | ms | share |")
    print("|---|---|---|")
    for name, milliseconds in per_category.most_common():
        print(f"| {name} | {milliseconds:.1f} | {100 * milliseconds / total:.0f}% |")
    print()
    print("| op | ms |")
    print("|---|---|")
    for name, milliseconds in per_op.most_common(top):
        print(f"| {name} | {milliseconds:.2f} |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--kind", default="relu", choices=ATTENTION_KINDS)
    parser.add_argument("--block-size", type=int, default=None)
    parser.add_argument("--query-block-size", type=int, default=None)
    parser.add_argument("--heads-per-step", type=int, default=None)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--top", type=int, default=12, help="also list the N most expensive ops")
    parser.add_argument("--hlo", type=Path, default=None, help="write the optimised HLO here")
    args = parser.parse_args(argv)

    cpu_setup.configure()  # as the trainer does, before anything starts XLA
    dtype = jnp.dtype(args.dtype)
    tiles = {name: getattr(args, name) for name in ("block_size", "query_block_size", "heads_per_step")
             if getattr(args, name) is not None}
    attn_cfg = AttentionConfig(kind=args.kind)

    def forward_backward(q, k, v, dout):
        out, pullback = jax.vjp(lambda q, k, v: blocked_attention(q, k, v, attn_cfg, compute_dtype=dtype, **tiles),
                                q, k, v)
        return out, pullback(dout)

    step = jax.jit(forward_backward)
    rng = np.random.default_rng(0)
    arrays = [jnp.asarray(rng.normal(size=(2, args.length, 4, 64)), dtype) for _ in range(4)]
    jax.block_until_ready(step(*arrays))
    if args.hlo:
        args.hlo.write_text(step.lower(*arrays).compile().as_text())
    per_op = op_times(step, arrays, args.calls)
    total, per_category = summarise(per_op)
    print(f"# blocked {args.kind}, L={args.length}, batch 2, 4 heads, Dh 64, {args.dtype}, tiles {tiles or 'default'}")
    print(f"# XLA op time per forward + backward, summed over threads: {total:.1f} ms")
    print_tables(per_op, per_category, total, args.top)


if __name__ == "__main__":
    main()
