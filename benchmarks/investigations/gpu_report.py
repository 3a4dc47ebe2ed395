"""The JAX backend on a GPU: training-step throughput and MFU, and attention forward + backward against
cuDNN's fused softmax attention. Runs anywhere JAX runs (on a CPU only with --quick, to see it work).

    PYTHONPATH=. python benchmarks/investigations/gpu_report.py              # on the GPU machine
    PYTHONPATH=. python benchmarks/investigations/gpu_report.py --quick      # tiny sizes, any device

Part 1, the reference ViT (192 wide, 6 deep, 3 heads, MLP 384, patch 4; 0.752 GFLOP per image
forward + backward): the jitted `train_step` (forward, backward, AdamW; fast=True) at several batch sizes, float32
and bfloat16 compute, relu/L and softmax. MFU = model FLOPs per second / the peak, where the peak is a
large bfloat16 matmul measured in the same process (and, for reference, the datasheet's dense bfloat16
rate when the device name is known). float32 matmuls run at XLA's default precision on the GPU.

Part 2, on a GPU: the Pallas kernel (jax_backend/fast/pallas_attention.py) against the dense path in float32,
every kind it supports (relative errors of the output and the three gradients).

Part 3, attention alone (batch 1, 8 heads, head width 64, bfloat16 inputs): forward + backward of relu/L
through the JAX backend's dense and blocked paths and (on a GPU) the Pallas kernel, against
`jax.nn.dot_product_attention` softmax with XLA's implementation and with cuDNN's (flash) kernel.

Each row: warm-up calls, then the median of --repeats timed calls (each waits for its result).
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import reluattn as ra

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for the shared timer
import timing  # noqa: E402

DATASHEET_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}  # dense, SXM parts


def median_seconds(function, repeats: int, warmup: int = 3) -> float:
    """timing.median_seconds of `function`, waiting for its result."""
    return timing.median_seconds(lambda: jax.block_until_ready(function()), repeats, warmup)


def matmul_peak_tflops(size: int, repeats: int) -> float:
    key_a, key_b = jax.random.split(jax.random.key(0))
    a = jax.random.normal(key_a, (size, size), jnp.bfloat16)  # random data, not zeros
    b = jax.random.normal(key_b, (size, size), jnp.bfloat16)
    product = jax.jit(lambda a, b: jnp.matmul(a, b, preferred_element_type=jnp.float32))
    return 2 * size ** 3 / median_seconds(lambda: product(a, b), repeats) / 1e12


def train_step_rows(args, peak):
    jb = ra.backend("jax")
    base = ra.ViTConfig()
    if args.quick:
        base = base.replace(dim=32, depth=2, heads=2, mlp_dim=64)
    opt_cfg = ra.OptimizerConfig(total_steps=10_000, warmup_steps=10)
    print(f"\n## train_step, ViT {base.dim}x{base.depth}, {base.heads} heads, MLP {base.mlp_dim}, patch "
          f"{base.patch_size}; {base.flops_per_image() / 1e9:.3f} GFLOP/image; MFU against {peak:.0f} TFLOP/s\n")
    print("| attention | precision | batch | ms/step | images/s | TFLOP/s | MFU |")
    print("|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for kind in ("relu", "softmax"):
        cfg = base.replace(attention=ra.AttentionConfig(kind=kind, alpha=1.0))
        for precision, compute_dtype in (("float32", None), ("bfloat16", jnp.bfloat16)):
            step = jax.jit(jb.make_train_step(cfg, opt_cfg, compute_dtype=compute_dtype, fast=True), donate_argnums=(0, 1))
            for batch in args.batches:
                images = jnp.asarray(rng.random((batch, 32, 32, 3), dtype=np.float32))
                labels = jnp.asarray(rng.integers(0, 10, batch))
                state = {"params": jax.tree.map(jnp.asarray, ra.init_params(cfg, seed=0))}
                state["opt"] = jb.init_optimizer(state["params"], opt_cfg)

                def run():
                    state["params"], state["opt"], metrics = step(state["params"], state["opt"], images, labels)
                    return metrics["loss"]

                seconds = median_seconds(run, args.repeats)
                tflops = cfg.flops_per_image() * batch / seconds / 1e12
                print(f"| {kind} | {precision} | {batch} | {seconds * 1e3:.2f} | {batch / seconds:.0f} | "
                      f"{tflops:.1f} | {100 * tflops / peak:.1f}% |", flush=True)


def attention_rows(args, peak):
    jb = ra.backend("jax")
    relu = ra.AttentionConfig(kind="relu", alpha=1.0)
    heads, head_dim, batch = 8, 64, 1
    print(f"\n## attention forward + backward, batch {batch}, {heads} heads, head width {head_dim}, bfloat16 "
          f"inputs; TFLOP/s counts 12 B H L^2 Dh (no recomputation)\n")
    print("| L | op | ms | TFLOP/s |")
    print("|---|---|---|---|")
    cudnn_ok = jax.default_backend() == "gpu"
    for length in args.lengths:
        keys = jax.random.split(jax.random.key(length), 4)
        q, k, v, dout = (jax.random.normal(key, (batch, length, heads, head_dim), jnp.bfloat16) for key in keys)
        ops = {
            "relu/L blocked (JAX backend)": lambda q, k, v: jb.attention(q, k, v, relu, impl="blocked",
                                                                          compute_dtype=jnp.bfloat16),
            "relu/L dense (JAX backend)": lambda q, k, v: jb.attention(q, k, v, relu, impl="dense",
                                                                        compute_dtype=jnp.bfloat16, fast=True),
            "softmax jax.nn.dot_product_attention (xla)": lambda q, k, v: jax.nn.dot_product_attention(
                q, k, v, implementation="xla"),
        }
        if cudnn_ok:
            from reluattn.jax_backend.fast.pallas_attention import pallas_attention
            for block_q, block_k, *launch in args.pallas_blocks:
                tuning = dict(zip(("num_warps", "num_stages"), launch))
                label = f"{block_q}x{block_k}" + ("".join(f", {k} {v}" for k, v in tuning.items()))
                ops[f"relu/L Pallas {label} (this package)"] = functools.partial(
                    pallas_attention, attn_cfg=relu, block_q=block_q, block_k=block_k, **tuning)
            ops["softmax jax.nn.dot_product_attention (cudnn)"] = lambda q, k, v: jax.nn.dot_product_attention(
                q, k, v, implementation="cudnn")
        flops = 12 * batch * heads * length ** 2 * head_dim
        for name, op in ops.items():
            def forward_backward(q, k, v, dout, op=op):
                out, pullback = jax.vjp(op, q, k, v)
                return out, pullback(dout.astype(out.dtype))
            compiled = jax.jit(forward_backward)
            try:
                seconds = median_seconds(lambda: compiled(q, k, v, dout), args.repeats)
            except Exception as error:  # e.g. out of memory for the dense path at long L
                print(f"| {length} | {name} | failed: {type(error).__name__}: {str(error).splitlines()[0][:80]} | |")
                continue
            print(f"| {length} | {name} | {seconds * 1e3:.2f} | {flops / seconds / 1e12:.1f} |", flush=True)


def pallas_check(args):
    """The Pallas kernel against the dense path computed in float32 from the same bfloat16 inputs:
    relative error of the output and of each input gradient, per kind."""
    from reluattn.jax_backend.fast.pallas_attention import KINDS, pallas_attention
    jb = ra.backend("jax")
    print("\n## Pallas kernel vs dense float32 reference (bfloat16 inputs, L=1024, batch 2, 4 heads, Dh 64)\n")
    print("| kind | out | dq | dk | dv |")
    print("|---|---|---|---|---|")
    keys = jax.random.split(jax.random.key(1), 4)
    q, k, v, g = (jax.random.normal(key, (2, 1024, 4, 64), jnp.bfloat16) for key in keys)
    for kind in KINDS:
        cfg = ra.AttentionConfig(kind=kind, alpha=1.0)
        block_q, block_k = args.pallas_blocks[0][:2]
        fast = jax.vjp(lambda q, k, v: pallas_attention(q, k, v, cfg, block_q=block_q, block_k=block_k), q, k, v)
        exact = jax.vjp(lambda q, k, v: jb.attention(q, k, v, cfg, impl="dense"),
                        *(x.astype(jnp.float32) for x in (q, k, v)))
        pairs = [(fast[0], exact[0])] + list(zip(fast[1](g), exact[1](g.astype(jnp.float32))))
        errors = [float(jnp.linalg.norm(a.astype(jnp.float32) - b) / jnp.linalg.norm(b)) for a, b in pairs]
        print(f"| {kind} | " + " | ".join(f"{e:.1e}" for e in errors) + " |", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[128, 1024])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, to see it run anywhere")
    parser.add_argument("--skip", nargs="*", default=[], choices=["train_step", "attention", "pallas_check"])
    parser.add_argument("--pallas-blocks", nargs="+", default=["64x64", "128x64"],
                        help="Pallas kernel launches to time, QxK or QxKxWARPSxSTAGES (the first is checked)")
    args = parser.parse_args(argv)
    args.pallas_blocks = [tuple(int(n) for n in text.split("x")) for text in args.pallas_blocks]
    if args.quick:
        args.batches, args.lengths, args.repeats = [8], [128], 2
    device = jax.devices()[0]
    peak = matmul_peak_tflops(256 if args.quick else 8192, args.repeats)
    datasheet = next((value for name, value in DATASHEET_BF16_TFLOPS.items() if name in device.device_kind), None)
    print(f"# device: {device.device_kind} ({jax.default_backend()}), jax {jax.__version__}; measured bfloat16 "
          f"matmul peak {peak:.0f} TFLOP/s" + (f" (datasheet dense bfloat16 {datasheet:.0f})" if datasheet else ""))
    if "train_step" not in args.skip:
        train_step_rows(args, peak)
    if "pallas_check" not in args.skip and jax.default_backend() == "gpu":
        pallas_check(args)
    if "attention" not in args.skip:
        attention_rows(args, peak)


if __name__ == "__main__":
    main()
