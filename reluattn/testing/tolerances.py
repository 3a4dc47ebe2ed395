"""How far a correct implementation may land from the float64 reference, by dtype and by entry.

Why not one relative tolerance per array: attention sums L products, so an output entry that is small
because its terms cancel carries the rounding error of its large terms, and a score near relu's kink can
change sign under rounding. A fixed relative tolerance would either fail correct float32 code on such
entries or pass real bugs everywhere else. So every entry gets its own allowance, the first-order rounding
bound of the computation that makes it, from the float64 reference:

    allowed = rtol * bound + (1e-6 rtol + 1e-13) * max(bound) + kink + floor
    bound   = what a relative perturbation rtol of every input and intermediate result moves the entry by

with the magnitudes (B, H, T, L; c = scale * n^-alpha the length factor, s the scores):

    scores       A_ij   = |q_i| . |k_j| / sqrt(Dh)                       (s moves by <= rtol * A)
    weights      Wb_ij  = |w_ij| + c max|h'| A_ij + c (1 + A_ij)   point-wise kinds, h' over s +- rtol A
                 Wb_ij  = w_ij (1 + 2 max_j A_ij)           softmax (a score error moves the whole row)
    output       bound  = Wb |v|                            (|o| <= |w| |v| <= Wb |v|)
    dv           bound  = Wb^T |g|                          g = d loss / d out
    dscores      point-wise: c (max|h'| + 1 + A) |g|.|v|,  kink: c |h'(s +- rtol A) - h'(s)| |g.v|
                 softmax:    w (1 + 2 max A) |dw - r| + w (|g|.|v| + sum_k w_k (|g|.|v_k| + (1 + 2 max A) |dw_k|))
    dq, dk       bound  = (dscores bound + |dscores|) |k| / sqrt(Dh)   (and |q| for dk); kink likewise

The c (1 + A) terms let h and h' be evaluated with an absolute error of their argument's size
(sigmoid(-18) = 1.5e-8 through 1 + tanh(-9) is only good to 1e-7 in float32; so is gelu' far out on the
negative side). The max(bound) term is what the float64 reference itself cannot resolve (its
sigmoid' = sig (1 - sig) is exactly 0 where the truth is 1e-18); `floor` absorbs flush-to-zero of subnormals.
The kink term is what makes kinks fair: where rounding may move a score across relu's 0 (or
relu6's 6), h' may jump, so the gradient there may honestly differ by the jump. It is 0 wherever the
score is exact (a zero row of q or k gives A = 0), so a wrong derivative at the kink is still caught.

rtol is a small multiple of the dtype's unit roundoff u, the factor covering a few roundings per entry
(a score, a weight, the output's own rounding) and different but correct orders of summation:

    float64   u = 1.1e-16   rtol = 1e-12  (~9000 u: libm against XLA exp/tanh differ by ulps, sums by order)
    float32   u = 6.0e-8    rtol = 1e-5   (~170 u: the same, with sums over up to a few thousand keys)
    bfloat16  u = 3.9e-3    rtol = 3e-2   (~8 u: scores, weights and output each rounded once; sums in float32)

Because the bounds are sums of absolute values, real (random-walk) rounding errors sit far below them, and
a bug -- a wrong factor, a wrong mask, a wrong derivative -- moves entries by O(1) of their bound, which no
rtol above allows. The whole-model checks (`check_backend`) use the simpler `model_rtol`: each leaf of
logits, loss and gradients relative to its own largest entry (a ViT has LayerNorms and a loss whose
condition the attention bound above does not describe); see `reluattn.testing.backend_checks`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Tolerance:
    """The tolerance rule of one dtype: rtol for the per-entry bounds above, model_rtol for whole-model
    leaves (relative to each leaf's largest entry)."""

    name: str           # "float64", "float32" or "bfloat16"
    unit_roundoff: float
    rtol: float          # attention checks: allowed = rtol * bound + floor
    model_rtol: float    # backend checks: allowed = model_rtol * max |leaf|
    floor: float         # absolute floor: flush-to-zero and subnormal differences

    def __str__(self):
        return f"{self.name} tolerance (rtol {self.rtol:g} of the entry's rounding bound)"


TOLERANCES = {
    "float64": Tolerance("float64", 2.0 ** -53, 1e-12, 1e-8, 1e-300),
    "float32": Tolerance("float32", 2.0 ** -24, 1e-5, 2e-4, 1e-35),
    "bfloat16": Tolerance("bfloat16", 2.0 ** -8, 3e-2, 6e-2, 1e-35),
}


def resolve_dtype(dtype) -> np.dtype:
    """A NumPy dtype from a dtype, a type or a name; "bfloat16" needs ml_dtypes (installed with JAX)."""
    if isinstance(dtype, str) and dtype == "bfloat16" or getattr(dtype, "__name__", None) == "bfloat16":
        try:
            import ml_dtypes
        except ImportError:
            raise ImportError("bfloat16 arrays need the ml_dtypes package (it comes with jax)") from None
        return np.dtype(ml_dtypes.bfloat16)
    try:
        return np.dtype(dtype)
    except TypeError:
        raise ValueError(f"dtype must be float64, float32 or bfloat16 (a dtype or its name); got {dtype!r}") from None


def tolerance_for(dtype) -> Tolerance:
    """The tolerance of results in `dtype` (a dtype, a name or a Tolerance, returned as it is)."""
    if isinstance(dtype, Tolerance):
        return dtype
    name = resolve_dtype(dtype).name
    if name not in TOLERANCES:
        raise ValueError(f"no tolerance for dtype {name}: the checks know {', '.join(TOLERANCES)} "
                         f"(floating-point results only)")
    return TOLERANCES[name]


# ----------------------------------------------------------------------------------- attention bounds

REFERENCE_RESOLUTION = 1e-13  # relative to an array's largest bound: below it the float64 reference is noise


def allowance(bound, rule: Tolerance, kink=0.0):
    """The allowed |got - expected| of each entry with rounding bound `bound` and kink allowance `kink`
    (an absolute amount: what h' jumping at a kink can do) (module docstring)."""
    largest = float(np.max(bound, initial=0.0))
    return rule.rtol * bound + (1e-6 * rule.rtol + REFERENCE_RESOLUTION) * largest + kink + rule.floor


def _derivative_window(derivative, arguments, radius):
    """max |h'| over [x - radius, x + radius] (sampled at the ends and the middle) and the largest jump
    |h'(x +- radius) - h'(x)|."""
    middle, low, high = (derivative(arguments + offset) for offset in (0.0, -radius, radius))
    largest = np.maximum(np.abs(middle), np.maximum(np.abs(low), np.abs(high)))
    jump = np.maximum(np.abs(low - middle), np.abs(high - middle))
    return largest, jump


def attention_bounds(pieces, rtol, dout=None):
    """Bounds (see the module docstring) for the output, and with `dout` for dq, dk, dv, all heads-first.

    `pieces` is `reference.AttentionPieces`: q, k, v (heads-first, float64), scores, weights, the length
    factor, h' of the kind, and the visible-key mask. Returns ({"out": bound, "dq": ..., "dk": ..., "dv": ...},
    {"dq": kink, "dk": kink}), the kink allowances absolute (already scaled)."""
    q, k, v, weights = pieces.q, pieces.k, pieces.v, pieces.weights
    inv_sqrt_dh = 1.0 / math.sqrt(q.shape[-1])
    visible = 1.0 if pieces.visible is None else pieces.visible  # (T, L) or everything
    absolute_scores = (np.abs(q) @ np.abs(k).swapaxes(-1, -2)) * inv_sqrt_dh * visible  # (B, H, T, L)
    if pieces.kind == "softmax":
        row_spread = 1.0 + 2.0 * absolute_scores.max(axis=-1, keepdims=True)  # (B, H, T, 1)
        weight_bound = weights * row_spread  # (B, H, T, L)
    else:
        largest, jump = _derivative_window(pieces.derivative, pieces.arguments, rtol * absolute_scores)
        weight_bound = (np.abs(weights) + pieces.factor * (largest * absolute_scores + 1.0 + absolute_scores)
                        ) * visible  # (B, H, T, L)
    bounds = {"out": weight_bound @ np.abs(v)}  # (B, H, T, Dh)
    if dout is None:
        return bounds, {}
    dweights = dout @ v.swapaxes(-1, -2)  # (B, H, T, L)
    absolute_dweights = np.abs(dout) @ np.abs(v).swapaxes(-1, -2)  # (B, H, T, L)
    if pieces.kind == "softmax":
        row_mean = (weights * dweights).sum(axis=-1, keepdims=True)  # (B, H, T, 1)
        dscores = weights * (dweights - row_mean)  # (B, H, T, L)
        row_terms = (weights * (absolute_dweights + row_spread * np.abs(dweights))).sum(axis=-1, keepdims=True)
        dscores_bound = weight_bound * np.abs(dweights - row_mean) + weights * (absolute_dweights + row_terms)
        dscores_kink = np.zeros_like(dscores)
    else:
        dscores = pieces.factor * pieces.derivative(pieces.arguments) * dweights * visible  # (B, H, T, L)
        dscores_bound = pieces.factor * (largest + 1.0 + absolute_scores) * absolute_dweights * visible
        dscores_kink = pieces.factor * jump * np.abs(dweights) * visible  # (B, H, T, L)
    dscores_bound = dscores_bound + np.abs(dscores)  # (B, H, T, L)
    bounds["dq"] = dscores_bound @ np.abs(k) * inv_sqrt_dh  # (B, H, T, Dh)
    bounds["dk"] = dscores_bound.swapaxes(-1, -2) @ np.abs(q) * inv_sqrt_dh  # (B, H, L, Dh)
    bounds["dv"] = weight_bound.swapaxes(-1, -2) @ np.abs(dout)  # (B, H, L, Dh)
    kinks = {"dq": dscores_kink @ np.abs(k) * inv_sqrt_dh,  # (B, H, T, Dh)
             "dk": dscores_kink.swapaxes(-1, -2) @ np.abs(q) * inv_sqrt_dh}  # (B, H, L, Dh)
    return bounds, kinks
