"""The pure-NumPy Vision Transformer with hand-written backprop (imports only NumPy and reluattn's
config, params and checks; never JAX).

Files, in reading order (the ViT path is the first seven):
    layers.py               dense, LayerNorm, GELU, ReLU, SiLU, softmax, cross-entropy
    attention_weights.py    scores -> weights for every attention kind (softmax, relu / L, ...)
    regulariser.py          ReLUFormer's attention regulariser R (row sums and entropies; secondary reading)
    multihead_attention.py  the multi-head core and the self-attention layer; attention(q, k, v)
    mlp.py                  the MLP (gelu, relu, softmax, softmax_ln)
    model.py                patch embedding, blocks, head: apply, loss_and_grad
    optim.py                AdamW + clipping + warm-up/cosine schedule: init_optimizer, train_step
    long_sequences.py       off the ViT path: causal masks, blocked (online-softmax) attention
    interop.py              off the ViT path: dot_product_attention (jax.nn's arguments), the reference
                            of the JAX drop-in

(The module is not called attention.py: its name would clash with the function `attention`.)
Every layer is a pair `out, cache = name_forward(...)` / `dx, grads = name_backward(dout, cache)`; a cache
is a NamedTuple of arrays (or of smaller caches), and every backward says the order of what it returns.

NumPy <-> JAX, file for file and name for name: the name table, and where the two differ and why, is
`reluattn/twins.py` (`print(reluattn.twins.table())`), checked against both backends by tests/parity/test_twins.py.

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

from . import attention_weights, interop, layers, long_sequences, mlp, model, multihead_attention, optim, regulariser
from .interop import dot_product_attention
from .multihead_attention import attention
from .model import apply, attention_regulariser, loss_and_grad
from .optim import init_optimizer, learning_rate, train_step

__all__ = ["apply", "loss_and_grad", "attention_regulariser", "attention", "dot_product_attention", "init_optimizer",
           "train_step", "learning_rate",
           "layers", "attention_weights", "multihead_attention", "mlp", "model", "optim", "long_sequences",
           "regulariser", "interop"]
