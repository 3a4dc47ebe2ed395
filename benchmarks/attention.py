"""Forward + backward of the attention op alone: blocked relu / L against dense and fused softmax.

    python benchmarks/attention.py [--lengths 1024 2048 4096] [--repeats 5] [--dtypes float32 bfloat16]
                                   [--ops blocked plain jax-sdpa torch-sdpa torch-plain]
                                   [--block-size N] [--query-block-size N] [--heads-per-step G]
                                   [--memory-length 16384] [--no-memory] [--no-table] [--measure-dense-rss]

Each row times one jitted (or eager PyTorch) call that returns the output and the gradients of q, k, v
for a given output gradient: batch 2, 4 heads, head width 64, q, k, v shaped (B, L, H, Dh) for JAX and
(B, H, L, Dh) for PyTorch (each library's native layout; the blocked op's transposes are timed with it).

Rows:  blocked relu/L (JAX, reluattn's custom_vjp), plain relu/L (JAX: einsum, relu, / L, einsum; jax.grad),
       jax.nn.dot_product_attention (softmax, XLA), and when `import torch` works: PyTorch
       scaled_dot_product_attention (softmax, fused flash kernel on CPU) and plain relu/L in PyTorch.
Time:  the minimum and the median of --repeats calls after one warm-up. The calls of one (L, dtype) are
       interleaved round by round, so that load from other jobs on a shared machine spreads over all rows;
       the minimum is then the better estimate of an op's cost. The load average and the XLA matmul peak
       are printed before and after the table: a peak that drops means the table was disturbed.
FLOPs: matmul FLOPs only, 2 per multiply-add: forward 4 B H L^2 Dh (q k^T and w v), backward 8 B H L^2 Dh
       (dw, dv, dq, dk), 12 B H L^2 Dh in all. Fused kernels that recompute q k^T in the backward (the
       blocked op, flash SDPA) do 14 B H L^2 Dh; GFLOP/s below always divides the 12 count by the time.
Peak:  a 4096^3 matmul through XLA in the same process, float32 and bfloat16 inputs (float32 sums).
Memory: forward + backward at --memory-length (batch 1, 4 heads, Dh 64, float32): XLA's memory analysis of
       the compiled function (arguments + outputs + temporaries, without running it) for blocked and dense,
       and the peak resident set (VmHWM: Python, JAX, the compiled code and the call) of a fresh subprocess
       that runs it once. The dense run needs > 20 GB, so it only runs with --measure-dense-rss.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from reluattn.machine import cpu_model

from timing import time_calls, timed

ROOT = Path(__file__).resolve().parents[1]
BATCH, HEADS, HEAD_DIM = 2, 4, 64


def cpu_description():
    return f"{cpu_model()}, {os.cpu_count()} logical CPUs"


def load_average():
    return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


# ---------------------------------------------------------------------------------------------- JAX rows

OPS = {"blocked": "blocked relu/L (JAX)", "plain": "plain relu/L (JAX)",
       "jax-sdpa": "jax.nn.dot_product_attention softmax",
       "torch-sdpa": "PyTorch scaled_dot_product_attention softmax", "torch-plain": "PyTorch plain relu/L"}


def jax_calls(length, dtype_name, ops, tiles):
    """{row name: a call that runs the jitted forward + backward once and waits for it}."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from reluattn.config import AttentionConfig
    from reluattn.jax_backend.long_sequences import blocked_attention

    dtype = jnp.dtype(dtype_name)
    rng = np.random.default_rng(0)
    q, k, v, dout = (jnp.asarray(rng.normal(size=(BATCH, length, HEADS, HEAD_DIM)), dtype) for _ in range(4))
    relu_over_length = AttentionConfig(kind="relu", alpha=1.0)

    def blocked(q, k, v):
        # bfloat16 inputs: bfloat16 matmuls with float32 sums (compute_dtype), bfloat16 out.
        return blocked_attention(q, k, v, relu_over_length, compute_dtype=dtype, **tiles)

    def plain(q, k, v):
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(HEAD_DIM).astype(q.dtype)  # (B, H, L, L)
        return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.relu(scores) / length, v)

    def softmax(q, k, v):
        return jax.nn.dot_product_attention(q, k, v)

    calls = {}
    for op, function in (("blocked", blocked), ("plain", plain), ("jax-sdpa", softmax)):
        if op in ops:
            step = jax.jit(lambda q, k, v, dout, function=function: jax.vjp(function, q, k, v)[1](dout))
            calls[OPS[op]] = lambda step=step: jax.block_until_ready(step(q, k, v, dout))
    return calls


def matmul_peak(dtype_name, size=4096, repeats=10):
    import jax
    import jax.numpy as jnp

    a = jnp.ones((size, size), jnp.dtype(dtype_name))
    product = jax.jit(lambda a, b: jnp.matmul(a, b, preferred_element_type=jnp.float32))
    best, _ = time_calls({"matmul": lambda: jax.block_until_ready(product(a, a))}, repeats)["matmul"]
    return 2 * size ** 3 / best / 1e9


# ------------------------------------------------------------------------------------------ PyTorch rows

def torch_calls(length, dtype_name, ops):
    """{row name: a call that runs forward + backward once} for the PyTorch rows (none without torch)."""
    if not {"torch-sdpa", "torch-plain"} & set(ops):
        return {}
    try:
        import torch
    except ImportError:
        return {}
    dtype = getattr(torch, dtype_name)
    generator = torch.Generator().manual_seed(0)
    q, k, v, dout = (torch.randn(BATCH, HEADS, length, HEAD_DIM, generator=generator).to(dtype) for _ in range(4))
    for x in (q, k, v):
        x.requires_grad_(True)

    def run(function):
        for x in (q, k, v):
            x.grad = None
        out = function(q, k, v)
        out.backward(dout)

    def plain(q, k, v):
        weights = torch.relu(q @ k.transpose(-1, -2) / HEAD_DIM ** 0.5) / length  # (B, H, L, L)
        return weights @ v

    sdpa = torch.nn.functional.scaled_dot_product_attention
    return {OPS[op]: (lambda function=function: run(function))
            for op, function in (("torch-sdpa", sdpa), ("torch-plain", plain)) if op in ops}


# ---------------------------------------------------------------------------------------------- memory

def memory_child(impl, length, tiles):
    """Run in a fresh process: compile, measure XLA's analysis, run once, report resident-set growth."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from reluattn.config import AttentionConfig
    from reluattn.jax_backend.fast import cpu_setup
    from reluattn.jax_backend.long_sequences import blocked_attention

    cpu_setup.configure()  # as the trainer does, before anything starts XLA

    def function(q, k, v):
        if impl == "blocked":
            return blocked_attention(q, k, v, AttentionConfig(kind="relu"), **tiles)
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(HEAD_DIM).astype(q.dtype)
        return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.relu(scores) / length, v)

    step = jax.jit(lambda q, k, v, dout: (lambda out, pullback: (out, pullback(dout)))(*jax.vjp(function, q, k, v)))
    arrays = [jnp.asarray(np.random.default_rng(i).normal(size=(1, length, HEADS, HEAD_DIM)), jnp.float32)
              for i in range(4)]
    compiled = step.lower(*arrays).compile()
    analysis = compiled.memory_analysis()
    xla_bytes = analysis.argument_size_in_bytes + analysis.output_size_in_bytes + analysis.temp_size_in_bytes
    result = {"xla_bytes": xla_bytes, "temp_bytes": analysis.temp_size_in_bytes}
    if os.environ.get("RELUATTN_BENCH_RUN", "1") == "1":
        before = resident_set()
        seconds = timed(lambda: jax.block_until_ready(compiled(*arrays)))
        result.update(seconds=seconds, peak_rss=resident_set()["VmHWM"],
                      rss_before=before["VmRSS"], peak_before=before["VmHWM"])
    print(json.dumps(result))


def resident_set():
    """This process's resident set now (VmRSS) and its high-water mark (VmHWM), in bytes, from
    /proc/self/status. (Not ru_maxrss: Linux carries the parent's high-water mark across fork + exec.)"""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) * 1024  # kB
    return fields


def memory_rows(length, tile_arguments, measure_dense):
    rows = []
    for impl in ("blocked", "dense"):
        environment = dict(os.environ, PYTHONPATH=str(ROOT),
                           RELUATTN_BENCH_RUN="1" if impl == "blocked" or measure_dense else "0")
        command = [sys.executable, __file__, "--memory-child", impl, "--memory-length", str(length), *tile_arguments]
        done = subprocess.run(command, capture_output=True, text=True, env=environment)
        if done.returncode != 0:
            rows.append((impl, None, done.stderr.strip().splitlines()[-1:]))
            continue
        rows.append((impl, json.loads(done.stdout.strip().splitlines()[-1]), None))
    return rows


# ------------------------------------------------------------------------------------------------ main

def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"])
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per row after one warm-up")
    parser.add_argument("--ops", nargs="+", default=list(OPS), choices=list(OPS), help="rows to time")
    parser.add_argument("--block-size", type=int, default=None, help="keys per tile (default: the op's)")
    parser.add_argument("--query-block-size", type=int, default=None, help="queries per tile (default: the op's)")
    parser.add_argument("--heads-per-step", type=int, default=None, help="heads per tile (default: the op's)")
    parser.add_argument("--memory-length", type=int, default=16384)
    parser.add_argument("--no-memory", action="store_true", help="skip the memory measurement")
    parser.add_argument("--no-table", action="store_true", help="only the memory measurement")
    parser.add_argument("--measure-dense-rss", action="store_true",
                        help="also run the dense op at --memory-length (needs > 20 GB of memory)")
    parser.add_argument("--memory-child", choices=["blocked", "dense"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.tiles = {name: getattr(args, name) for name in ("block_size", "query_block_size", "heads_per_step")
                  if getattr(args, name) is not None}
    if args.memory_child:
        return memory_child(args.memory_child, args.memory_length, args.tiles)

    import jax

    from reluattn.jax_backend.fast import cpu_setup
    applied = cpu_setup.configure()  # as the trainer does, before anything starts XLA
    print(f"# {cpu_description()}; jax {jax.__version__}; {load_average()}; cpu_setup applied: {applied or 'nothing'}")
    try:
        import torch
        torch_note = f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    except ImportError:
        torch_note = "torch not installed: PyTorch rows skipped"
    print(f"# {torch_note}; batch {BATCH}, heads {HEADS}, head dim {HEAD_DIM}; forward + backward")
    if not args.no_table:
        print_table(args)
    if not args.no_memory:
        print_memory(args)


def print_table(args):
    peaks = {name: matmul_peak(name) for name in args.dtypes}
    print("# XLA 4096^3 matmul peak (before the table): "
          + ", ".join(f"{name} {value:.0f} GFLOP/s" for name, value in peaks.items()))
    print()
    print(f"| L | dtype | op | min ms | median ms | GFLOP/s (12 B H L^2 Dh / min) | % of {'/'.join(args.dtypes)} peak |")
    print("|---|---|---|---|---|---|---|")
    results = {}
    for length in args.lengths:
        flops = 12 * BATCH * HEADS * length ** 2 * HEAD_DIM
        for dtype_name in args.dtypes:
            calls = {**jax_calls(length, dtype_name, args.ops, args.tiles),
                     **torch_calls(length, dtype_name, args.ops)}
            for name, (best, median) in time_calls(calls, args.repeats).items():
                results[(length, dtype_name, name)] = best
                rate = flops / best / 1e9
                print(f"| {length} | {dtype_name} | {name} | {best * 1e3:.1f} | {median * 1e3:.1f} | {rate:.0f} | "
                      f"{100 * rate / peaks[dtype_name]:.0f}% |", flush=True)
    print()
    for length in args.lengths:
        for dtype_name in args.dtypes:
            if (length, dtype_name, OPS["blocked"]) not in results:
                continue
            blocked = results[(length, dtype_name, OPS["blocked"])]
            for rival in ("PyTorch scaled_dot_product_attention softmax", "jax.nn.dot_product_attention softmax",
                          "plain relu/L (JAX)", "PyTorch plain relu/L"):
                if (length, dtype_name, rival) in results:
                    print(f"L={length} {dtype_name}: blocked relu/L is {results[(length, dtype_name, rival)] / blocked:.2f}x "
                          f"faster than {rival}")
    after = {name: matmul_peak(name) for name in args.dtypes}
    print("# XLA 4096^3 matmul peak (after the table): "
          + ", ".join(f"{name} {value:.0f} GFLOP/s" for name, value in after.items()))
    print(f"# {load_average()}")
    print()


def print_memory(args):
    print(f"Memory, forward + backward at L={args.memory_length} (batch 1, {HEADS} heads, Dh {HEAD_DIM}, float32):")
    print("| op | XLA analysis (args + outputs + temps) | of which temporaries | process peak RSS (VmHWM) | time |")
    print("|---|---|---|---|---|")
    tile_arguments = [f"--{name.replace('_', '-')}={value}" for name, value in args.tiles.items()]
    for impl, result, error in memory_rows(args.memory_length, tile_arguments, args.measure_dense_rss):
        if result is None:
            print(f"| {impl} | failed: {error} | | | |")
            continue
        measured = (f"{result['peak_rss'] / 2**30:.2f} GiB ({result['rss_before'] / 2**30:.2f} GiB before the call)"
                    if "peak_rss" in result else "not run")
        seconds = f"{result['seconds']:.1f} s" if "seconds" in result else ""
        print(f"| {impl} | {result['xla_bytes'] / 2**30:.2f} GiB | {result['temp_bytes'] / 2**30:.2f} GiB | "
              f"{measured} | {seconds} |")


if __name__ == "__main__":
    main()
