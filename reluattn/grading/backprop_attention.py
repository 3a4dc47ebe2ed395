"""Checkers for the backward of attention (notebook 02): the weights (softmax's Jacobian against relu/L's
diagonal mask), the multi-head core, the self-attention layer and a whole pre-LN block.

Each student function receives the cache that reluattn's forward made and is graded in float64 against
reluattn's backward (verified against finite differences on the spot), for softmax and for relu / L^alpha.
Queries and keys differ in number where the function allows it (T = 3 queries, L = 5 keys), so mixing
them up shows.
"""

from __future__ import annotations

import numpy as np

from ..config import AttentionConfig, ViTConfig
from ..numpy_backend import attention_weights, model, multihead_attention
from ..params import init_params, tree_map
from .feedback import ExerciseFailed, call_student, checker, passed
from .harness import avoid_kinks, grade, named_leaves, unpack_pair, verified_numeric

RELU_OVER_L = AttentionConfig(kind="relu", alpha=1.0)
SOFTMAX = AttentionConfig(kind="softmax")


def describe(attn_cfg: AttentionConfig) -> str:
    if attn_cfg.kind == "softmax":
        return "softmax"
    return f"{attn_cfg.kind}, alpha={attn_cfg.alpha:g}, scale={attn_cfg.scale:.3g}"


def _over_configs(exercise: str, configs, check_one) -> dict:
    """Run check_one(attn_cfg) for every config; fail naming the configs that went wrong."""
    errors, failures = {}, []
    for attn_cfg in configs:
        try:
            errors[describe(attn_cfg)] = check_one(attn_cfg)
        except ExerciseFailed as failure:
            failures.append(str(failure))
    if failures:
        right = [describe(cfg) for cfg in configs if describe(cfg) in errors]
        lines = [line for failure in failures for line in failure.split("\n")]
        hints = list(dict.fromkeys(line for line in lines if line.startswith("  hint: ")))  # each hint once, last
        note = f"\n(right for: {'; '.join(right)})" if right else ""
        raise ExerciseFailed("\n".join([line for line in lines if line not in hints] + hints) + note)
    worst = max(max(config_errors.values()) for config_errors in errors.values())
    passed(exercise, f"right for {'; '.join(errors)} (largest relative error against finite differences "
                     f"{worst:.1e})")
    return errors


@checker
def check_attention_weights_backward(student_backward, seed: int = 0) -> dict:
    """student_backward(dweights, cache, attn_cfg) -> dscores, cache = (scores, weights) from
    attention_weights.attention_weights_forward(scores, attn_cfg); scores (B, H, T, L), keys last.
    Graded for softmax and for relu with alpha 1, 0.5 (scale 1.5) and 0."""
    configs = [SOFTMAX, RELU_OVER_L, AttentionConfig(kind="relu", alpha=0.5, scale=1.5),
               AttentionConfig(kind="relu", alpha=0.0)]

    def check_one(attn_cfg):
        scores = avoid_kinks(lambda rng: (rng.normal(size=(2, 3, 4, 7)),) * 2, seed)  # (B, H, T, L), all distinct
        weights, cache = attention_weights.attention_weights_forward(scores, attn_cfg)
        dweights = np.random.default_rng(seed + 1).normal(size=weights.shape)  # (B, H, T, L)
        reference = {"dscores": attention_weights.attention_weights_backward(dweights, cache, attn_cfg)}
        numeric = verified_numeric(
            lambda: float(np.sum(attention_weights.attention_weights_forward(scores, attn_cfg)[0] * dweights)),
            {"dscores": scores}, reference, "attention-weights backward")
        num_keys = scores.shape[-1]
        if attn_cfg.kind == "softmax":
            mistakes = {
                "only the diagonal of the Jacobian diag(p) - p p^T is there: the - p (p . dweights) term, "
                "which couples the weights of a row, is missing": weights * dweights,
                "softmax was treated as point-wise (p (1 - p) on the diagonal): its Jacobian has off-diagonal "
                "entries - p_i p_j too": weights * (1.0 - weights) * dweights,
                "the sum over keys must keep its axis: p * (dw - sum_j p_j dw_j, keepdims=True)":
                    weights * (dweights - (dweights * weights).sum()),
            }
            factors = {}
        else:
            factor = attention_weights.length_factor(attn_cfg, num_keys)
            mask = dweights * attn_cfg.scale * (scores > 0)  # (B, H, T, L)
            mistakes = {f"L is taken from the {name} axis (scores.shape[{axis}] = {scores.shape[axis]}); the length "
                        f"factor uses L, the number of keys (the last axis)": mask * scores.shape[axis] ** -attn_cfg.alpha
                        for axis, name in enumerate(("batch", "head", "query")) if attn_cfg.alpha}
            mistakes.update({
                "relu's derivative is the step 1[s > 0], not relu(s) itself (dweights times the weights is "
                "dweights * scale * L^-alpha * relu(s))": dweights * weights,
                "the mask 1[s > 0] is missing: relu passes no gradient where s < 0": dweights * factor,
            })
            factors = {"L^alpha / scale: the constant scale * L^-alpha in front of relu(s) is missing":
                           1.0 / factor,
                       "1 / scale: the scale is missing": 1.0 / attn_cfg.scale}
        dscores = call_student(student_backward, "attention_weights_backward", dweights, cache, attn_cfg)
        return grade(f"attention_weights_backward ({describe(attn_cfg)})", {"dscores": dscores}, reference,
                     numeric, mistakes={"dscores": mistakes}, factors=factors, announce=False,
                     hint="relu: w_j = c L^-alpha relu(s_j) depends on s_j alone, so ds is dw times w's derivative, "
                          "entry by entry; softmax: ds = J^T dw with J = diag(p) - p p^T (never built)")

    return _over_configs("attention_weights_backward", configs, check_one)


@checker
def check_attention_core_backward(student_backward, seed: int = 0) -> dict:
    """student_backward(dout, cache, attn_cfg) -> (dq, dk, dv), cache = (q, k, v, weights, weights_cache)
    from multihead_attention.heads_attention_forward(q, k, v, attn_cfg); q (B, H, T, Dh), k and v
    (B, H, L, Dh). Graded for relu / L and softmax."""

    def check_one(attn_cfg):
        def draw(rng):
            q, k, v = rng.normal(size=(2, 2, 3, 4)), rng.normal(size=(2, 2, 5, 4)), rng.normal(size=(2, 2, 5, 4))
            return (q, k, v), q @ k.swapaxes(-1, -2) / 2.0  # scores (B, H, T, L)

        q, k, v = avoid_kinks(draw, seed)
        out, _, cache = multihead_attention.heads_attention_forward(q, k, v, attn_cfg)
        dout = np.random.default_rng(seed + 1).normal(size=out.shape)  # (B, H, T, Dh)
        dq, dk, dv = multihead_attention.heads_attention_backward(dout, cache, attn_cfg)
        reference = {"dq": dq, "dk": dk, "dv": dv}
        numeric = verified_numeric(
            lambda: float(np.sum(multihead_attention.heads_attention_forward(q, k, v, attn_cfg)[0] * dout)),
            {"dq": q, "dk": k, "dv": v}, reference, "attention backward")
        result = call_student(student_backward, "attention_core_backward", dout, cache, attn_cfg)
        if not isinstance(result, (tuple, list)) or len(result) != 3:
            raise ExerciseFailed(f"attention_core_backward should return (dq, dk, dv); got {type(result).__name__}")
        factors = {"sqrt(Dh) = 2: the 1/sqrt(Dh) of the scores is missing": 2.0,
                   "1/sqrt(Dh) = 1/2: 1/sqrt(Dh) was applied twice": 0.5}
        other = SOFTMAX if attn_cfg.kind == "relu" else RELU_OVER_L
        other_dscores = attention_weights.attention_weights_backward(dout @ v.swapaxes(-1, -2), cache[4], other)
        mistakes = {name: {f"the weights' backward must follow attn_cfg ({describe(attn_cfg)}); this used "
                           f"{describe(other)}'s": wrong}
                    for name, wrong in (("dq", other_dscores @ k / 2.0), ("dk", other_dscores.swapaxes(-1, -2) @ q / 2.0))}
        return grade(f"attention_core_backward ({describe(attn_cfg)})", dict(zip(("dq", "dk", "dv"), result)),
                     reference, numeric, factors=factors, mistakes=mistakes, announce=False,
                     hint="with S = Q K^T / sqrt(Dh), W = weights(S) and O = W V: dV and dW from O = W V, dS from "
                          "the weights' backward, then dQ and dK from S (mind which side each factor goes on)")

    return _over_configs("attention_core_backward", [RELU_OVER_L, SOFTMAX], check_one)


@checker
def check_self_attention_backward(student_backward, seed: int = 0) -> dict:
    """student_backward(dout, cache, attn_cfg, heads) -> (dx, {"qkv": {"w", "b"}, "proj": {"w", "b"}}), cache
    from multihead_attention.self_attention_forward(x, params, attn_cfg, heads), without qk-norm or gate;
    x (B, T, D) with D = 6, H = 2 heads. Graded for relu / L and softmax."""

    def check_one(attn_cfg):
        def draw(rng):
            x = rng.normal(size=(2, 4, 6))  # (B, T, D)
            params = {"qkv": {"w": rng.normal(size=(6, 18)) * 0.5, "b": rng.normal(size=18)},
                      "proj": {"w": rng.normal(size=(6, 6)), "b": rng.normal(size=6)}}
            scores = multihead_attention.self_attention_forward(x, params, attn_cfg, 2)[2][3][4][0]
            return (x, params), scores

        x, params = avoid_kinks(draw, seed)
        out, _, cache = multihead_attention.self_attention_forward(x, params, attn_cfg, 2)
        dout = np.random.default_rng(seed + 1).normal(size=out.shape)  # (B, T, D)
        dx, grads = multihead_attention.self_attention_backward(dout, cache, attn_cfg, 2)
        reference = {"dx": dx, **named_leaves(grads, "grads")}
        numeric = verified_numeric(
            lambda: float(np.sum(multihead_attention.self_attention_forward(x, params, attn_cfg, 2)[0] * dout)),
            {"dx": x, **named_leaves(params, "grads")}, reference, "self-attention backward")
        result = call_student(student_backward, "self_attention_backward", dout, cache, attn_cfg, 2)
        student = unpack_pair("self_attention_backward", result, "dx", "{'qkv': ..., 'proj': ...}")

        def hints(wrong):
            if not any(name.startswith("grads['proj']") for name in wrong):
                return ["grads['proj'] is right, so the error comes after the output projection's backward: check "
                        "how dconcat is split back into heads (undo the reshape and the transpose(0, 2, 1, 3)) and "
                        "how dq, dk, dv are put back into the [q | k | v] columns of dqkv"]
            return []

        return grade(f"self_attention_backward ({describe(attn_cfg)})", student, reference, numeric,
                     hints=hints, announce=False,
                     hint="undo the forward in reverse: the output projection's dense, the merge of the heads, the "
                          "attention core, the split into [q | k | v] and heads, the qkv dense")

    return _over_configs("self_attention_backward", [RELU_OVER_L, SOFTMAX], check_one)


@checker
def check_block_backward(student_backward, seed: int = 0) -> dict:
    """student_backward(dout, cache, cfg) -> (dx, grads) for one pre-LN block, cache from
    model.block_forward(x, params, cfg): x + attn(LN1(x)), then + mlp(LN2(x)); grads shaped like the block's
    parameters {"ln1", "attn", "ln2", "mlp"}. Graded with relu / L attention and a GELU MLP."""
    cfg = ViTConfig(image_size=4, patch_size=2, dim=8, depth=1, heads=2, mlp_dim=12, attention=RELU_OVER_L)

    def draw(rng):
        base = init_params(cfg, seed=seed, dtype=np.float64)["blocks"][0]
        params = tree_map(lambda leaf: leaf + 0.3 * rng.normal(size=leaf.shape), base)  # no identity norms
        x = rng.normal(size=(2, cfg.num_tokens, cfg.dim))  # (B, T, D)
        scores = model.block_forward(x, params, cfg)[2][1][3][4][0]  # (B, H, T, T)
        return (x, params), scores

    x, params = avoid_kinks(draw, seed)
    out, _, cache = model.block_forward(x, params, cfg)
    dout = np.random.default_rng(seed + 1).normal(size=out.shape)  # (B, T, D)
    dx, grads = model.block_backward(dout, cache, cfg)
    reference = {"dx": dx, **named_leaves(grads, "grads")}
    numeric = verified_numeric(lambda: float(np.sum(model.block_forward(x, params, cfg)[0] * dout)),
                               {"dx": x, **named_leaves(params, "grads")}, reference, "block backward")
    result = call_student(student_backward, "block_backward", dout, cache, cfg)
    student = unpack_pair("block_backward", result, "dx", "grads {'ln1', 'attn', 'ln2', 'mlp'}")

    def hints(wrong):
        mlp_wrong = any(name.startswith(("grads['mlp']", "grads['ln2']")) for name in wrong)
        attn_wrong = any(name.startswith(("grads['attn']", "grads['ln1']")) for name in wrong)
        if mlp_wrong:
            return ["the MLP branch is already wrong; it is the first thing the backward meets (the last step of "
                    "the forward): mlp_backward(dout, ...), then layernorm_backward with LN2's cache"]
        if attn_wrong:
            return ["the MLP branch is right and the attention branch is not: the gradient entering the attention "
                    "branch is dout + the MLP branch's dx, because x + mlp(LN2(x)) passes dout straight through"]
        return ["every parameter gradient is right but dx is not: the first residual x + attn(LN1(x)) passes "
                "its incoming gradient straight through to dx as well, so add it to the attention branch's dx"]

    return grade("block_backward", student, reference, numeric, hints=hints)
