"""Where the time of one ViT training step goes: XLA:CPU's own per-op timings, and the matmul peak beside it.

    PYTHONPATH=. python benchmarks/investigations/train_step_profile.py [--dtype float32|bfloat16] [--kind relu]

The reference model, config.REFERENCE_VIT (ViT 192 wide, 6 deep, 3 heads, MLP 384, patch 4, batch 128): one jitted
`make_train_step` (forward, backward, AdamW), traced over --calls calls with jax.profiler as in
attention_profile.py. Prints the wall time per step; how much of it one, two or no XLA ops were running
(XLA:CPU runs independent ops side by side on its threads); the XLA op time per step by kind of op; every
matmul shape of the step with its GFLOP/s inside the step and alone (the same dot_general, jitted by
itself: --no-lone skips that); the most expensive ops; and a lone large matmul through XLA (and through
PyTorch when it is installed) in the same process. Which library fusions are matmuls, and their shapes,
comes from the optimised HLO (YNNPACK also runs row reductions: LayerNorm statistics, bias gradients).
`--hlo FILE` writes that HLO, to match op names up.
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import re
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import reluattn as ra
from reluattn.config import ATTENTION_KINDS
from reluattn.jax_backend.fast import cpu_setup

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for the shared timer
from attention_profile import op_times, print_tables, trace_events  # noqa: E402
from timing import best_seconds, timed  # noqa: E402


MOVING_DATA = {"parameter", "constant", "bitcast", "copy", "transpose", "broadcast", "concatenate", "slice",
               "dynamic-slice", "dynamic-update-slice", "pad", "reshape", "tuple", "get-tuple-element"}


def category(name, matmuls, fusion_ops):
    """The kind of an XLA op; `matmuls` is library_matmuls' result for the step's HLO, `fusion_ops` fused_ops'."""
    if name in matmuls:
        return ("matmuls, batched per image and head (attention scores, weights x values)" if matmuls[name].batched
                else "matmuls of the dense layers (qkv, projection, MLP, patches, head)")
    if name.startswith("ynn_fusion"):
        return "row reductions on YNNPACK (LayerNorm statistics and gradients, bias gradients)"
    if "dot" in name or "convolution" in name:
        return "matmuls (generic XLA dot)"
    ops = fusion_ops.get(name, {re.sub(r"\.\d+$", "", name)})
    if ops <= MOVING_DATA:
        return "copies, transposes, broadcasts (no arithmetic)"
    if "reduce" in ops:
        return "reductions (XLA)"
    return "element-wise fusions (GELU, LayerNorm, relu/softmax, casts, AdamW)"


def fusions(hlo_text):
    """(fusion name, the text of its fused computation, the rest of its line) for every fusion of an
    optimised HLO text."""
    bodies = {match[1]: match[2] for match in re.finditer(r"\n%([\w.]+) \(.*?\) -> .*? \{\n(.*?)\n\}", hlo_text, re.S)}
    for match in re.finditer(r"%([\w.]+) = \S+ fusion\(.*?\), kind=\w+, calls=%([\w.]+)(.*)", hlo_text):
        yield match[1], bodies.get(match[2], ""), match[3]


def fused_ops(hlo_text) -> dict:
    """{fusion name: the set of HLO opcodes in its fused computation} of an optimised HLO text."""
    return {name: set(re.findall(r"= \S+ ([\w-]+)\(", body)) for name, body, _ in fusions(hlo_text)}


class Matmul(collections.namedtuple("Matmul", "flops label batched lhs rhs dimensions dtype")):
    """One matmul fusion: its FLOPs, a readable shape label, and what it takes to rebuild it alone."""


def library_matmuls(hlo_text) -> dict:
    """{fusion name: Matmul} for the library fusions (YNNPACK, or oneDNN when XLA_FLAGS ask for it) of an
    optimised HLO text whose computation is a dot."""
    matmuls = {}
    for name, body, rest in fusions(hlo_text):
        dot = re.search(r"= \w+\[([\d,]*)\]\S* dot\(%([\w.]+), %([\w.]+)\), (.*)", body)
        if not ("__ynn_fusion" in rest or "__onednn_fusion" in rest) or not dot:
            continue
        parameters = dict(re.findall(r"%([\w.]+) = (\w+\[[\d,]*\])\S* parameter", body))
        dtype, lhs = _shape(parameters[dot[2]])
        rhs = _shape(parameters[dot[3]])[1]
        dims = {key: tuple(int(d) for d in value.split(",") if d)
                for key, value in re.findall(r"(\w+_dims)=\{([\d,]*)\}", dot[4])}
        dimensions = ((dims.get("lhs_contracting_dims", ()), dims.get("rhs_contracting_dims", ())),
                      (dims.get("lhs_batch_dims", ()), dims.get("rhs_batch_dims", ())))
        out = [int(d) for d in dot[1].split(",") if d]
        summed = math.prod(lhs[axis] for axis in dimensions[0][0])
        label = f"{dtype} {list(lhs)} x {list(rhs)} -> {out}"
        matmuls[name] = Matmul(2 * math.prod(out) * summed, label, bool(dimensions[1][0]), lhs, rhs,
                               dimensions, dtype)
    return matmuls


def _shape(text):
    dtype, dims = re.match(r"(\w+)\[([\d,]*)\]", text).groups()
    return dtype, tuple(int(d) for d in dims.split(",") if d)


def lone_gflops(matmul: Matmul, calls=10) -> float:
    """GFLOP/s of the same dot_general jitted alone (float32 result, as in the step), best of `calls`."""
    dtype = {"bf16": jnp.bfloat16, "f32": jnp.float32, "f64": jnp.float64}[matmul.dtype]
    lhs, rhs = jnp.ones(matmul.lhs, dtype), jnp.ones(matmul.rhs, dtype)
    product = jax.jit(lambda a, b: jax.lax.dot_general(a, b, matmul.dimensions, preferred_element_type=jnp.float32))
    call = lambda: jax.block_until_ready(product(lhs, rhs))  # noqa: E731
    call()  # compile
    return matmul.flops / best_seconds(call, calls) / 1e9


def lone_torch_gflops(matmul: Matmul, calls=10):
    """GFLOP/s of the same product through PyTorch (torch.einsum, 2 threads as its benchmark rows), or None
    without PyTorch. bfloat16 products return bfloat16 there (its matmuls sum in float32 inside)."""
    try:
        import torch
    except ImportError:
        return None
    (lhs_summed, rhs_summed), (lhs_batch, rhs_batch) = matmul.dimensions
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    lhs_axes, rhs_axes = [None] * len(matmul.lhs), [None] * len(matmul.rhs)
    for lhs_axis, rhs_axis in zip(lhs_batch + lhs_summed, rhs_batch + rhs_summed):
        lhs_axes[lhs_axis] = rhs_axes[rhs_axis] = next(letters)
    lhs_axes = [axis or next(letters) for axis in lhs_axes]
    rhs_axes = [axis or next(letters) for axis in rhs_axes]
    out_axes = ([lhs_axes[axis] for axis in lhs_batch] + [axis for axis in lhs_axes if axis not in rhs_axes]
                + [axis for axis in rhs_axes if axis not in lhs_axes])
    equation = f"{''.join(lhs_axes)},{''.join(rhs_axes)}->{''.join(out_axes)}"
    dtype = {"bf16": torch.bfloat16, "f32": torch.float32, "f64": torch.float64}[matmul.dtype]
    torch.set_num_threads(2)
    lhs, rhs = torch.ones(matmul.lhs, dtype=dtype), torch.ones(matmul.rhs, dtype=dtype)
    torch.einsum(equation, lhs, rhs)  # warm up
    return matmul.flops / best_seconds(lambda: torch.einsum(equation, lhs, rhs), calls) / 1e9


def concurrency(events, calls) -> dict:
    """{number of XLA ops running at once: ms per call} over the span of the traced calls."""
    edges = sorted([(event["ts"], 1) for event in events] + [(event["ts"] + event["dur"], -1) for event in events])
    running, last, spent = 0, edges[0][0], collections.Counter()
    for time_point, change in edges:
        spent[running] += (time_point - last) / 1000 / calls
        running, last = running + change, time_point
    return dict(sorted(spent.items()))


def matmul_peak(dtype, size=1024, calls=20) -> float:
    """GFLOP/s of a lone size^3 matmul through XLA (float32 result for bfloat16 inputs, as the model does)."""
    a = jnp.ones((size, size), dtype)
    product = jax.jit(lambda a, b: jnp.matmul(a, b, preferred_element_type=jnp.float32))
    jax.block_until_ready(product(a, a))
    seconds = timed(lambda: [jax.block_until_ready(product(a, a)) for _ in range(calls)])
    return 2 * size ** 3 * calls / seconds / 1e9


def torch_matmul_peak(dtype_name, size=1024, calls=20):
    try:
        import torch
    except ImportError:
        return None
    a = torch.ones((size, size), dtype=getattr(torch, dtype_name))
    a @ a
    seconds = timed(lambda: [a @ a for _ in range(calls)])
    return 2 * size ** 3 * calls / seconds / 1e9


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--kind", default="relu", choices=ATTENTION_KINDS)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--top", type=int, default=12, help="also list the N most expensive ops")
    parser.add_argument("--hlo", type=Path, default=None, help="write the optimised HLO here")
    parser.add_argument("--no-lone", action="store_true", help="do not time each matmul shape alone")
    args = parser.parse_args(argv)

    jb = ra.backend("jax")
    cpu_setup.configure()  # as the trainer does, before anything starts XLA
    cfg = ra.ViTConfig().replace(attention=ra.AttentionConfig(kind=args.kind, alpha=1.0))  # the reference model
    opt_cfg = ra.OptimizerConfig(total_steps=1000, warmup_steps=10)
    compute_dtype = None if args.dtype == "float32" else jnp.bfloat16
    step = jax.jit(jb.make_train_step(cfg, opt_cfg, compute_dtype=compute_dtype, fast=True))  # the presets' path
    rng = np.random.default_rng(0)
    params = jax.tree.map(jnp.asarray, ra.init_params(cfg, seed=0))
    arrays = [params, jb.init_optimizer(params, opt_cfg),
              jnp.asarray(rng.random((args.batch, 32, 32, 3), dtype=np.float32)),
              jnp.asarray(rng.integers(0, 10, args.batch))]
    jax.block_until_ready(step(*arrays))
    hlo_text = step.lower(*arrays).compile().as_text()
    if args.hlo:
        args.hlo.write_text(hlo_text)
    matmuls, fusion_ops = library_matmuls(hlo_text), fused_ops(hlo_text)
    wall = timed(lambda: [jax.block_until_ready(step(*arrays)) for _ in range(args.calls)]) / args.calls * 1e3
    events = trace_events(step, arrays, args.calls)
    per_op = op_times(step, arrays, args.calls, events)
    per_category = collections.Counter()
    for name, milliseconds in per_op.items():
        per_category[category(name, matmuls, fusion_ops)] += milliseconds
    total = sum(per_op.values())
    flops = cfg.flops_per_image() * args.batch
    matmul_ms = sum(ms for name, ms in per_op.items() if name in matmuls)
    running = concurrency(events, args.calls)
    xla_peak, torch_peak = matmul_peak(jnp.dtype(args.dtype)), torch_matmul_peak(args.dtype)
    print(f"# train step, reference ViT, batch {args.batch}, {args.kind} attention, {args.dtype} matmuls; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"# wall time per step {wall:.1f} ms = {args.batch / wall * 1e3:.0f} images/s = "
          f"{flops / wall / 1e6:.0f} GFLOP/s of model FLOPs ({cfg.flops_per_image() / 1e9:.3f} GFLOP/image)")
    print("# traced time per step with " + ", ".join(f"{count} XLA ops running: {ms:.1f} ms"
                                                      for count, ms in running.items()))
    print(f"# XLA op time per step, summed over threads: {total:.1f} ms; in library matmuls {matmul_ms:.1f} ms "
          f"(= {flops / matmul_ms / 1e6 if matmul_ms else float('nan'):.0f} GFLOP/s of model FLOPs per second "
          f"of matmul op time)")
    print(f"# lone 1024^3 matmul: XLA {xla_peak:.0f} GFLOP/s" +
          (f", PyTorch {torch_peak:.0f} GFLOP/s" if torch_peak else ""))
    print_tables(per_op, per_category, total, args.top)
    print()
    print("| matmul (inputs -> float32 result) | in the step | ms per step | GFLOP/s in the step | GFLOP/s alone, XLA "
          "| GFLOP/s alone, PyTorch |")
    print("|---|---|---|---|---|---|")
    by_label = collections.defaultdict(list)
    for name, matmul in matmuls.items():
        by_label[matmul.label].append((per_op.get(name, 0.0), matmul))
    floors = collections.Counter()  # ms per step of all the step's matmuls at their lone rates
    for label, entries in sorted(by_label.items(), key=lambda item: -sum(ms for ms, _ in item[1])):
        milliseconds, matmul = sum(ms for ms, _ in entries), entries[0][1]
        rates = {} if args.no_lone else {"XLA": lone_gflops(matmul), "PyTorch": lone_torch_gflops(matmul)}
        for library, rate in rates.items():
            floors[library] += len(entries) * matmul.flops / rate / 1e6 if rate else float("nan")
        alone = [f"{rates[library]:.0f}" if rates.get(library) else "" for library in ("XLA", "PyTorch")]
        print(f"| {label} | {len(entries)}x | {milliseconds:.1f} | "
              f"{len(entries) * matmul.flops / milliseconds / 1e6 if milliseconds else float('nan'):.0f} | "
              f"{alone[0]} | {alone[1]} |")
    if floors:
        print(f"# all of the step's matmuls at their lone rates: XLA {floors['XLA']:.1f} ms per step"
              + (f", PyTorch {floors['PyTorch']:.1f} ms" if floors["PyTorch"] == floors["PyTorch"] else "")
              + f" (in the step: {matmul_ms:.1f} ms of op time)")

if __name__ == "__main__":
    main()
