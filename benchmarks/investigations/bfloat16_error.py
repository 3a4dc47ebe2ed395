"""How far `compute_dtype=jnp.bfloat16` is from float32: the worst and typical errors over drawn models.

    PYTHONPATH=. python benchmarks/investigations/bfloat16_error.py [--examples 200] [--seed 0]

Draws --examples models from the family that tests/jax_backend/test_jax_model.py checks the bfloat16 path on
(every option, head width 8 or 16, dense attention, random parameters, batch 4: reluattn.testing's
vit_configs and compute_dtype_errors, as the test), runs each in float32 and with bfloat16 matmuls, and
prints the worst and median of the three errors that test bounds: logits (relative to the largest logit), the loss (relative), and all gradient leaves as one
vector (norm-wise relative error, with its cosine). Draws where rounding empties or fills a whole relu row
while the loss holds the regulariser (compute_dtype_errors' "rows across the floor") are counted and their
worst gradient error printed apart: there the loss itself jumps, and the test sets them aside. The results
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
        seen.append([errors[name] for name in ("logits", "loss", "gradients", "gradient cosine",
                                               "rows across the floor")])

    measure()
    every = np.array(seen)
    across = every[:, 4] > 0
    table = every[~across]
    print(f"# {len(seen)} drawn models (head width 8 or 16, dense attention, batch 4), bfloat16 matmuls vs float32;"
          f" {across.sum()} with a regulariser row across the floor set aside"
          + (f" (their worst gradient error {every[across, 2].max():.2e})" if across.any() else ""))
    print("| error | worst | median |")
    print("|---|---|---|")
    for column, name in enumerate(["logits (relative to the largest logit)", "loss (relative)",
                                   "gradients, norm-wise relative"]):
        print(f"| {name} | {table[:, column].max():.2e} | {np.median(table[:, column]):.2e} |")
    print(f"| gradient cosine | {table[:, 3].min():.4f} (lowest) | {np.median(table[:, 3]):.4f} |")


if __name__ == "__main__":
    main()
