"""How far `compute_dtype=jnp.bfloat16` is from float32: the worst and typical errors over drawn models.

    PYTHONPATH=. python benchmarks/investigations/bfloat16_error.py [--examples 200] [--seed 0]

Draws --examples models from the family that tests/jax_backend/test_jax_model.py checks the bfloat16 path on
(every option, head width 8 or 16, dense attention, random parameters, batch 4: reluattn.testing's
vit_configs and compute_dtype_errors, as the test), runs each in float32 and with bfloat16 matmuls, and
prints the worst and median of the three errors that test bounds: logits (relative to the largest logit),
the loss (relative), and all gradient leaves as one vector (norm-wise relative error, with its cosine).
Draws where rounding empties or fills a whole relu row while the loss holds the regulariser
(compute_dtype_errors' "rows across the floor") are counted and their worst gradient error printed apart: there the loss itself jumps, and the test sets them aside. Gradients
are printed for draws without and with the regulariser apart, beside each draw's sensitivity (how far
rounding only the parameters and images moves the float32 gradients) and, for the draws whose gradients are
off by more than 0.3, the ratio of the two: the test allows max(0.5, 3 x sensitivity). The results
are in docs/jax_backend.md and beside the test's tolerances.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import reluattn as ra
from reluattn.testing import compute_dtype_errors, vit_configs


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed, for a repeatable draw")
    args = parser.parse_args(argv)
    seen = []

    @seed(args.seed)
    @settings(max_examples=args.examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(cfg=vit_configs(head_dims=(8, 16), impls=("dense",), reg_weights=(0.0, 0.5)),
           data_seed=st.integers(0, 2**16))
    def measure(cfg, data_seed):
        errors = compute_dtype_errors(ra.backend("jax"), cfg, data_seed, jnp.bfloat16, fast=True)[1]
        jax.clear_caches()  # every example compiles four programs; kept, they exhaust the process's memory maps
        seen.append([errors[name] for name in ("logits", "loss", "gradients", "gradient cosine", "sensitivity",
                                               "rows across the floor")] + [cfg.attention.reg_weight > 0])

    measure()
    every = np.array(seen, dtype=float)
    across = every[:, 5] > 0
    table, regularised = every[~across], every[~across, 6] > 0
    print(f"# {len(seen)} drawn models (head width 8 or 16, dense attention, batch 4), bfloat16 matmuls vs float32;"
          f" {regularised.sum()} of the {len(table)} kept hold the regulariser; {across.sum()} with a regulariser row"
          " across the floor set aside" + (f" (their worst gradient error {every[across, 2].max():.2e})" if across.any() else ""))
    print("| error | worst | median |")
    print("|---|---|---|")
    rows = [("logits (relative to the largest logit)", table[:, 0]), ("loss (relative)", table[:, 1]),
            ("gradients, norm-wise relative, without the regulariser", table[~regularised, 2]),
            ("gradients, norm-wise relative, with the regulariser", table[regularised, 2]),
            ("sensitivity (the float32 gradients of inputs rounded to bfloat16)", table[:, 4])]
    for name, column in rows:
        if column.size == 0:
            print(f"| {name} | (no draw) | |")
            continue
        print(f"| {name} | {column.max():.2e} | {np.median(column):.2e} |")
    print(f"| gradient cosine | {table[:, 3].min():.4f} (lowest) | {np.median(table[:, 3]):.4f} |")
    beyond = table[:, 2] > 0.3
    if beyond.any():
        ratios = table[beyond, 2] / table[beyond, 4]
        print(f"| gradients / sensitivity, the {beyond.sum()} draws with gradients above 0.3 | {ratios.max():.2f} |"
              f" {np.median(ratios):.2f} |")


if __name__ == "__main__":
    main()
