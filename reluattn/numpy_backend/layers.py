"""The small layers of the ViT, each a forward/backward pair (shapes: see the legend in __init__.py).

    out, cache = name_forward(x, ...)       cache: a NamedTuple of arrays, nothing else
    dx, grads  = name_backward(dout, cache) grads: a dict shaped like the layer's parameters

Every backward is checked against finite differences in tests/numpy_backend/test_numpy_layers.py.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

LAYERNORM_EPS = 1e-6
GELU_C = math.sqrt(2.0 / math.pi)  # the tanh approximation's constant (a Python float keeps float32 float32)


# ------------------------------------------------------------------------------------------------ caches

class DenseCache(NamedTuple):
    x: np.ndarray        # (..., in) the input
    w: np.ndarray        # (in, out) the weight


class LayerNormCache(NamedTuple):
    x_hat: np.ndarray    # (..., F) the normalised input
    inv_std: np.ndarray  # (..., 1) 1 / sqrt(variance + eps)
    scale: np.ndarray    # (F,) the learned scale


class GeluCache(NamedTuple):
    x: np.ndarray        # (..., F) the input
    tanh_u: np.ndarray   # (..., F) tanh(sqrt(2/pi) (x + 0.044715 x^3)), kept from the forward


class ReluCache(NamedTuple):
    x: np.ndarray        # (..., F) the input


class SiluCache(NamedTuple):
    x: np.ndarray        # (..., F) the input
    sig: np.ndarray      # (..., F) sigmoid(x)


class SoftmaxCache(NamedTuple):
    out: np.ndarray      # (..., F) the softmax itself


class CrossEntropyCache(NamedTuple):
    log_probs: np.ndarray  # (B, K) log_softmax(logits)
    targets: np.ndarray    # (B, K) target probabilities


# ----------------------------------------------------------------------------------------------- dense

def dense_forward(x, params):
    """x @ w + b with w stored (in, out); x is (..., in), any leading axes."""
    out = x @ params["w"] + params["b"]  # (..., out)
    return out, DenseCache(x, params["w"])


def dense_backward(dout, cache):
    """Returns (dx (..., in), {"w": dw (in, out), "b": db (out,)})."""
    x, w = cache
    # Differentiates out = x @ w + b; leading axes are folded so dw is one matrix product.
    dx = dout @ w.T  # (..., in)
    dw = x.reshape(-1, x.shape[-1]).T @ dout.reshape(-1, dout.shape[-1])  # (in, out)
    db = dout.reshape(-1, dout.shape[-1]).sum(axis=0)  # (out,)
    return dx, {"w": dw, "b": db}


# ------------------------------------------------------------------------------------------- LayerNorm

def layernorm_forward(x, params, eps=LAYERNORM_EPS):
    """LayerNorm over the last axis: biased variance, learned scale, and a bias when params has one
    (qk-norm's LayerNorm has a scale only; its caller keeps only the scale's gradient)."""
    mean = x.mean(axis=-1, keepdims=True)  # (..., 1)
    centred = x - mean  # (..., F)
    inv_std = 1.0 / np.sqrt((centred * centred).mean(axis=-1, keepdims=True) + eps)  # (..., 1)
    x_hat = centred * inv_std  # (..., F)
    out = x_hat * params["scale"]  # (..., F)
    if "bias" in params:
        out = out + params["bias"]  # (..., F)
    return out, LayerNormCache(x_hat, inv_std, params["scale"])


def layernorm_backward(dout, cache):
    """Returns (dx (..., F), {"scale": (F,), "bias": (F,)})."""
    x_hat, inv_std, scale = cache
    # Differentiates out = x_hat * scale + bias: parameter grads sum over every leading axis.
    features = x_hat.shape[-1]
    grads = {"scale": (dout * x_hat).reshape(-1, features).sum(axis=0),  # (F,)
             "bias": dout.reshape(-1, features).sum(axis=0)}  # (F,)
    # Differentiates x_hat = (x - mean) * inv_std, where mean and inv_std depend on x too.
    dx_hat = dout * scale  # (..., F)
    dx = inv_std * (dx_hat - dx_hat.mean(axis=-1, keepdims=True)
                    - x_hat * (dx_hat * x_hat).mean(axis=-1, keepdims=True))  # (..., F)
    return dx, grads


# ------------------------------------------------------------------------------- point-wise functions

def sigmoid(x):
    """1 / (1 + e^-x), written with tanh so that large |x| does not overflow."""
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # (..., F)


def gelu(x):
    """GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    # x * x * x rather than x ** 3: NumPy's power is tens of times slower on negative floats.
    return 0.5 * x * (1.0 + np.tanh(GELU_C * (x + 0.044715 * x * x * x)))  # (..., F)


def gelu_derivative(x, tanh_u=None):
    """d gelu / dx, from the product rule on 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
    `tanh_u`, when the forward kept it, saves computing tanh(u) again."""
    if tanh_u is None:
        tanh_u = np.tanh(GELU_C * (x + 0.044715 * x * x * x))  # (..., F)
    du_dx = GELU_C * (1.0 + 3 * 0.044715 * x * x)  # (..., F)
    return 0.5 * (1.0 + tanh_u) + 0.5 * x * (1.0 - tanh_u * tanh_u) * du_dx  # (..., F)


def gelu_forward(x):
    tanh_u = np.tanh(GELU_C * (x + 0.044715 * x * x * x))  # (..., F), kept for the backward
    return 0.5 * x * (1.0 + tanh_u), GeluCache(x, tanh_u)  # (..., F)


def gelu_backward(dout, cache):
    """Returns dx (..., F)."""
    x, tanh_u = cache
    # Differentiates out = gelu(x).
    return dout * gelu_derivative(x, tanh_u)  # (..., F)


def relu_forward(x):
    return np.maximum(x, 0.0), ReluCache(x)  # (..., F)


def relu_backward(dout, cache):
    """Returns dx (..., F)."""
    (x,) = cache
    # Differentiates out = max(x, 0); the derivative at exactly 0 is taken to be 0.
    return dout * (x > 0)  # (..., F)


def silu_forward(x):
    """x * sigmoid(x), the gate's activation."""
    sig = sigmoid(x)  # (..., F)
    return x * sig, SiluCache(x, sig)  # (..., F)


def silu_backward(dout, cache):
    """Returns dx (..., F)."""
    x, sig = cache
    # Differentiates out = x * sigmoid(x): sigmoid' = sig (1 - sig).
    return dout * sig * (1.0 + x * (1.0 - sig))  # (..., F)


# --------------------------------------------------------------------------------------------- softmax

def softmax(x):
    """Softmax over the last axis, shifted by the row maximum so that exp cannot overflow."""
    exps = np.exp(x - x.max(axis=-1, keepdims=True))  # (..., F)
    return exps / exps.sum(axis=-1, keepdims=True)  # (..., F)


def softmax_forward(x):
    out = softmax(x)  # (..., F)
    return out, SoftmaxCache(out)


def softmax_backward(dout, cache):
    """Returns dx (..., F)."""
    (out,) = cache
    # Differentiates out = softmax(x): the Jacobian diag(out) - out out^T applied to dout.
    return out * (dout - (dout * out).sum(axis=-1, keepdims=True))  # (..., F)


# ------------------------------------------------------------------------------------ the loss function

def targets_from_labels(labels, num_classes, label_smoothing=0.0, dtype=np.float64):
    """(B,) integer labels or (B, K) probabilities -> (B, K) targets, smoothed as
    (1 - label_smoothing) * targets + label_smoothing / K."""
    labels = np.asarray(labels)
    if labels.ndim == 1:
        targets = np.eye(num_classes, dtype=dtype)[labels]  # (B, K) one-hot rows
    else:
        targets = labels.astype(dtype)  # (B, K) soft targets (mixup)
    if label_smoothing:
        targets = (1.0 - label_smoothing) * targets + label_smoothing / num_classes  # (B, K)
    return targets


def cross_entropy_forward(logits, targets):
    """Mean over the batch of -sum_k targets * log_softmax(logits); returns the loss as a float."""
    shifted = logits - logits.max(axis=-1, keepdims=True)  # (B, K)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))  # (B, K)
    loss = -(targets * log_probs).sum(axis=-1).mean()
    return float(loss), CrossEntropyCache(log_probs, targets)


def cross_entropy_backward(dloss, cache):
    """Returns dlogits (B, K)."""
    log_probs, targets = cache
    # Differentiates the batch mean of -sum_k t_k log_softmax(z)_k = (sum_k t_k) logsumexp(z) - sum_k t_k z_k.
    batch = log_probs.shape[0]
    probs = np.exp(log_probs)  # (B, K)
    return dloss * (probs * targets.sum(axis=-1, keepdims=True) - targets) / batch  # (B, K)
