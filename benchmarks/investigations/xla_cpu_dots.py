"""Which matmul layouts XLA:CPU runs fast: the tile products of blocked attention, timed one by one.

    python benchmarks/investigations/xla_cpu_dots.py [--tile 1024] [--head-dim 64] [--heads 1] [--repeats 20]

For each einsum (heads g, queries q, keys k, head width d) it prints which kernel XLA chose -- a YNNPACK
fusion ("ynn") or its generic dot ("eigen") -- and the GFLOP/s of the best of --repeats calls. XLA:CPU
passes a dot to YNNPACK only when the left operand is read row by row (its contracted axis is its last),
so the backward products with a transposed left operand, p^T dout and ds^T q, are slow when the tile is
computed queries-first (g q k) and fast when it is computed keys-first (g k q). That is why the blocked
backward computes s^T = k q^T (reluattn/jax_backend/fast/blocked_attention.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for the shared timer
from timing import best_seconds  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tile", type=int, default=1024, help="queries = keys per tile")
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--heads", type=int, default=1, help="heads per tile (the batch axis g)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = parser.parse_args(argv)
    g, b, d = args.heads, args.tile, args.head_dim
    shapes = {"g": g, "q": b, "k": b, "d": d}
    products = [
        ("forward  s = q k^T", "gqd,gkd->gqk"),
        ("forward  out = p v", "gqk,gkd->gqd"),
        ("backward dv = p^T dout, dk = ds^T q (queries-first tile)", "gqk,gqd->gkd"),
        ("backward dq = ds k (queries-first tile)", "gqk,gkd->gqd"),
        ("backward s^T = k q^T (keys-first tile)", "gkd,gqd->gkq"),
        ("backward dv = p^T dout, dk = ds^T q (keys-first tile)", "gkq,gqd->gkd"),
        ("backward dq^T = k^T ds^T (keys-first tile)", "gdk,gkq->gdq"),
    ]
    dtype = jnp.dtype(args.dtype)
    print(f"# tile {b} x {b}, head dim {d}, {g} head(s) per tile, {args.dtype} inputs, float32 sums")
    print("| product | einsum | kernel | GFLOP/s |")
    print("|---|---|---|---|")
    for name, equation in products:
        left, right = equation.split("->")[0].split(",")
        a = jnp.ones([shapes[axis] for axis in left], dtype)
        c = jnp.ones([shapes[axis] for axis in right], dtype)
        product = jax.jit(lambda a, c, equation=equation: jnp.einsum(equation, a, c,
                                                                      preferred_element_type=jnp.float32))
        kernel = "ynn" if "__ynn_fusion" in product.lower(a, c).compile().as_text() else "eigen"
        product(a, c).block_until_ready()
        best = best_seconds(lambda: product(a, c).block_until_ready(), args.repeats)
        print(f"| {name} | `{equation}` | {kernel} | {2 * g * b * b * d / best / 1e9:.0f} |")


if __name__ == "__main__":
    main()
