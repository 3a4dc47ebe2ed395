"""The JAX backend: the same functional API and parameter tree as the NumPy backend, jit-compiled.

    import reluattn as ra
    jb = ra.backend("jax")
    logits = jb.apply(params, images, cfg)                          # (B, K)
    loss, grads = jb.loss_and_grad(params, images, labels, cfg)     # grads: same tree as params
    opt_state = jb.init_optimizer(params, opt_cfg)
    params, opt_state, metrics = jb.train_step(params, opt_state, images, labels, cfg, opt_cfg)

Shared with the NumPy backend: apply, loss_and_grad, attention, attention_weights, init_optimizer,
train_step, learning_rate. JAX-only: `compute_dtype=jnp.bfloat16` on every entry point (bfloat16 matmuls,
float32 statistics), `make_train_step` (the pure step, for loops that add on-device augmentation and jit
it themselves), `forward` / `loss_and_logits` (un-jitted pure functions), and the data-parallel helpers in
`sharding`. Results are JAX arrays (`np.asarray(x)` / `float(x)` to bring them to the host).

Files: matmul.py (every matmul: precision and memory layout), layers.py (dense, LayerNorm, GELU, MLP),
cpu_setup.py (process settings for XLA:CPU), attention.py (weight kinds, dense and blocked attention,
causal masks), blocked_attention.py (the tiled custom_vjp behind impl="blocked"), model.py (the ViT, loss,
jitted entry points), train.py (optax AdamW, train step), sharding.py (data parallel over devices and hosts);
optional, imported by nothing else: pallas_attention.py (a fused GPU kernel for the point-wise kinds).
"""

from . import cpu_setup

cpu_setup.configure()  # before anything starts an XLA backend; see cpu_setup.py (RELUATTN_CPU_SETUP=0 opts out)

from . import sharding  # noqa: E402
from .attention import attention, attention_weights
from .model import apply, forward, loss_and_grad, loss_and_logits
from .sharding import data_mesh, make_sharded_train_step, replicate, shard_batch, sharded_train_step
from .train import adamw_update, init_optimizer, learning_rate, make_optimizer, make_train_step, train_step

__all__ = [
    "apply", "loss_and_grad", "attention", "attention_weights", "init_optimizer", "train_step", "learning_rate",
    "forward", "loss_and_logits", "adamw_update", "make_optimizer", "make_train_step",
    "sharding", "data_mesh", "replicate", "shard_batch", "make_sharded_train_step", "sharded_train_step",
]
