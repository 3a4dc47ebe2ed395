"""The pure-NumPy Vision Transformer with hand-written backprop (imports only NumPy and reluattn's
config, params and checks; never JAX).

Files, in reading order (the ViT path is the first seven):
    layers.py               dense, LayerNorm, GELU, ReLU, SiLU, softmax, cross-entropy
    attention_weights.py    scores -> weights for every attention kind (softmax, relu / L, ...)
    regulariser.py          ReLUFormer's attention regulariser R (row sums and entropies; secondary reading)
    multihead_attention.py  the multi-head core and the self-attention layer; attention(q, k, v);
                            dot_product_attention (jax.nn's arguments, the JAX drop-in's reference)
    mlp.py                  the MLP (gelu, relu, softmax, softmax_ln)
    model.py                patch embedding, blocks, head: apply, loss_and_grad
    optim.py                AdamW + clipping + warm-up/cosine schedule: init_optimizer, train_step
    long_sequences.py       off the ViT path: causal masks, blocked (online-softmax) attention

(The module is not called attention.py: its name would clash with the function `attention`.)
Every layer is a pair `out, cache = name_forward(...)` / `dx, grads = name_backward(dout, cache)`; a cache
is a NamedTuple of arrays (or of smaller caches), and every backward says the order of what it returns.

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

Shape legend, used in the shape comment on every line that makes a tensor:
    B   batch                          S   image side in pixels
    C   channels                       P   patch side in pixels
    N   patches per image = (S/P)^2    T   tokens (N, plus 1 for the class token)
    D   width (dim)                    H   heads
    Dh  head width = D / H             M   MLP hidden width (memory slots)
    K   classes                        L   keys (= T in self-attention)
    F   the feature axis of a generic layer (any of the above); "..." any leading axes
    in, out   a dense layer's input and output widths
"""

from . import attention_weights, layers, long_sequences, mlp, model, multihead_attention, optim, regulariser
from .multihead_attention import attention, dot_product_attention
from .model import apply, attention_regulariser, loss_and_grad
from .optim import init_optimizer, learning_rate, train_step

__all__ = ["apply", "loss_and_grad", "attention_regulariser", "attention", "dot_product_attention", "init_optimizer",
           "train_step", "learning_rate",
           "layers", "attention_weights", "multihead_attention", "mlp", "model", "optim", "long_sequences",
           "regulariser"]
