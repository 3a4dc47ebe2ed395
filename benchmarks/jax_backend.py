"""Speed of the JAX backend on the SPEC reference config, beside the NumPy backend and (when installed)
a plain PyTorch eager ViT of the same shapes.

    PYTHONPATH=. python benchmarks/jax_backend.py                 # the full table (minutes on a CPU)
    PYTHONPATH=. python benchmarks/jax_backend.py --quick         # a tiny model, to see that it runs

Reference config (SPEC §3): ViT 192 wide, 6 deep, 3 heads, MLP 384, patch 4, class token, 32x32x3 images,
10 classes, batch 128; `cfg.flops_per_image()` (0.753 GFLOP forward+backward) gives the GFLOP/s.

Each measurement: `--warmup` untimed calls (compilation, caches), then `--repeats` timed calls of one
batch each, waiting for the result every time; the table shows the median. Rows:
  * jax loss_and_grad / train_step, relu and softmax attention, float32 and bfloat16 compute;
  * numpy loss_and_grad (float32);
  * torch (if `import torch` works; not a dependency): the same ViT in eager mode, loss+backward and a full
    AdamW step, float32 and bfloat16 autocast; the last column is the JAX row's speed over PyTorch's.
Do not run it on a machine others are using: the numbers would be theirs too.
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import reluattn as ra

jb, nb = ra.backend("jax"), ra.backend("numpy")


def median_seconds(run, warmup: int, repeats: int) -> float:
    """Median wall time of `run()` (which must block until its result is ready) after `warmup` calls."""
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def jax_runs(cfg, opt_cfg, params, images, labels, compute_dtype):
    """(loss_and_grad, train_step) closures that block on their results."""
    def loss_and_grad():
        loss, grads = jb.loss_and_grad(params, images, labels, cfg, compute_dtype=compute_dtype)
        jax.block_until_ready((loss, grads))

    state = {"params": jax.tree.map(jnp.asarray, params)}
    state["opt"] = jb.init_optimizer(state["params"], opt_cfg)

    def train_step():  # the step donates its inputs, so carry the new ones along
        state["params"], state["opt"], metrics = jb.train_step(
            state["params"], state["opt"], images, labels, cfg, opt_cfg, compute_dtype=compute_dtype)
        jax.block_until_ready(metrics["loss"])

    return loss_and_grad, train_step


# ------------------------------------------------------------------------------------- PyTorch baseline

def torch_runs(torch, cfg, opt_cfg, images, labels, autocast_bfloat16: bool):
    """A plain eager PyTorch ViT of the same shapes and maths (pre-LN, fused qkv, tanh GELU, eps 1e-6,
    attention relu(s)/L or softmax), and (loss+backward, AdamW step) closures."""
    nn, functional = torch.nn, torch.nn.functional
    dim, heads, head_dim, tokens = cfg.dim, cfg.heads, cfg.head_dim, cfg.num_tokens
    kind, alpha = cfg.attention.kind, cfg.attention.alpha

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(dim, eps=1e-6), nn.LayerNorm(dim, eps=1e-6)
            self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            self.fc1, self.fc2 = nn.Linear(dim, cfg.mlp_dim), nn.Linear(cfg.mlp_dim, dim)

        def forward(self, x):
            batch = x.shape[0]
            q, k, v = self.qkv(self.ln1(x)).view(batch, tokens, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
            scores = (q * head_dim ** -0.5) @ k.transpose(-1, -2)  # (B, H, T, T)
            if kind == "softmax":
                weights = scores.softmax(dim=-1)
            else:
                weights = functional.relu(scores) * tokens ** -alpha
            out = (weights @ v).transpose(1, 2).reshape(batch, tokens, dim)
            x = x + self.proj(out)
            return x + self.fc2(functional.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

    class ViT(nn.Module):
        def __init__(self):
            super().__init__()
            self.patch_embed = nn.Linear(cfg.patch_dim, dim)
            self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
            self.pos_embed = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)
            self.blocks = nn.ModuleList([Block() for _ in range(cfg.depth)])
            self.ln_f, self.head = nn.LayerNorm(dim, eps=1e-6), nn.Linear(dim, cfg.num_classes)

        def forward(self, images):
            batch, side, p = images.shape[0], cfg.image_size, cfg.patch_size
            grid = side // p
            patches = images.view(batch, grid, p, grid, p, cfg.channels).permute(0, 1, 3, 2, 4, 5)
            x = self.patch_embed(patches.reshape(batch, grid * grid, cfg.patch_dim))
            x = torch.cat([self.cls_token.expand(batch, -1, -1), x], dim=1) + self.pos_embed
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x)[:, 0])

    model = ViT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=opt_cfg.learning_rate, weight_decay=opt_cfg.weight_decay,
                                  betas=(opt_cfg.b1, opt_cfg.b2), eps=opt_cfg.eps)
    x, y = torch.from_numpy(np.asarray(images, np.float32)), torch.from_numpy(np.asarray(labels, np.int64))

    def loss_and_backward():
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast_bfloat16):
            loss = functional.cross_entropy(model(x), y)
        loss.backward()

    def train_step():
        loss_and_backward()
        if opt_cfg.clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), opt_cfg.clip_norm)
        optimizer.step()

    return loss_and_backward, train_step


# ------------------------------------------------------------------------------------------------ table

def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--kinds", nargs="+", default=["relu", "softmax"])
    parser.add_argument("--quick", action="store_true", help="a tiny model and batch, only to see it run")
    parser.add_argument("--no-numpy", action="store_true", help="skip the (slow) NumPy backend")
    parser.add_argument("--no-torch", action="store_true", help="skip PyTorch even if installed")
    args = parser.parse_args(argv)

    base = ra.ViTConfig()  # the SPEC reference model
    if args.quick:
        base = base.replace(dim=32, depth=2, heads=2, mlp_dim=64)
        args.batch, args.warmup, args.repeats = min(args.batch, 16), 1, 2
    opt_cfg = ra.OptimizerConfig(total_steps=10_000, warmup_steps=100)
    rng = np.random.default_rng(0)
    images = rng.normal(size=(args.batch, base.image_size, base.image_size, base.channels)).astype(np.float32)
    labels = rng.integers(0, base.num_classes, size=args.batch)

    torch = None
    if not args.no_torch:
        try:
            import torch  # optional: only for the side-by-side baseline
        except ImportError:
            torch = None

    print(f"# {platform.node()} {platform.processor() or platform.machine()}, {jax.devices()[0].device_kind}, "
          f"jax {jax.__version__}" + (f", torch {torch.__version__} ({torch.get_num_threads()} threads)" if torch else
                                       ", torch not installed"))
    print(f"# ViT dim={base.dim} depth={base.depth} heads={base.heads} mlp={base.mlp_dim} patch={base.patch_size} "
          f"tokens={base.num_tokens}, batch {args.batch}, {base.flops_per_image() / 1e9:.3f} GFLOP/image fwd+bwd, "
          f"median of {args.repeats} after {args.warmup} warm-up")
    header = f"{'backend':8} {'attention':9} {'precision':17} {'function':14} {'ms/batch':>9} {'img/s':>8} {'GFLOP/s':>8} {'jax/torch':>9}"
    print(header)
    print("-" * len(header))

    def row(backend, kind, precision, function, seconds, cfg, versus=None):
        images_per_second = args.batch / seconds
        gflops = images_per_second * cfg.flops_per_image() / 1e9
        ratio = f"{versus / seconds:9.2f}" if versus else f"{'':9}"
        print(f"{backend:8} {kind:9} {precision:17} {function:14} {seconds * 1e3:9.1f} {images_per_second:8.1f} "
              f"{gflops:8.1f} {ratio}", flush=True)

    for kind in args.kinds:
        cfg = base.replace(attention=ra.AttentionConfig(kind=kind, alpha=1.0))
        params = ra.init_params(cfg, seed=0)
        torch_times = {}
        if torch is not None:
            for precision, autocast in (("float32", False), ("bfloat16 autocast", True)):
                torch.manual_seed(0)
                backward, step = torch_runs(torch, cfg, opt_cfg, images, labels, autocast)
                torch_times[(precision, "loss_and_grad")] = median_seconds(backward, args.warmup, args.repeats)
                torch_times[(precision, "train_step")] = median_seconds(step, args.warmup, args.repeats)
                for function in ("loss_and_grad", "train_step"):
                    row("torch", kind, precision, function, torch_times[(precision, function)], cfg)
        for precision, compute_dtype in (("float32", None), ("bfloat16", jnp.bfloat16)):
            runs = dict(zip(("loss_and_grad", "train_step"),
                            jax_runs(cfg, opt_cfg, params, images, labels, compute_dtype)))
            for function, run in runs.items():
                seconds = median_seconds(run, args.warmup, args.repeats)
                baseline = torch_times.get(("float32" if compute_dtype is None else "bfloat16 autocast", function))
                row("jax", kind, precision, function, seconds, cfg, versus=baseline)
        if not args.no_numpy:
            seconds = median_seconds(lambda: nb.loss_and_grad(params, images, labels, cfg),
                                     min(args.warmup, 1), max(1, math.ceil(args.repeats / 2)))
            row("numpy", kind, "float32", "loss_and_grad", seconds, cfg)


if __name__ == "__main__":
    main()
