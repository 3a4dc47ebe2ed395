"""Throughput of the NumPy backend's forward + backward (`loss_and_grad`) at the reference config (ViTConfig's defaults).

    python benchmarks/numpy_backend.py [--repeats N] [--batch B] [--kind relu softmax ...] [--float64]
                                       [--threads N]

Prints one row per attention kind: images/s and GFLOP/s (matmul FLOPs, ViTConfig.flops_per_image()).
One untimed warm-up call comes first; the time is the median of --repeats calls. BLAS threads are whatever
NumPy's BLAS picks unless --threads sets them (on a machine shared with other work, 1 can be much faster).
NumPy is imported only after the arguments are read, so that --threads can take effect.
"""

from __future__ import annotations

import argparse
import os

from timing import median_seconds

ATTENTION_KINDS = ("softmax", "relu", "relu2", "gelu", "softplus", "sigmoid", "relu6", "identity", "sigmoid_bias")
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def measure(kind, batch, repeats, float64, seed=0):
    """(config, seconds per loss_and_grad call): the median of `repeats`, after one warm-up."""
    import numpy as np

    import reluattn as ra
    from reluattn.numpy_backend import loss_and_grad

    cfg = ra.ViTConfig(attention=ra.AttentionConfig(kind=kind, alpha=1.0))  # the reference config
    dtype = np.float64 if float64 else np.float32
    params = ra.init_params(cfg, seed=seed, dtype=dtype)
    rng = np.random.default_rng(seed)
    images = rng.uniform(size=(batch, cfg.image_size, cfg.image_size, cfg.channels)).astype(dtype)
    labels = rng.integers(0, cfg.num_classes, size=batch)
    return cfg, median_seconds(lambda: loss_and_grad(params, images, labels, cfg), repeats, warmup=1)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per row (median reported)")
    parser.add_argument("--batch", type=int, default=128, help="images per call (the reference: 128)")
    parser.add_argument("--kind", nargs="+", default=["relu", "softmax"], choices=ATTENTION_KINDS,
                        help="attention kinds to time")
    parser.add_argument("--float64", action="store_true", help="compute in float64 instead of float32")
    parser.add_argument("--threads", type=int, default=None, help="BLAS threads (default: the BLAS's choice)")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.batch < 1 or (args.threads is not None and args.threads < 1):
        parser.error("--repeats, --batch and --threads must be >= 1")
    if args.threads is not None:
        os.environ.update({variable: str(args.threads) for variable in THREAD_VARIABLES})

    import numpy as np

    print(f"NumPy {np.__version__}, {'float64' if args.float64 else 'float32'}, loss_and_grad "
          f"(forward + backward), median of {args.repeats}, BLAS threads: {args.threads or 'default'}")
    header = f"{'config':<44} {'batch':>5} {'images/s':>9} {'GFLOP/s':>8} {'s/call':>7}"
    print(header)
    print("-" * len(header))
    for kind in args.kind:
        cfg, seconds = measure(kind, args.batch, args.repeats, args.float64)
        images_per_second = args.batch / seconds
        gflops = cfg.flops_per_image(backward=True) * images_per_second / 1e9
        name = f"ViT d{cfg.dim} x{cfg.depth} h{cfg.heads} m{cfg.mlp_dim} p{cfg.patch_size} {kind}"
        print(f"{name:<44} {args.batch:>5} {images_per_second:>9.1f} {gflops:>8.2f} {seconds:>7.3f}")


if __name__ == "__main__":
    main()
