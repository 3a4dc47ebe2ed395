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
(multihead_attention.py; docs/own-model.md). Flax is never imported.

Files: layers.py attention_weights.py regulariser.py multihead_attention.py mlp.py model.py optim.py
long_sequences.py, as in NumPy; sharding.py, the one JAX-only file (data parallelism over devices and hosts:
NumPy has one CPU and no devices to spread over); fast/ (opt-in speed, see fast/__init__.py).

NumPy <-> JAX, file for file (numpy_backend/X.py beside jax_backend/X.py). A NumPy layer is a pair
`name_forward` / `name_backward`; its JAX twin is one function `name` whose backward is jax.grad's:
    file                  NumPy                                            JAX
    layers.py             dense_forward / dense_backward                   dense
                          layernorm_forward / layernorm_backward           layernorm
                          gelu_, relu_, silu_, softmax_forward / _backward gelu, relu, silu, softmax
                          targets_from_labels                              targets_from_labels
                          cross_entropy_forward / cross_entropy_backward   cross_entropy
    attention_weights.py  POINTWISE (h and h'), pointwise,               POINTWISE (h), pointwise, length_factor
                          pointwise_derivative, length_factor              (h' by autodiff)
                          attention_weights_forward / _backward            attention_weights
                          learned_attention_weights_forward / _backward,   attention_weights(..., length=)
                          learned_length_backward
    regulariser.py        attention_regulariser_forward / _backward        attention_regulariser
    multihead_attention.py heads_attention_forward / _backward             heads_attention
                          (weights_forward / _backward arguments)          (weights_function argument)
                          self_attention_forward / _backward               self_attention
                          attention                                        attention
                          dot_product_attention (forward only, the         dot_product_attention (jax.nn's drop-in),
                          reference for the JAX drop-in's values)          attention_fn (Flax's attention_fn)
    mlp.py                mlp_forward / mlp_backward                       mlp
    model.py              patchify, embed_forward / _backward              patchify, embed
                          block_forward / block_backward                   block
                          forward / backward                               forward
                          forward_backward                                 loss_and_logits (+ jax.value_and_grad)
                          apply, loss_and_grad                             apply, loss_and_grad
                          regulariser_forward / _backward                  loss_terms, blocks_regulariser
                          attention_regulariser                            attention_regulariser
    optim.py              learning_rate, init_optimizer, adamw_update,     learning_rate, init_optimizer, adamw_update,
                          train_step                                       train_step, make_optimizer, make_train_step
    long_sequences.py     DEFAULT_BLOCK_SIZE (128 keys)                    DEFAULT_BLOCK_SIZE (1024 keys)
                          causal_visible_keys                              causal_visible_keys
                          causal_attention_weights_forward / _backward     causal_attention_weights
                          blocked_attention_forward                        blocked_attention
    sharding.py           -                                                data parallel (JAX only: NumPy has one CPU)

Where they differ, and why:
  - the attention core's layout: NumPy heads-first (B, H, T, Dh), because its batched matmul needs the batch
    axes in front; JAX tokens-first (B, T, H, Dh), because an einsum names its axes and XLA picks the layout.
  - DEFAULT_BLOCK_SIZE means the same (keys per block when neither the call nor AttentionConfig.block_size
    gives one); its value differs: 128 keeps NumPy's (B, H, T, block) slabs small, 1024 is the tile size
    the JAX kernel was tuned for (docs/performance.md, "Blocked attention").
  - AttentionConfig.impl="blocked": the JAX model runs the blocked kernel; the NumPy model always runs the
    dense core (the same values; the NumPy blocked forward is in long_sequences.py, for reading).
  - JAX only: compute_dtype=jnp.bfloat16 and fast=True (the opt-in speed paths of jax_backend/fast/),
    make_train_step (the pure step, to jit with augmentation), and sharding.py (several devices).
  - dot_product_attention: NumPy's is forward only, the reference values (bias, mask, is_causal); JAX's is
    the drop-in (also jax.nn's sequence lengths, local window and implementation) with attention_fn (Flax).
"""

from . import attention_weights, layers, long_sequences, mlp, model, multihead_attention, optim, regulariser, sharding
from .model import apply, attention_regulariser, forward, loss_and_grad, loss_and_logits, loss_terms
from .multihead_attention import attention, attention_fn, dot_product_attention
from .optim import adamw_update, init_optimizer, learning_rate, make_optimizer, make_train_step, train_step
from .sharding import data_mesh, make_sharded_train_step, replicate, shard_batch, sharded_train_step

__all__ = [
    "apply", "loss_and_grad", "attention_regulariser", "loss_terms", "attention", "dot_product_attention",
    "attention_fn", "init_optimizer", "train_step",
    "learning_rate",
    "forward", "loss_and_logits", "adamw_update", "make_optimizer", "make_train_step",
    "layers", "attention_weights", "multihead_attention", "mlp", "model", "optim", "long_sequences", "regulariser",
    "sharding", "data_mesh", "replicate", "shard_batch", "make_sharded_train_step", "sharded_train_step",
]
