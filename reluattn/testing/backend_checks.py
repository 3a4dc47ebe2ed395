"""A whole backend against the NumPy backend: `apply`, `loss_and_grad`, `init_optimizer`, `train_step`.

    check_backend(module)                       over drawn ViT configs, parameters, batches, optimizers
    compare_backend(module, cfg, params, ...)   one case, no hypothesis

`module` has the backends' functional API (reluattn.backend("numpy") is the reference):
    module.apply(params, images, cfg) -> logits (B, K)
    module.loss_and_grad(params, images, labels, cfg) -> (loss, grads shaped like params)
    module.init_optimizer(params, opt_cfg) -> {"step", "mu", "nu"}
    module.train_step(params, opt_state, images, labels, cfg, opt_cfg) -> (params, opt_state, metrics)

Inputs are made in `dtype` and the reference runs in float64 on the same (rounded) values. Tolerance
(tolerances.Tolerance.model_rtol, by the dtype of the module's logits): logits, loss, metrics and every
gradient / moment leaf within model_rtol of that leaf's largest entry. Parameter updates: AdamW divides by
sqrt(nu), so a gradient entry that is small next to its leaf's rounding error has an update direction set
by rounding; each update entry is allowed lr * (model_rtol (1 + |update|) + min(2, 2 dg / (sqrt(nu_hat) +
eps))) per step, dg = model_rtol * max |gradient leaf|: exact where the gradient is well above its rounding
error, free where it is not. A wrong rule (bias correction, weight decay, clipping, schedule) moves every
entry, so it is still caught. accuracy is not compared (an argmax flips on a near-tie).
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from . import reference
from .checks import run_property
from .report import compare_trees, raise_problems
from .strategies import make_batch, make_parameters, optimizer_configs, vit_configs
from .tolerances import resolve_dtype, tolerance_for


def _float64(tree):
    return reference.tree_map(lambda leaf: np.asarray(leaf, dtype=np.float64), tree)


def _compare_trees(what, got, expected, rule, allowed=None, context=""):
    """compare_trees with model_rtol of each leaf's largest entry, unless `allowed` (a tree) says."""
    return compare_trees(what, got, expected, rtol=rule.model_rtol, allowed=allowed, floor=rule.floor, context=context)


def _update_allowance(params, new_params, state, grads, opt_cfg, rate, rule):
    """The per-entry allowance of one AdamW step (module docstring), from the reference's float64 values."""
    step = int(state["step"])
    nu_correction = 1.0 - opt_cfg.b2 ** step

    def allowance(old, new, nu, grad):
        update = np.abs(new - old) / max(rate, 1e-300)  # |update| of this step, weight decay included
        gradient_error = rule.model_rtol * np.max(np.abs(grad), initial=0.0)
        direction = np.minimum(2.0, 2.0 * gradient_error / (np.sqrt(nu / nu_correction) + opt_cfg.eps))
        return rate * (rule.model_rtol * (1.0 + update) + direction) + rule.model_rtol * np.abs(new)
    return reference.tree_map(allowance, params, new_params, state["nu"], grads)


def compare_backend(module, cfg, params, images, labels, opt_cfg, *, train_steps=2, tolerance=None):
    """Check module against the NumPy backend on one case (params, images in the dtype to test)."""
    numpy_backend = reference.numpy_backend
    exact_params, exact_images = _float64(params), np.asarray(images, dtype=np.float64)
    context = f"{cfg}, batch {np.shape(images)[0]}, {np.asarray(images).dtype}"
    logits = module.apply(params, images, cfg)
    rule = tolerance_for(tolerance if tolerance is not None else np.asarray(logits).dtype)
    context = f"{context}; {rule.name} tolerance (model_rtol {rule.model_rtol:g} of each leaf's largest entry)"
    problems = _compare_trees("apply: logits", {"logits": logits},
                              {"logits": numpy_backend.apply(exact_params, exact_images, cfg)}, rule, context=context)
    loss, grads = module.loss_and_grad(params, images, labels, cfg)
    exact_loss, exact_grads = numpy_backend.loss_and_grad(exact_params, exact_images, labels, cfg)
    problems += _compare_trees("loss_and_grad: loss", {"loss": loss}, {"loss": exact_loss}, rule, context=context)
    problems += _compare_trees("loss_and_grad: gradient", grads, exact_grads, rule, context=context)
    raise_problems(problems, "the backend disagrees with the NumPy backend:")

    state = module.init_optimizer(params, opt_cfg)
    expected_state = numpy_backend.init_optimizer(exact_params, opt_cfg)
    if not (isinstance(state, dict) and set(state) == {"step", "mu", "nu"} and int(state["step"]) == 0):
        raise_problems([f"init_optimizer: expected {{'step': 0, 'mu': zeros, 'nu': zeros}}, got "
                        f"{sorted(state) if isinstance(state, dict) else type(state).__name__}"])
    problems = _compare_trees("init_optimizer: mu", state["mu"], expected_state["mu"], rule, context=context)
    problems += _compare_trees("init_optimizer: nu", state["nu"], expected_state["nu"], rule, context=context)
    raise_problems(problems, "the backend disagrees with the NumPy backend:")

    new_params, expected_params = params, exact_params
    allowed = reference.tree_map(np.zeros_like, exact_params)
    for step in range(train_steps):
        copies = reference.tree_map(np.array, (new_params, state))  # a backend may donate (reuse) its inputs
        new_params, state, metrics = module.train_step(*copies, images, labels, cfg, opt_cfg)
        before = expected_params
        expected_params, expected_state, expected_metrics = numpy_backend.train_step(
            before, expected_state, exact_images, labels, cfg, opt_cfg)
        _, step_grads = numpy_backend.loss_and_grad(before, exact_images, labels, cfg)
        step_allowance = _update_allowance(before, expected_params, expected_state, step_grads, opt_cfg,
                                           expected_metrics["learning_rate"], rule)
        allowed = reference.tree_map(np.add, allowed, step_allowance)
        named = {name: expected_metrics[name] for name in ("loss", "grad_norm", "learning_rate")}
        problems = _compare_trees(f"train_step {step + 1}: metric", {name: metrics[name] for name in named}, named,
                                  rule, context=context)
        if int(state["step"]) != step + 1:
            problems.append(f"train_step {step + 1}: opt_state['step'] is {int(state['step'])}, expected {step + 1}")
        problems += _compare_trees(f"train_step {step + 1}: mu", state["mu"], expected_state["mu"], rule,
                                   context=context)
        problems += _compare_trees(f"train_step {step + 1}: nu", state["nu"], expected_state["nu"], rule,
                                   context=context)
        updates = reference.tree_map(lambda new, old: np.asarray(new, np.float64) - old, new_params, exact_params)
        expected_updates = reference.tree_map(np.subtract, expected_params, exact_params)
        problems += _compare_trees(f"train_step {step + 1}: parameter update (new - initial)", updates,
                                   expected_updates, rule, allowed=allowed, context=context)
        raise_problems(problems, "the backend disagrees with the NumPy backend:")


def check_backend(module, *, dtype=np.float32, configs=None, kinds=None, train_steps=2, tolerance=None,
                  max_examples=None, settings=None):
    """compare_backend over drawn cases: ViT configs (`configs`, default vit_configs(kinds=kinds): every
    pool, MLP activation and attention option), parameter trees moved off their initial values, batches of
    1-3 with integer or soft labels, optimizer configs. Raises MismatchError naming the worst leaf and entry.
    max_examples (default 6) overrides the count of `settings`."""
    dtype = resolve_dtype(dtype)
    configs = configs if configs is not None else vit_configs(kinds=kinds)

    @st.composite
    def cases(draw):
        cfg = draw(configs)
        seed = draw(st.integers(0, 2 ** 32 - 1))
        images, labels = make_batch(cfg, seed + 1, dtype, draw(st.integers(1, 3)), draw(st.booleans()))
        return cfg, make_parameters(cfg, seed, dtype), images, labels, draw(optimizer_configs())

    run_property(lambda case: compare_backend(module, *case, train_steps=train_steps, tolerance=tolerance),
                 cases(), max_examples, settings, default_examples=6)
