"""NumPy <-> JAX, file for file (numpy_backend/X.py beside jax_backend/X.py) and name for name: the one
table of which names are twins, and why the others have none (tests/parity/test_twins.py checks that every
name in it exists and that every public name of either backend is in it). Pure data: imports no backend.

A NumPy layer is a pair `name_forward` / `name_backward` (its cache a NamedTuple `...Cache`); its JAX twin is
one function `name` whose backward is jax.grad's, so JAX keeps no caches.

Where they differ, and why:
  - the attention core's layout: NumPy heads-first (B, H, T, Dh), because its batched matmul needs the batch
    axes in front; JAX tokens-first (B, T, H, Dh), because an einsum names its axes and XLA picks the layout.
  - DEFAULT_BLOCK_SIZE means the same (keys per block when neither the call nor AttentionConfig.block_size
    gives one); its value differs: 128 keeps NumPy's (B, H, T, block) slabs small, 1024 is the tile size
    the JAX kernel was tuned for (docs/performance.md, "Blocked attention").
  - AttentionConfig.impl="blocked": the JAX model runs the blocked kernel; the NumPy model always runs the
    dense core (the same values; the NumPy blocked forward is in long_sequences.py, for reading).
  - forward: NumPy's returns (logits, weights, cache), the cache for `backward`; JAX's returns the logits
    (and the weights when return_attention=True), since jax.grad needs no cache.
  - JAX only: compute_dtype=jnp.bfloat16 and fast=True (the opt-in speed paths of jax_backend/fast/),
    make_train_step (the pure step, to jit with augmentation), and sharding.py (several devices).
  - interop.py (off the ViT path): NumPy's dot_product_attention is forward only, the reference values; JAX's
    is the drop-in for jax.nn.dot_product_attention (its kernels chosen by implementation=) with attention_fn
    (Flax).

The table (file, NumPy names, JAX names, why they differ where they do):
"""

from __future__ import annotations

import itertools
import textwrap
from typing import NamedTuple


class Twin(NamedTuple):
    file: str           # the file name in both backends
    numpy: tuple        # names in numpy_backend/<file> (empty: none)
    jax: tuple          # their twins in jax_backend/<file> (empty: none)
    why: str = ""       # where one side is empty or the two differ: why


def _row(file: str, numpy: str, jax: str, why: str = "") -> Twin:
    return Twin(file, tuple(numpy.split()), tuple(jax.split()), why)


CACHE_SUFFIX = "Cache"  # NumPy's caches (NamedTuples a backward reads); JAX's backward is jax.grad's, no cache

TWINS = (
    _row("layers.py", "dense_forward dense_backward", "dense"),
    _row("layers.py", "layernorm_forward layernorm_backward", "layernorm"),
    _row("layers.py", "LAYERNORM_EPS", "LAYERNORM_EPS"),
    _row("layers.py", "gelu gelu_forward gelu_backward gelu_derivative GELU_C", "gelu",
         "JAX: jax.nn.gelu(approximate=True), its derivative by autodiff"),
    _row("layers.py", "relu_forward relu_backward", "relu"),
    _row("layers.py", "silu_forward silu_backward", "silu"),
    _row("layers.py", "sigmoid", "", "JAX uses jax.nn.sigmoid"),
    _row("layers.py", "softmax softmax_forward softmax_backward", "softmax"),
    _row("layers.py", "targets_from_labels", "targets_from_labels"),
    _row("layers.py", "cross_entropy_forward cross_entropy_backward", "cross_entropy"),
    _row("layers.py", "", "matmul canonical_compute_dtype", "the JAX-only compute_dtype= and fast= options"),
    _row("attention_weights.py", "POINTWISE pointwise length_factor", "POINTWISE pointwise length_factor",
         "NumPy's POINTWISE holds h and h', JAX's h alone: h' by autodiff"),
    _row("attention_weights.py", "pointwise_derivative", "", "h' by autodiff in JAX"),
    _row("attention_weights.py", "KINKS", "", "where h is not smooth: one list, which the tests read for both"),
    _row("attention_weights.py", "attention_weights_forward attention_weights_backward "
         "learned_attention_weights_forward learned_attention_weights_backward learned_length_backward",
         "attention_weights", "the learned length is attention_weights(..., length=) in JAX"),
    _row("regulariser.py", "ROW_SUM_FLOOR", "ROW_SUM_FLOOR"),
    _row("regulariser.py", "attention_regulariser_forward attention_regulariser_backward regulariser_rows",
         "attention_regulariser", "regulariser_rows: r_i of every row, which the trainer's statistics read too"),
    _row("multihead_attention.py", "heads_attention_forward heads_attention_backward", "heads_attention",
         "NumPy takes weights_forward / weights_backward, JAX a weights_function"),
    _row("multihead_attention.py", "weights_gradient", "", "a step of the hand-written backward"),
    _row("multihead_attention.py", "", "core_attention",
         "the choice of dense or blocked kernel by impl; NumPy's ViT runs the dense core only"),
    _row("multihead_attention.py", "self_attention_forward self_attention_backward", "self_attention"),
    _row("multihead_attention.py", "attention", "attention"),
    _row("mlp.py", "ACTIVATIONS", "ACTIVATIONS"),
    _row("mlp.py", "mlp_forward mlp_backward", "mlp"),
    _row("model.py", "patchify", "patchify"),
    _row("model.py", "embed_forward embed_backward", "embed"),
    _row("model.py", "block_forward block_backward", "block"),
    _row("model.py", "forward backward", "forward", "NumPy's forward also returns the cache for backward"),
    _row("model.py", "forward_backward", "loss_and_logits loss_terms", "JAX: + jax.value_and_grad"),
    _row("model.py", "apply loss_and_grad attention_regulariser", "apply loss_and_grad attention_regulariser"),
    _row("model.py", "regulariser_forward regulariser_backward", "blocks_regulariser"),
    _row("model.py", "", "random_token_ids", "token dropping's subsets, drawn inside the jitted training step; "
         "the NumPy forward takes token_ids as given"),
    _row("model.py", "", "check_inputs", "NumPy calls reluattn.checks.check_call; JAX also skips values when traced"),
    _row("optim.py", "learning_rate init_optimizer adamw_update train_step",
         "learning_rate init_optimizer adamw_update train_step"),
    _row("optim.py", "global_norm", "", "JAX clips with optax.clip_by_global_norm in the chain"),
    _row("optim.py", "", "schedule make_optimizer to_optax_state from_optax_state",
         "the optax chain, and its state in NumPy's {step, mu, nu} layout"),
    _row("optim.py", "", "make_train_step accuracy", "the pure step, to jit with augmentation (NumPy: train_step)"),
    _row("long_sequences.py", "DEFAULT_BLOCK_SIZE causal_visible_keys", "DEFAULT_BLOCK_SIZE causal_visible_keys",
         "DEFAULT_BLOCK_SIZE: 128 keys in NumPy, 1024 in JAX (see above)"),
    _row("long_sequences.py", "causal_attention_weights_forward causal_attention_weights_backward",
         "causal_attention_weights"),
    _row("long_sequences.py", "blocked_attention_forward", "blocked_attention",
         "JAX's also hides keys by window, key_lengths, mask and bias (the drop-in's implementation='blocked'); "
         "NumPy's, for reading, by causal only: its reference for hidden keys is dot_product_attention"),
    _row("interop.py", "dot_product_attention", "dot_product_attention",
         "NumPy's is forward only, float64 (the reference values); JAX's is jax.nn's drop-in"),
    _row("interop.py", "", "attention_fn IMPLEMENTATIONS BLOCKED_FROM_KEYS",
         "Flax's attention_fn, and the drop-in's choice of dense, blocked or Pallas kernel: NumPy has one"),
    _row("interop.py", "visible_keys", "",
         "the reference's mask of the keys each query sees (mask, bias, lengths, causal, window), public so the "
         "testing kit builds expectations from it; JAX's drop-in keeps its own private _visible_keys"),
    _row("sharding.py", "", "DATA_AXIS data_mesh replicated batch_sharded replicate shard_batch "
         "make_sharded_train_step sharded_train_step", "data parallelism: NumPy has one CPU, no devices"),
)


def table() -> str:
    """TWINS as a fixed-width text table (long cells wrap inside their column)."""
    lines = [f"    {'file':22} {'NumPy':48} JAX"]
    for twin in TWINS:
        numpy = textwrap.wrap(" ".join(twin.numpy), 48) or ["-"]
        jax = textwrap.wrap(" ".join(twin.jax), 48) or ["-"]
        for i, (left, right) in enumerate(itertools.zip_longest(numpy, jax, fillvalue="")):
            lines.append(f"    {twin.file if i == 0 else '':22} {left:48} {right}".rstrip())
        if twin.why:
            lines.append(f"    {'':22}   why: {twin.why}")
    return "\n".join(lines) + "\n"


__doc__ += "\n" + table()  # the docstring shows the table, which lives only in TWINS
