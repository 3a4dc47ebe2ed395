"""Finite-difference gradient checking in float64, shared by the NumPy backend's tests.

Relative error, as used throughout: max |analytic - numeric| / max(max |analytic|, max |numeric|), so each
array's gradient is judged against its own scale (entry-wise ratios are pure noise where an entry is ~0).
When only some entries are sampled, the scale is still the whole gradient's largest entry.
"""

from __future__ import annotations

import numpy as np

# The package's finite differences (the same ones the tutorial exercises are graded with).
from reluattn.grading.finite_differences import EPS, TOLERANCE, best_of_three, numeric_gradient, relative_error  # noqa: F401
from reluattn.params import flatten


def directional_derivative(f, x, direction, eps=EPS):
    """(f(x + eps d) - f(x - eps d)) / (2 eps); x is changed in place and restored."""
    original = x.copy()
    x += eps * direction
    up = f()
    x[...] = original - eps * direction
    down = f()
    x[...] = original
    return (up - down) / (2 * eps)


def check_gradients(f, arrays: dict, grads: dict, *, samples=None, seed=0, tolerance=TOLERANCE) -> dict:
    """Compare analytic `grads` with finite differences of the scalar f() for each named array.

    `arrays` maps names to the float64 arrays f reads (changed in place and restored). With samples=None
    every entry is checked; otherwise `samples` random entries of each array (against the scale of its
    whole gradient) plus its derivative along one random direction d (which involves every entry at once;
    judged against sum |grad * d|, the size of the sum before its terms cancel). An array over tolerance is
    measured again, up to three times (best_of_three: see reluattn.grading.finite_differences). Fails naming every array
    over tolerance.
    """
    assert set(arrays) == set(grads), f"gradients for {sorted(set(grads) ^ set(arrays))} missing or extra"
    rng = np.random.default_rng(seed)
    errors = {}
    for name, x in arrays.items():
        grad = np.asarray(grads[name])
        assert grad.shape == x.shape, f"{name}: gradient shape {grad.shape}, array shape {x.shape}"
        if samples is None:
            errors[name], _ = best_of_three(lambda: (relative_error(grad, numeric_gradient(f, x)), None), tolerance)
            continue
        indices = rng.choice(x.size, size=min(samples, x.size), replace=False)
        direction = rng.normal(size=x.shape)

        def measured():  # the worse of the sampled entries and the derivative along `direction`
            numeric = numeric_gradient(f, x, indices)
            coordinate_error = relative_error(grad.reshape(-1)[indices], numeric, scale=np.max(np.abs(grad)))
            along = directional_derivative(f, x, direction)
            direction_error = relative_error(np.sum(grad * direction), along,
                                             scale=np.sum(np.abs(grad * direction)))
            return max(coordinate_error, direction_error), None

        errors[name], _ = best_of_three(measured, tolerance)  # again while over the tolerance
    bad = {name: error for name, error in errors.items() if not error <= tolerance}
    assert not bad, f"relative errors over {tolerance}: {bad}"
    return errors


def check_layer(forward, backward, inputs: dict, params: dict | None = None, seed=0, **options) -> dict:
    """Check a forward/backward pair through loss = sum(out * R) for a fixed random R (so dout = R).

    forward(inputs, params) returns the output array; backward(dout) returns (input gradients as a dict
    named like `inputs`, parameter gradients as a tree like `params`, or None when there are none).
    """
    params = params or {}
    dout = np.random.default_rng(seed + 1).normal(size=np.shape(forward(inputs, params)))
    input_grads, param_grads = backward(dout)
    arrays = {**{f"input:{name}": x for name, x in inputs.items()}, **flatten(params)}
    grads = {**{f"input:{name}": g for name, g in input_grads.items()}, **flatten(param_grads or {})}
    return check_gradients(lambda: float(np.sum(forward(inputs, params) * dout)), arrays, grads, seed=seed,
                           **options)
