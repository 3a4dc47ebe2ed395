"""Speed of the JAX backend on the reference config, side by side with a plain PyTorch eager ViT of the
same shapes (when torch is installed) and the NumPy backend.

    PYTHONPATH=. python benchmarks/jax_backend.py                  # the full table (minutes on a CPU)
    PYTHONPATH=. python benchmarks/jax_backend.py --quick          # a tiny model, to see that it runs

Reference config (ViTConfig's defaults): ViT 192 wide, 6 deep, 3 heads, MLP 384, patch 4, class token, 32x32x3 images,
10 classes, batch 128; `cfg.flops_per_image()` (0.753 GFLOP forward+backward) gives the GFLOP/s.

How it measures. Each framework runs in its own process (an idle framework's threads spin for a while
and would steal the cores from the other); the parent process alternates between them in rounds, so a
load spike from other work hits both alike:
  * every runner is built and called `--warmup` times first (compilation, caches, allocator warm-up);
  * then in each round every runner is called `--repeats` times in a row, timed one call at a time (each
    call waits for its result). Around each call the worker also reads /proc/stat: the CPU time the
    machine spent busy minus its own tells how many cores other processes took meanwhile. A call is
    quiet if that is under `--quiet` cores. Rounds go on until every row has `--rounds` rounds' worth of
    quiet calls (or `--max-rounds`); a row is the median of its quiet calls, and says how many it had.
    (On 2 cores a framework whose threads wait for each other -- PyTorch's OpenMP -- slows down
    several-fold when another process takes a core, so unquiet numbers mean little.)
Rows: jax loss_and_grad / train_step with fast=True (the speed paths the training presets use, with
jax_backend.fast.cpu_setup.configure() called first, as the trainer does), relu and softmax attention,
float32 and bfloat16 compute; torch
(not a dependency) the same ViT in eager mode -- attention written out as matmul, relu(s)/L or softmax,
matmul -- float32 and bfloat16 autocast, plus softmax through F.scaled_dot_product_attention; numpy
loss_and_grad (float32, timed once per round). The jax/torch column divides by the plain torch row of the
same precision and function. Torch runs on as many threads as XLA (all cores).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import reluattn as ra
from timing import timed

FUNCTIONS = ("loss_and_grad", "train_step")


def jax_runners(cfg, opt_cfg, params, images, labels, compute_dtype):
    """{function: closure} for the JAX backend, on its fast path (fast=True, as the training presets run
    it); each closure blocks until its result is ready."""
    jb = ra.backend("jax")
    params = jax.tree.map(jnp.asarray, params)
    images, labels = jnp.asarray(images), jnp.asarray(labels)

    def loss_and_grad():
        jax.block_until_ready(jb.loss_and_grad(params, images, labels, cfg, compute_dtype=compute_dtype, fast=True))

    state = {"params": jax.tree.map(jnp.array, params)}  # a copy: the step donates (consumes) its inputs
    state["opt"] = jb.init_optimizer(state["params"], opt_cfg)

    def train_step():
        state["params"], state["opt"], metrics = jb.train_step(
            state["params"], state["opt"], images, labels, cfg, opt_cfg, compute_dtype=compute_dtype, fast=True,
            donate=True)
        jax.block_until_ready(metrics["loss"])

    return {"loss_and_grad": loss_and_grad, "train_step": train_step}


# ------------------------------------------------------------------------------------- PyTorch baseline

def torch_runners(torch, cfg, opt_cfg, images, labels, autocast_bfloat16: bool, sdpa: bool = False):
    """A plain eager PyTorch ViT of the same shapes and maths (pre-LN, fused qkv, tanh GELU, eps 1e-6,
    attention relu(s)/L or softmax written out; or F.scaled_dot_product_attention when `sdpa`), and its
    {function: closure}: loss+backward, and a full AdamW step (with clipping, like the JAX step)."""
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
            if sdpa:
                out = functional.scaled_dot_product_attention(q, k, v)
            else:
                scores = (q * head_dim ** -0.5) @ k.transpose(-1, -2)  # (B, H, T, T)
                if kind == "softmax":
                    weights = scores.softmax(dim=-1)
                else:
                    weights = functional.relu(scores) * tokens ** -alpha
                out = weights @ v
            x = x + self.proj(out.transpose(1, 2).reshape(batch, tokens, dim))
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

    def loss_and_grad():
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast_bfloat16):
            loss = functional.cross_entropy(model(x), y)
        loss.backward()

    def train_step():
        loss_and_grad()
        if opt_cfg.clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), opt_cfg.clip_norm)
        optimizer.step()

    return {"loss_and_grad": loss_and_grad, "train_step": train_step}


# ------------------------------------------------------------------------------------------- processes

def build_runners(backend, args):
    """{(backend, kind, precision, function): closure} for one backend, in this process."""
    base = reference_config(args)
    opt_cfg = ra.OptimizerConfig(total_steps=10_000, warmup_steps=100)
    rng = np.random.default_rng(0)
    images = rng.normal(size=(args.batch, base.image_size, base.image_size, base.channels)).astype(np.float32)
    labels = rng.integers(0, base.num_classes, size=args.batch)
    runners = {}
    for kind in args.kinds:
        cfg = base.replace(attention=ra.AttentionConfig(kind=kind, alpha=1.0))
        params = ra.init_params(cfg, seed=0)
        if backend == "jax":
            for precision, compute_dtype in (("float32", None), ("bfloat16", jnp.bfloat16)):
                for function, run in jax_runners(cfg, opt_cfg, params, images, labels, compute_dtype).items():
                    runners[("jax", kind, precision, function)] = run
        elif backend == "torch":
            import torch
            torch.set_num_threads(usable_cores())
            for name, sdpa in [("torch", False)] + ([("torch sdpa", True)] if kind == "softmax" else []):
                for precision, autocast in (("float32", False), ("bfloat16", True)):
                    torch.manual_seed(0)
                    for function, run in torch_runners(torch, cfg, opt_cfg, images, labels, autocast, sdpa).items():
                        runners[(name, kind, precision, function)] = run
        elif backend == "numpy":
            runners[("numpy", kind, "float32", "loss_and_grad")] = (
                lambda params=params, cfg=cfg: ra.backend("numpy").loss_and_grad(params, images, labels, cfg))
    return {key: run for key, run in runners.items() if key[3] in args.functions}


def worker(backend, args):
    """Build and warm up one backend's runners, then time them whenever the parent writes a line."""
    if backend == "jax":  # as the trainer does, before anything starts XLA (not in the torch process)
        from reluattn.jax_backend.fast import cpu_setup
        cpu_setup.configure()
    runners = build_runners(backend, args)
    for key, run in runners.items():
        for _ in range(args.warmup if backend != "numpy" else 1):
            run()
    print(json.dumps({"ready": [list(key) for key in runners], "about": describe_process(backend)}), flush=True)
    for _ in sys.stdin:  # one line per round
        times = []
        for key, run in runners.items():
            for _ in range(args.repeats if backend != "numpy" else 1):
                busy, own = busy_cpu_seconds(), sum(os.times()[:2])
                seconds = timed(run)
                others = None if busy is None else (busy_cpu_seconds() - busy - (sum(os.times()[:2]) - own)) / seconds
                times.append([list(key), seconds, others])
        print(json.dumps({"times": times}), flush=True)


def busy_cpu_seconds():
    """CPU time the whole machine has spent busy (all processes, all cores), from /proc/stat; None if unknown.
    Minus this process's own CPU time over a call, it tells how many cores other work took meanwhile."""
    try:
        with open("/proc/stat") as stat:
            user, nice, system, idle, iowait, irq, softirq, steal = map(int, stat.readline().split()[1:9])
    except (OSError, ValueError):
        return None
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def describe_process(backend) -> str:
    if backend == "jax":
        import jaxlib
        try:
            from reluattn.jax_backend.fast.cpu_setup import applied
        except ImportError:  # an older reluattn, measured for comparison
            try:
                from reluattn.jax_backend.cpu_setup import applied
            except ImportError:
                applied = "(no cpu_setup in this version)"
        return (f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}, "
                f"reluattn cpu_setup applied: {applied or 'nothing'}")
    if backend == "torch":
        import torch
        return f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    return f"numpy {np.__version__}"


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def reference_config(args):
    base = ra.ViTConfig()  # the reference model (the defaults)
    return base.replace(dim=32, depth=2, heads=2, mlp_dim=64) if args.quick else base


# ------------------------------------------------------------------------------------------------ table

def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3, help="rounds wanted with quiet calls only")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per row per round")
    parser.add_argument("--max-rounds", type=int, default=10, help="give up waiting for quiet rounds after these")
    parser.add_argument("--quiet", type=float, default=0.25,
                        help="a call is quiet if other processes used fewer cores than this meanwhile")
    parser.add_argument("--kinds", nargs="+", default=["relu", "softmax"])
    parser.add_argument("--functions", nargs="+", default=list(FUNCTIONS), choices=FUNCTIONS)
    parser.add_argument("--quick", action="store_true", help="a tiny model and batch, only to see it run")
    parser.add_argument("--no-numpy", action="store_true", help="skip the (slow) NumPy backend")
    parser.add_argument("--no-torch", action="store_true", help="skip PyTorch even if installed")
    parser.add_argument("--worker", choices=("jax", "torch", "numpy"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.batch, args.warmup, args.rounds, args.repeats, args.max_rounds = min(args.batch, 16), 1, 1, 2, 1
    if args.worker:
        return worker(args.worker, args)

    backends = ["jax"] + ([] if args.no_torch or importlib.util.find_spec("torch") is None else ["torch"])
    backends += [] if args.no_numpy else ["numpy"]
    # One process per backend: each framework's idle threads spin for a while after work, and would
    # steal the 2 cores from the other if both ran in one process. Rounds alternate between processes.
    forwarded = list(argv if argv is not None else sys.argv[1:])
    workers, about = {}, {}
    for backend in backends:  # each compiles and warms up alone: the next starts once it is ready
        workers[backend] = subprocess.Popen([sys.executable, os.path.abspath(__file__), *forwarded, "--worker", backend],
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        about[backend] = json.loads(workers[backend].stdout.readline())["about"]
    from reluattn.machine import cpu_model
    model = cpu_model()
    base = reference_config(args)
    print(f"# {model}, {usable_cores()} cores usable; {platform.system()} {platform.release()}, Python {platform.python_version()}")
    for backend, text in about.items():
        print(f"# {backend} process: {text}")
    print(f"# ViT dim={base.dim} depth={base.depth} heads={base.heads} mlp={base.mlp_dim} patch={base.patch_size} "
          f"tokens={base.num_tokens}, batch {args.batch}, {base.flops_per_image() / 1e9:.3f} GFLOP/image fwd+bwd; "
          f"{args.warmup} warm-up calls, then rounds of {args.repeats} timed calls per row until {args.rounds} rounds' "
          f"worth are quiet (other processes using < {args.quiet} cores) or {args.max_rounds} rounds", flush=True)
    samples = {}  # key -> [(seconds, cores other processes used meanwhile)]
    for round_number in range(args.max_rounds):
        for backend, process in workers.items():
            time.sleep(1.0)  # let the other processes' threads go idle
            process.stdin.write("run\n")
            process.stdin.flush()
            for key, seconds, others in json.loads(process.stdout.readline())["times"]:
                samples.setdefault(tuple(key), []).append((seconds, others))
        clean = {key: [s for s, others in values if others is None or others < args.quiet] for key, values in samples.items()}
        fewest = min(len(values) for values in clean.values())
        print(f"# round {round_number + 1}: load average (1 min) {os.getloadavg()[0]:.2f}; every row has at least "
              f"{fewest} calls during which other processes used < {args.quiet} cores", flush=True)
        if round_number + 1 >= args.rounds and fewest >= args.rounds * args.repeats:
            break
    for process in workers.values():
        process.stdin.close()
        process.wait()

    header = (f"{'backend':10} {'attention':9} {'precision':9} {'function':13} {'ms/batch':>9} {'img/s':>7} "
              f"{'GFLOP/s':>8} {'jax/torch':>9} {'quiet calls':>11}")
    print(header)
    print("-" * len(header))
    median = {key: statistics.median(clean[key] or [s for s, _ in samples[key]]) for key in samples}
    for key in sorted(median, key=lambda key: (args.kinds.index(key[1]), key[3], key[2], key[0])):
        backend, kind, precision, function = key
        seconds = median[key]
        images_per_second = args.batch / seconds
        gflops = images_per_second * base.flops_per_image() / 1e9
        baseline = median.get(("torch", kind, precision, function)) if backend == "jax" else None
        ratio = f"{baseline / seconds:9.2f}" if baseline else ""
        quiet = f"{len(clean[key])}/{len(samples[key])}"
        print(f"{backend:10} {kind:9} {precision:9} {function:13} {seconds * 1e3:9.1f} {images_per_second:7.1f} "
              f"{gflops:8.1f} {ratio:>9} {quiet:>11}", flush=True)
    if any(not values for values in clean.values()):
        print("# rows with 0 quiet calls show the median of all their calls: other work disturbed them")


if __name__ == "__main__":
    main()
