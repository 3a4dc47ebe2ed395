"""The pure-NumPy Vision Transformer with hand-written backprop (imports only NumPy and reluattn's
config, params and checks; never JAX).

Files, in reading order:
    layers.py               dense, LayerNorm, GELU, ReLU, SiLU, softmax, cross-entropy
    attention_weights.py    scores -> weights for every attention kind (softmax, relu / L, ...)
    multihead_attention.py  the multi-head core attention(q, k, v) and the self-attention layer
    blocked_attention.py    the same core one block of keys at a time (impl="blocked"; online softmax)
    mlp.py                  the MLP (gelu, relu, softmax, softmax_ln)
    model.py                patch embedding, blocks, head: apply, loss_and_grad
    optim.py                AdamW + clipping + warm-up/cosine schedule: init_optimizer, train_step

(The module is not called attention.py: its name would clash with the function `attention`.)
Every layer is a pair `out, cache = name_forward(...)` / `dx, grads = name_backward(dout, cache)`.

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

from . import attention_weights, blocked_attention, layers, mlp, model, multihead_attention, optim
from .multihead_attention import attention
from .model import apply, loss_and_grad
from .optim import init_optimizer, learning_rate, train_step

__all__ = ["apply", "loss_and_grad", "attention", "init_optimizer", "train_step", "learning_rate",
           "layers", "attention_weights", "blocked_attention", "multihead_attention", "mlp", "model", "optim"]
