"""The parameter tree: its shapes (the contract), initialisation, and small tree helpers.

A parameter tree is nested dicts and lists of arrays. `param_shapes(cfg)` is the single statement of the
tree's names and shapes; `init_params` fills it, `check_params` holds a tree to it. Pure NumPy, so both
backends (and students) can use it.

Initialisation (also in docs/initialisation.md):
  patch_embed.w          LeCun normal, std = 1/sqrt(P*P*C)         (a conv stem treated as a dense layer)
  qkv.w (D, 3D)          q, k and v each their own (D, D) Xavier-uniform block, limit = sqrt(6 / (D + D))
                         (big_vision's separate projections; one Xavier over (D, 3D) would give q and k half
                         the variance, so scores with std ~0.5 instead of ~1 at initialisation)
  proj, gate, fc1, fc2 .w   Xavier (Glorot) uniform, limit = sqrt(6 / (fan_in + fan_out))
  head.w                 normal, std 0.02                          (small: logits start near uniform)
  pos_embed              normal, std 0.02
  cls_token              zeros
  every bias             zeros
  every LayerNorm scale, q_norm/k_norm scale   ones
  length.alpha (H,)      AttentionConfig.alpha     (the learned length factor starts as the fixed one)
  length.log_scale (H,)  zeros
"""

from __future__ import annotations

import numpy as np

from .config import ViTConfig


def param_shapes(cfg: ViTConfig) -> dict:
    """The tree of parameter shapes for `cfg` (names and shapes are part of the public contract)."""
    d, m, k, dh = cfg.dim, cfg.mlp_dim, cfg.num_classes, cfg.head_dim

    def dense(n_in, n_out):
        return {"w": (n_in, n_out), "b": (n_out,)}

    def norm(n):
        return {"scale": (n,), "bias": (n,)}

    def block():
        attn = {"qkv": dense(d, 3 * d), "proj": dense(d, d)}
        if cfg.attention.qk_norm:
            attn["q_norm"] = {"scale": (dh,)}
            attn["k_norm"] = {"scale": (dh,)}
        if cfg.attention.gated:
            attn["gate"] = dense(d, d)
        if cfg.attention.learned_length:
            attn["length"] = {"alpha": (cfg.heads,), "log_scale": (cfg.heads,)}
        mlp = {"fc1": dense(d, m), "fc2": dense(m, d)}
        if cfg.mlp_activation == "softmax_ln":
            mlp["ln"] = norm(d)
        return {"ln1": norm(d), "attn": attn, "ln2": norm(d), "mlp": mlp}

    tree = {"patch_embed": dense(cfg.patch_dim, d)}
    if cfg.pool == "cls":
        tree["cls_token"] = (d,)
    tree["pos_embed"] = (cfg.num_tokens, d)
    tree["blocks"] = [block() for _ in range(cfg.depth)]
    tree["ln_f"] = norm(d)
    tree["head"] = dense(d, k)
    return tree


def init_params(cfg: ViTConfig, seed: int = 0, dtype=np.float32) -> dict:
    """Fresh parameters for `cfg`, drawn from `np.random.default_rng(seed)` only (see module docstring)."""
    if not isinstance(cfg, ViTConfig):
        raise ValueError(f"init_params expects a ViTConfig, got {type(cfg).__name__}")
    rng = np.random.default_rng(seed)

    def init(path: str, shape: tuple) -> np.ndarray:
        name = path.rsplit("/", 1)[-1]
        if name in ("b", "bias") or path == "cls_token":
            return np.zeros(shape)
        if name == "scale":
            return np.ones(shape)
        if name == "alpha":  # the learned length exponent starts at the configured one
            return np.full(shape, cfg.attention.alpha)
        if name == "log_scale":  # exp(0) = 1: the learned factor starts as the fixed one
            return np.zeros(shape)
        if path == "pos_embed" or path == "head/w":
            return rng.normal(0.0, 0.02, shape)
        if path == "patch_embed/w":
            return rng.normal(0.0, 1.0 / np.sqrt(shape[0]), shape)
        if path.endswith("attn/qkv/w"):  # [q | k | v]: three (D, D) projections stored side by side
            return np.concatenate([xavier_uniform((shape[0], shape[1] // 3)) for _ in range(3)], axis=1)
        return xavier_uniform(shape)  # the remaining dense weights

    def xavier_uniform(shape: tuple) -> np.ndarray:
        limit = np.sqrt(6.0 / (shape[0] + shape[1]))  # keeps forward and backward variance balanced
        return rng.uniform(-limit, limit, shape)

    flat_shapes = flatten(param_shapes(cfg), is_leaf=lambda x: isinstance(x, tuple))
    return unflatten({path: init(path, shape).astype(dtype) for path, shape in flat_shapes.items()})


# --------------------------------------------------------------------------------------------- tree helpers

def _is_array_leaf(x) -> bool:
    return not isinstance(x, (dict, list, tuple))


def flatten(tree, is_leaf=_is_array_leaf, prefix: str = "") -> dict:
    """{"blocks/0/attn/qkv/w": leaf, ...} in a fixed order (dict keys sorted, lists in order)."""
    if is_leaf(tree):
        return {prefix: tree}
    if isinstance(tree, dict):
        items = [(str(key), tree[key]) for key in sorted(tree)]
    elif isinstance(tree, (list, tuple)):
        items = [(str(i), child) for i, child in enumerate(tree)]
    else:
        return {prefix: tree}
    out = {}
    for key, child in items:
        out.update(flatten(child, is_leaf, f"{prefix}/{key}" if prefix else key))
    return out


def unflatten(flat: dict) -> dict:
    """Inverse of `flatten`: path segments that are all digits become list positions."""
    root: dict = {}
    for path, leaf in flat.items():
        node = root
        keys = path.split("/")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = leaf

    def listify(node):
        if not isinstance(node, dict):
            return node
        if node and all(key.isdigit() for key in node):
            return [listify(node[str(i)]) for i in range(len(node))]
        return {key: listify(child) for key, child in node.items()}

    return listify(root)


def tree_map(fn, tree, *rest):
    """Apply `fn` leaf by leaf to one or more trees of the same structure."""
    if isinstance(tree, dict):
        return {key: tree_map(fn, tree[key], *(other[key] for other in rest)) for key in tree}
    if isinstance(tree, (list, tuple)):
        return [tree_map(fn, child, *(other[i] for other in rest)) for i, child in enumerate(tree)]
    return fn(tree, *rest)


def tree_leaves(tree) -> list:
    return list(flatten(tree).values())


def count_params(tree) -> int:
    return int(sum(np.size(leaf) for leaf in tree_leaves(tree)))


def decay_mask(params) -> dict:
    """True where AdamW applies weight decay: the dense-layer weights `w` only (not biases, norm scales,
    the position embedding or the class token). Both backends' optimizers use this one rule."""
    flat = flatten(params)
    return unflatten({path: path.rsplit("/", 1)[-1] == "w" for path in flat})


def learned_length(params) -> dict | None:
    """The learned length factor of every block, for logging: {"alpha": (depth, H), "log_scale": (depth, H)}
    as float64 NumPy arrays (ReLUFormer's gamma is exp(-log_scale)), or None when the blocks have none."""
    blocks = [block["attn"].get("length") for block in params["blocks"]]
    if any(length is None for length in blocks):
        return None
    return {name: np.stack([np.asarray(length[name], dtype=np.float64) for length in blocks])
            for name in ("alpha", "log_scale")}


def check_params(params, cfg: ViTConfig) -> None:
    """Raise ValueError naming every leaf that is missing, unexpected or of the wrong shape for `cfg`."""
    if not isinstance(params, dict):
        raise ValueError(f"params must be a dict tree as returned by init_params, got {type(params).__name__}")
    expected = flatten(param_shapes(cfg), is_leaf=lambda x: isinstance(x, tuple))
    try:
        got = {path: tuple(np.shape(leaf)) for path, leaf in flatten(params).items()}
    except Exception as error:  # a leaf np.shape cannot read
        raise ValueError(f"params tree holds something that is not an array: {error}") from None
    problems = []
    for path in expected:
        if path not in got:
            problems.append(f"missing {path} (expected shape {expected[path]})")
        elif got[path] != expected[path]:
            problems.append(f"{path} has shape {got[path]}, expected {expected[path]}")
    problems += [f"unexpected leaf {path} {got[path]}" for path in got if path not in expected]
    if problems:
        shown = "; ".join(problems[:6]) + (f"; and {len(problems) - 6} more" if len(problems) > 6 else "")
        raise ValueError(f"params do not match the config: {shown}")
