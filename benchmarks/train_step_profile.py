"""Where the time of one ViT training step goes: XLA:CPU's own per-op timings, and the matmul peak beside it.

    PYTHONPATH=. python benchmarks/train_step_profile.py [--dtype float32|bfloat16] [--kind relu]

The SPEC reference model (ViT 192 wide, 6 deep, 3 heads, MLP 384, patch 4, batch 128): one jitted
`make_train_step` (forward, backward, AdamW), traced over --calls calls with jax.profiler as in
attention_profile.py. Prints the wall time per step, the XLA op time per step by kind of op (matmuls on
YNNPACK, element-wise fusions, copies and transposes, reductions), the most expensive ops, and the
matmul GFLOP/s the step achieves against a lone large matmul through XLA (and through PyTorch when it
is installed) in the same process. `--hlo FILE` writes the optimised HLO, to match op names up.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import reluattn as ra
from reluattn.config import ATTENTION_KINDS
from attention_profile import op_times, print_tables, summarise


def category(name):
    if name.startswith("ynn_fusion"):
        return "matmuls (YNNPACK)"
    if "dot" in name or "convolution" in name:
        return "matmuls (generic XLA dot)"
    if any(word in name for word in ("copy", "transpose", "dynamic-slice", "dynamic-update-slice", "bitcast",
                                     "slice", "concatenate", "pad")):
        return "copies, slices, transposes"
    if "reduce" in name:
        return "reductions (LayerNorm and softmax statistics, bias gradients, norms)"
    return "element-wise fusions (GELU, LayerNorm, relu/softmax, casts, AdamW)"


def matmul_peak(dtype, size=1024, calls=20) -> float:
    """GFLOP/s of a lone size^3 matmul through XLA (float32 result for bfloat16 inputs, as the model does)."""
    a = jnp.ones((size, size), dtype)
    product = jax.jit(lambda a, b: jnp.matmul(a, b, preferred_element_type=jnp.float32))
    jax.block_until_ready(product(a, a))
    start = time.perf_counter()
    for _ in range(calls):
        jax.block_until_ready(product(a, a))
    return 2 * size ** 3 * calls / (time.perf_counter() - start) / 1e9


def torch_matmul_peak(dtype_name, size=1024, calls=20):
    try:
        import torch
    except ImportError:
        return None
    a = torch.ones((size, size), dtype=getattr(torch, dtype_name))
    a @ a
    start = time.perf_counter()
    for _ in range(calls):
        a @ a
    return 2 * size ** 3 * calls / (time.perf_counter() - start) / 1e9


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--kind", default="relu", choices=ATTENTION_KINDS)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--top", type=int, default=12, help="also list the N most expensive ops")
    parser.add_argument("--hlo", type=Path, default=None, help="write the optimised HLO here")
    args = parser.parse_args(argv)

    jb = ra.backend("jax")
    cfg = ra.ViTConfig().replace(attention=ra.AttentionConfig(kind=args.kind, alpha=1.0))  # SPEC reference model
    opt_cfg = ra.OptimizerConfig(total_steps=1000, warmup_steps=10)
    compute_dtype = None if args.dtype == "float32" else jnp.bfloat16
    step = jax.jit(jb.make_train_step(cfg, opt_cfg, compute_dtype=compute_dtype))
    rng = np.random.default_rng(0)
    params = jax.tree.map(jnp.asarray, ra.init_params(cfg, seed=0))
    arrays = [params, jb.init_optimizer(params, opt_cfg),
              jnp.asarray(rng.random((args.batch, 32, 32, 3), dtype=np.float32)),
              jnp.asarray(rng.integers(0, 10, args.batch))]
    jax.block_until_ready(step(*arrays))
    if args.hlo:
        args.hlo.write_text(step.lower(*arrays).compile().as_text())
    start = time.perf_counter()
    for _ in range(args.calls):
        jax.block_until_ready(step(*arrays))
    wall = (time.perf_counter() - start) / args.calls * 1e3
    per_op = op_times(step, arrays, args.calls)
    total, per_category = summarise(per_op, category)
    flops = cfg.flops_per_image() * args.batch
    matmul_ms = per_category["matmuls (YNNPACK)"] + per_category["matmuls (generic XLA dot)"]
    xla_peak, torch_peak = matmul_peak(jnp.dtype(args.dtype)), torch_matmul_peak(args.dtype)
    print(f"# train step, SPEC reference ViT, batch {args.batch}, {args.kind} attention, {args.dtype} matmuls; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"# wall time per step {wall:.1f} ms = {args.batch / wall * 1e3:.0f} images/s = "
          f"{flops / wall / 1e6:.0f} GFLOP/s of model FLOPs ({cfg.flops_per_image() / 1e9:.3f} GFLOP/image)")
    print(f"# XLA op time per step, summed over threads: {total:.1f} ms; in matmuls {matmul_ms:.1f} ms "
          f"(= {flops / matmul_ms / 1e6 if matmul_ms else float('nan'):.0f} GFLOP/s while in matmuls, "
          f"counting op time over both threads)")
    print(f"# lone 1024^3 matmul: XLA {xla_peak:.0f} GFLOP/s" +
          (f", PyTorch {torch_peak:.0f} GFLOP/s" if torch_peak else ""))
    print_tables(per_op, per_category, total, args.top)


if __name__ == "__main__":
    main()
