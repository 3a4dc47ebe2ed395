"""Checkers for the backward of the small layers (notebook 02): dense, LayerNorm, GELU, softmax.

Each takes the student's backward, which receives the cache that reluattn's forward made (see
reluattn/numpy_backend/layers.py for what each cache holds), and grades it in float64 against reluattn's
backward (itself verified against finite differences on the spot). Sizes are small and every axis has a
different length, so a transpose or a sum over the wrong axis shows up as a wrong shape.
"""

from __future__ import annotations

import math

import numpy as np

from ..numpy_backend import layers
from .feedback import call_student, checker
from .harness import grade, unpack_pair, verified_numeric


@checker
def check_dense_backward(student_backward, seed: int = 0) -> dict:
    """student_backward(dout, cache) -> (dx, {"w": dw, "b": db}), cache = (x, w) from
    layers.dense_forward(x, {"w": w, "b": b}), x of shape (B, T, in)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(2, 3, 5))  # (B, T, in)
    params = {"w": rng.normal(size=(5, 4)), "b": rng.normal(size=4)}  # (in, out), (out,)
    out, cache = layers.dense_forward(x, params)
    dout = rng.normal(size=out.shape)  # (B, T, out)
    dx, grads = layers.dense_backward(dout, cache)
    reference = {"dx": dx, "grads['w']": grads["w"], "grads['b']": grads["b"]}
    arrays = {"dx": x, "grads['w']": params["w"], "grads['b']": params["b"]}
    numeric = verified_numeric(lambda: float(np.sum(layers.dense_forward(x, params)[0] * dout)), arrays,
                               reference, "dense backward")
    result = call_student(student_backward, "dense_backward", dout, cache)
    student = unpack_pair("dense_backward", result, "dx", "{'w': dw, 'b': db}")
    factors = {"1/(B*T) = 1/6: a parameter's gradient is a sum over every row, not a mean": 1 / 6,
               "B*T = 6: a parameter's gradient is a sum over the rows, the input's is not": 6.0}
    rows_in, rows_out = x.reshape(-1, 5), dout.reshape(-1, 4)  # (rows, in), (rows, out)
    mistakes = {"grads['w']": {"only the last row's x^T dout is there: the weight is used at every row, so "
                               "sum x_r^T dout_r over all rows": np.outer(rows_in[-1], rows_out[-1])}}
    return grade("dense_backward", student, reference, numeric, factors=factors, mistakes=mistakes,
                 hint="re-derive it entry by entry: out_rn = sum_m x_rm W_mn + b_n for every row r; differentiate "
                      "by x_rm, W_mn and b_n, sum over every index that does not appear in what you differentiate "
                      "by, and check each result's shape against the input's (dW is (in, out), db is (out,))")


@checker
def check_layernorm_backward(student_backward, seed: int = 0) -> dict:
    """student_backward(dout, cache) -> (dx, {"scale": dscale, "bias": dbias}), cache = (x_hat, inv_std,
    scale) from layers.layernorm_forward(x, {"scale": ..., "bias": ...}) over the last axis."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(3, 4, 6)) * 2.0 + 0.5  # (B, T, F), not already normalised
    params = {"scale": rng.normal(size=6), "bias": rng.normal(size=6)}  # (F,), (F,): not the identity
    out, cache = layers.layernorm_forward(x, params)
    dout = rng.normal(size=out.shape)  # (B, T, F)
    dx, grads = layers.layernorm_backward(dout, cache)
    reference = {"dx": dx, "grads['scale']": grads["scale"], "grads['bias']": grads["bias"]}
    arrays = {"dx": x, "grads['scale']": params["scale"], "grads['bias']": params["bias"]}
    numeric = verified_numeric(lambda: float(np.sum(layers.layernorm_forward(x, params)[0] * dout)), arrays,
                               reference, "LayerNorm backward")
    x_hat, inv_std, scale = cache
    dx_hat = dout * scale  # (B, T, F)

    def mean(a):
        return a.mean(axis=-1, keepdims=True)  # (B, T, 1)

    mistakes = {"dx": {
        "it treats the mean and the variance as constants, but both depend on every x_j of the row: "
        "differentiate mu and 1/sigma too": inv_std * dx_hat,
        "the variance depends on x too: the term - x_hat * mean(dx_hat * x_hat) is missing":
            inv_std * (dx_hat - mean(dx_hat)),
        "the mean depends on x too: the term - mean(dx_hat) is missing":
            inv_std * (dx_hat - x_hat * mean(dx_hat * x_hat)),
        "the learned scale is missing: dx_hat = dout * scale, not dout":
            inv_std * (dout - mean(dout) - x_hat * mean(dout * x_hat)),
        "inv_std should multiply once, not twice (x_hat already holds one factor of it)":
            inv_std * inv_std * (dx_hat - mean(dx_hat) - x_hat * mean(dx_hat * x_hat)),
        "the means run over the wrong axis: LayerNorm normalises each row over its features (the last axis)":
            inv_std * (dx_hat - dx_hat.mean(axis=0, keepdims=True)
                       - x_hat * (dx_hat * x_hat).mean(axis=0, keepdims=True)),
        "the sign of the x_hat term is flipped: the variance term is subtracted":
            inv_std * (dx_hat - mean(dx_hat) + x_hat * mean(dx_hat * x_hat)),
    },
        "grads['scale']": {"that is the bias's gradient, sum(dout); the scale multiplies x_hat, so its gradient is "
                           "the sum of dout * x_hat": grads["bias"],
                           "the scale multiplies x_hat, not x: sum dout * x_hat over the rows":
                               (dout * x).reshape(-1, 6).sum(0)},
        "grads['bias']": {"that is the scale's gradient; the bias is added, so its gradient is the sum of dout":
                          grads["scale"]}}
    result = call_student(student_backward, "layernorm_backward", dout, cache)
    student = unpack_pair("layernorm_backward", result, "dx", "{'scale': dscale, 'bias': dbias}")
    return grade("layernorm_backward", student, reference, numeric, mistakes=mistakes,
                 factors={"B*T = 12: a sum over rows became a mean": 1 / 12},
                 hint="with dx_hat = dout * scale, x_hat = (x - mu) * inv_std where mu and inv_std depend on every "
                      "x_j of the row: write d x_hat_k / d x_j (three terms), then sum it against dx_hat_k")


@checker
def check_gelu_backward(student_backward, seed: int = 0) -> dict:
    """student_backward(dout, cache) -> dx, cache = (x, tanh_u) from layers.gelu_forward(x), GELU's tanh
    approximation 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(3, 7)) * 2.0  # (B, F), both tails and the bend
    out, cache = layers.gelu_forward(x)
    dout = rng.normal(size=out.shape)  # (B, F)
    reference = {"dx": layers.gelu_backward(dout, cache)}
    numeric = verified_numeric(lambda: float(np.sum(layers.gelu_forward(x)[0] * dout)), {"dx": x}, reference,
                               "GELU backward")
    _, tanh_u = cache
    du_dx = layers.GELU_C * (1.0 + 3 * 0.044715 * x * x)  # (B, F)
    erf = np.vectorize(math.erf)
    exact = 0.5 * (1.0 + erf(x / math.sqrt(2.0))) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)  # (B, F)
    mistakes = {"dx": {
        "only the 0.5 (1 + tanh u) factor was differentiated; the product rule adds "
        "0.5 x (1 - tanh(u)^2) du/dx": dout * 0.5 * (1.0 + tanh_u),
        "the chain rule's du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2) is missing":
            dout * (0.5 * (1.0 + tanh_u) + 0.5 * x * (1.0 - tanh_u * tanh_u)),
        "this is the derivative alone: multiply it by dout": layers.gelu_derivative(x, tanh_u),
        "this is the derivative of the exact (erf) GELU; reluattn uses the tanh approximation": dout * exact,
        "tanh's derivative is 1 - tanh(u)^2, not 1 - tanh(u)":
            dout * (0.5 * (1.0 + tanh_u) + 0.5 * x * (1.0 - tanh_u) * du_dx),
        "the derivative of 0.044715 x^3 is 3 * 0.044715 x^2: the 3 is missing":
            dout * (0.5 * (1.0 + tanh_u) + 0.5 * x * (1.0 - tanh_u * tanh_u) * layers.GELU_C
                    * (1.0 + 0.044715 * x * x)),
    }}
    student = {"dx": call_student(student_backward, "gelu_backward", dout, cache)}
    return grade("gelu_backward", student, reference, numeric, mistakes=mistakes,
                 hint="y = 0.5 x (1 + tanh u): the product rule over x and (1 + tanh u), then the chain rule "
                      "through u(x); GELU is point-wise, so dx = dout * y'(x)")


@checker
def check_softmax_backward(student_backward, seed: int = 0) -> dict:
    """student_backward(dout, cache) -> dx, cache = (out,) from layers.softmax_forward(x), the softmax over
    the last axis."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(2, 3, 5))  # (B, T, L)
    out, cache = layers.softmax_forward(x)
    dout = rng.normal(size=out.shape)  # (B, T, L)
    reference = {"dx": layers.softmax_backward(dout, cache)}
    numeric = verified_numeric(lambda: float(np.sum(layers.softmax_forward(x)[0] * dout)), {"dx": x}, reference,
                               "softmax backward")
    mistakes = {"dx": {
        "only the diagonal of the Jacobian diag(p) - p p^T is there: the - p (p . dout) term, which couples "
        "the entries of a row, is missing": out * dout,
        "the sum sum_j p_j dout_j runs over the wrong axis: it is over the last axis (the keys)":
            out * (dout - (dout * out).sum(axis=0, keepdims=True)),
        "the sum sum_j p_j dout_j must keep its axis (keepdims=True) so it broadcasts across the row":
            out * (dout - (dout * out).sum()),
        "the result is missing the outer factor p": dout - (dout * out).sum(axis=-1, keepdims=True),
        "softmax was treated as point-wise (p (1 - p) on the diagonal): its Jacobian has off-diagonal entries "
        "- p_i p_j too": out * (1.0 - out) * dout,
        "the coupling term uses sum_j dout_j; each dout_j is weighted by p_j in it":
            out * (dout - dout.sum(axis=-1, keepdims=True)),
    }}
    student = {"dx": call_student(student_backward, "softmax_backward", dout, cache)}
    return grade("softmax_backward", student, reference, numeric, mistakes=mistakes,
                 hint="dx_i = sum_j dout_j dp_j/dx_i with dp_j/dx_i = p_j (delta_ij - p_i), over the last axis")
