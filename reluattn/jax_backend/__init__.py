"""The JAX backend: the NumPy backend's twin, file for file and name for name, in plain jnp with autodiff,
jit-compiled. Importing it changes nothing in the process.

    import reluattn as ra
    jb = ra.backend("jax")
    logits = jb.apply(params, images, cfg)                          # (B, K)
    loss, grads = jb.loss_and_grad(params, images, labels, cfg)     # grads: same tree as params
    opt_state = jb.init_optimizer(params, opt_cfg)
    params, opt_state, metrics = jb.train_step(params, opt_state, images, labels, cfg, opt_cfg)

The default path is traceable end to end: jax.grad (also with respect to the images), jax.jvp,
jax.jacfwd, jax.hessian and jax.vmap all work on apply / loss_and_grad / forward / loss_and_logits. Speed
is opt-in: `fast=True` on every entry point (the custom-derivative matmuls, LayerNorm and GELU of fast/,
reverse mode only), `compute_dtype=jnp.bfloat16` (bfloat16 matmuls, float32 statistics),
AttentionConfig(impl="blocked") (the tiled kernel), and `fast.cpu_setup.configure()` (malloc settings for
XLA:CPU, called by the trainer, never on import). Results are JAX arrays (`np.asarray(x)` / `float(x)`).

In someone else's model: `dot_product_attention(query, key, value, bias, mask, *, kind="relu", alpha=1.0, ...)`
takes jax.nn.dot_product_attention's arguments, and `attention_fn("relu")` is a Flax attention_fn
(interop.py; docs/own-model.md). Flax is never imported.

Files: layers.py attention_weights.py regulariser.py multihead_attention.py mlp.py model.py optim.py
long_sequences.py interop.py, as in NumPy; sharding.py, the one JAX-only file (data parallelism over devices and hosts:
NumPy has one CPU and no devices to spread over); fast/ (opt-in speed, see fast/__init__.py).

NumPy <-> JAX, file for file and name for name: the name table, and where the two differ and why, is
`reluattn/twins.py` (`print(reluattn.twins.table())`), checked against both backends by tests/parity/test_twins.py.
"""

from . import (attention_weights, interop, layers, long_sequences, mlp, model, multihead_attention, optim, regulariser,
               sharding)
from .interop import attention_fn, dot_product_attention
from .model import apply, attention_regulariser, forward, loss_and_grad, loss_and_logits, loss_terms
from .multihead_attention import attention
from .optim import adamw_update, init_optimizer, learning_rate, make_optimizer, make_train_step, train_step
from .sharding import data_mesh, make_sharded_train_step, replicate, shard_batch, sharded_train_step

__all__ = [
    "apply", "loss_and_grad", "attention_regulariser", "loss_terms", "attention", "dot_product_attention",
    "attention_fn", "init_optimizer", "train_step",
    "learning_rate",
    "forward", "loss_and_logits", "adamw_update", "make_optimizer", "make_train_step",
    "layers", "attention_weights", "multihead_attention", "mlp", "model", "optim", "long_sequences", "regulariser",
    "interop", "sharding", "data_mesh", "replicate", "shard_batch", "make_sharded_train_step", "sharded_train_step",
]
