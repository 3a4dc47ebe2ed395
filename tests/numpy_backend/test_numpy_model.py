"""The whole NumPy ViT: loss_and_grad against finite differences for every attention kind x qk_norm x
gated x pool x mlp_activation, and the boundary's behaviour (dtypes, return values, bad input)."""

import itertools

import numpy as np
import pytest

from gradcheck import check_gradients
from reluattn.config import ATTENTION_KINDS, MLP_ACTIVATIONS, POOLS, AttentionConfig, ViTConfig
from reluattn.numpy_backend import apply, loss_and_grad, model
from reluattn.numpy_backend.layers import cross_entropy_forward, targets_from_labels
from reluattn.params import flatten, init_params, tree_map

VARIANTS = list(itertools.product(ATTENTION_KINDS, [False, True], [False, True], POOLS, MLP_ACTIVATIONS))


def tiny_config(kind="relu", qk_norm=False, gated=False, pool="cls", mlp_activation="gelu", **changes):
    options = dict(image_size=8, patch_size=4, channels=3, num_classes=3, dim=8, depth=2, heads=2,
                   mlp_dim=12, pool=pool, mlp_activation=mlp_activation,
                   attention=AttentionConfig(kind=kind, qk_norm=qk_norm, gated=gated))
    return ViTConfig(**{**options, **changes})


def random_params(cfg, seed):
    """float64 parameters with every leaf non-trivial (no zero biases, no unit scales, a large head), so
    that every path of the backward carries a gradient of its own size."""
    rng = np.random.default_rng(seed)
    params = init_params(cfg, seed=seed, dtype=np.float64)
    for path, leaf in flatten(params).items():
        if path == "head/w":
            leaf[...] = rng.normal(0.0, 0.7, leaf.shape)
        else:
            leaf += rng.normal(0.0, 0.3, leaf.shape)
    return params


def check_model_gradients(cfg, seed, samples=2):
    """loss_and_grad of a random float64 model against finite differences of its loss, every leaf."""
    params = random_params(cfg, seed)
    rng = np.random.default_rng(seed + 1)
    images = rng.normal(size=(2, cfg.image_size, cfg.image_size, cfg.channels))
    labels = rng.integers(0, cfg.num_classes, size=2)
    loss, grads = loss_and_grad(params, images, labels, cfg)
    targets = targets_from_labels(labels, cfg.num_classes)

    def loss_only():  # the forward alone, without the input checks, for speed
        return cross_entropy_forward(model.forward(params, images, cfg)[0], targets)[0]

    assert loss == pytest.approx(loss_only(), rel=1e-12)
    try:  # flatten(params) holds the very arrays the forward reads, so they can be nudged in place
        check_gradients(loss_only, flatten(params), flatten(grads), samples=samples, seed=seed)
    except AssertionError as error:
        raise AssertionError(f"{cfg.attention}, pool={cfg.pool}, mlp={cfg.mlp_activation}: {error}") from None


@pytest.mark.parametrize("first", range(0, len(VARIANTS), 16))
def test_loss_and_grad_matches_finite_differences(first):
    """Each case checks 16 consecutive variants; the 18 cases cover the whole product."""
    for variant in VARIANTS[first:first + 16]:
        check_model_gradients(tiny_config(*variant), seed=first)


def test_every_variant_is_covered():
    assert len(VARIANTS) == 9 * 2 * 2 * 2 * 4
    assert len(VARIANTS) % 16 == 0


@pytest.mark.parametrize("pool", POOLS)
def test_loss_and_grad_with_soft_labels_and_label_smoothing(pool):
    cfg = tiny_config("relu", True, True, pool, "softmax_ln", depth=1)
    params = random_params(cfg, 7)
    images = np.random.default_rng(8).normal(size=(3, 8, 8, 3))
    labels = np.random.default_rng(9).dirichlet(np.ones(3), size=3)
    loss, grads = loss_and_grad(params, images, labels, cfg, label_smoothing=0.2)
    targets = targets_from_labels(labels, 3, 0.2)

    def loss_only():
        return cross_entropy_forward(model.forward(params, images, cfg)[0], targets)[0]

    assert loss == pytest.approx(loss_only(), rel=1e-12)
    check_gradients(loss_only, flatten(params), flatten(grads), samples=3, seed=1)


# ------------------------------------------------------------------------------------------ the boundary

def test_apply_returns_logits_and_attention_in_the_params_dtype():
    cfg = tiny_config(pool="gap")
    images = np.random.default_rng(0).uniform(size=(4, 8, 8, 3)).astype(np.float32)
    for dtype in (np.float32, np.float64):
        params = init_params(cfg, seed=0, dtype=dtype)
        logits, attention = apply(params, images, cfg, return_attention=True)
        assert logits.shape == (4, 3) and logits.dtype == dtype
        assert len(attention) == cfg.depth
        assert all(w.shape == (4, 2, 4, 4) and w.dtype == dtype for w in attention)
        np.testing.assert_array_equal(apply(params, images, cfg), logits)
        loss, grads = loss_and_grad(params, images, np.array([0, 1, 2, 0]), cfg)
        assert type(loss) is float
        shapes = tree_map(lambda leaf: (leaf.shape, leaf.dtype), grads)
        assert shapes == tree_map(lambda leaf: (leaf.shape, leaf.dtype), params)


def test_integer_images_are_cast_to_the_params_dtype():
    cfg = tiny_config()
    params = init_params(cfg, seed=0, dtype=np.float64)
    images = np.random.default_rng(0).integers(0, 256, size=(2, 8, 8, 3), dtype=np.uint8)
    np.testing.assert_allclose(apply(params, images, cfg), apply(params, images.astype(np.float64), cfg))


def reference_logits(params, images, cfg):
    """The ViT written the slow, obvious way (a loop over images and heads), independently of the backend,
    to pin the forward's conventions: patch order, class token, position embedding, pre-LN, pooling."""
    def norm(x, p, eps=1e-6):
        out = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps) * p["scale"]
        return out + p.get("bias", 0.0)

    def act(name, x):
        gelu = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
        return {"gelu": gelu, "relu": np.maximum(x, 0), "identity": x, "relu2": np.maximum(x, 0) ** 2,
                "softplus": np.log1p(np.exp(x)), "sigmoid": 1 / (1 + np.exp(-x)), "relu6": np.clip(x, 0, 6)}[name]

    def softmax(x):
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    p_side, heads, dh, a = cfg.patch_size, cfg.heads, cfg.head_dim, cfg.attention
    logits = []
    for image in images:
        grid = cfg.image_size // p_side
        patches = [image[r * p_side:(r + 1) * p_side, c * p_side:(c + 1) * p_side].reshape(-1)
                   for r in range(grid) for c in range(grid)]
        x = np.array(patches) @ params["patch_embed"]["w"] + params["patch_embed"]["b"]
        if cfg.pool == "cls":
            x = np.vstack([params["cls_token"], x])
        x = x + params["pos_embed"]
        for block in params["blocks"]:
            h = norm(x, block["ln1"])
            qkv = h @ block["attn"]["qkv"]["w"] + block["attn"]["qkv"]["b"]
            outs = []
            for head in range(heads):
                q, k, v = (qkv[:, part * cfg.dim + head * dh: part * cfg.dim + (head + 1) * dh] for part in range(3))
                if a.qk_norm:
                    q, k = norm(q, block["attn"]["q_norm"]), norm(k, block["attn"]["k_norm"])
                s = q @ k.T / np.sqrt(dh)
                length = s.shape[1]
                if a.kind == "softmax":
                    w = softmax(s)
                elif a.kind == "sigmoid_bias":
                    w = a.scale / (1 + np.exp(-(s - np.log(length))))
                else:
                    w = a.scale * length ** -a.alpha * act(a.kind, s)
                outs.append(w @ v)
            o = np.hstack(outs)
            if a.gated:
                g = h @ block["attn"]["gate"]["w"] + block["attn"]["gate"]["b"]
                o = o * g / (1 + np.exp(-g))
            x = x + o @ block["attn"]["proj"]["w"] + block["attn"]["proj"]["b"]
            h = norm(x, block["ln2"])
            hidden = h @ block["mlp"]["fc1"]["w"] + block["mlp"]["fc1"]["b"]
            read = softmax(hidden) if cfg.mlp_activation.startswith("softmax") else act(cfg.mlp_activation, hidden)
            m = read @ block["mlp"]["fc2"]["w"] + block["mlp"]["fc2"]["b"]
            x = x + (norm(m, block["mlp"]["ln"]) if cfg.mlp_activation == "softmax_ln" else m)
        x = norm(x, params["ln_f"])
        pooled = x[0] if cfg.pool == "cls" else x.mean(0)
        logits.append(pooled @ params["head"]["w"] + params["head"]["b"])
    return np.array(logits)


@pytest.mark.parametrize("kind", ATTENTION_KINDS)
def test_forward_matches_a_plain_reference(kind):
    images = np.random.default_rng(0).normal(size=(2, 8, 8, 3))
    for index, (qk_norm, gated, pool, mlp_activation) in enumerate(
            [(False, False, "cls", "gelu"), (True, True, "gap", "softmax_ln"), (True, False, "cls", "relu"),
             (False, True, "gap", "softmax")]):
        attention = AttentionConfig(kind=kind, alpha=0.7, scale=1.3, qk_norm=qk_norm, gated=gated)
        cfg = tiny_config(pool=pool, mlp_activation=mlp_activation).replace(attention=attention)
        params = random_params(cfg, index)
        np.testing.assert_allclose(apply(params, images, cfg), reference_logits(params, images, cfg),
                                   rtol=1e-10, atol=1e-12)


BAD_CALLS = {
    "wrong image size": (lambda im, lb: (im[:, :4, :4], lb), r"images must be 8x8 pixels.*got 4x4"),
    "not a batch of images": (lambda im, lb: (im[0], lb), r"images must have shape \(B, 8, 8, 3\).*got shape \(8, 8, 3\)"),
    "wrong channel count": (lambda im, lb: (im[..., :1], lb), r"images must have 3 channels.*got 1"),
    "label out of range": (lambda im, lb: (im, np.array([0, 3])), r"labels must be in \[0, 3\); got values from 0 to 3"),
    "negative label": (lambda im, lb: (im, np.array([-1, 0])), r"labels must be in \[0, 3\)"),
    "too few labels": (lambda im, lb: (im, lb[:1]), r"labels must have shape \(2,\).*got \(1,\)"),
    "soft labels of the wrong width": (lambda im, lb: (im, np.full((2, 4), 0.25)), r"soft labels must have shape \(2, 3\); got \(2, 4\)"),
    "float class indices": (lambda im, lb: (im, lb.astype(float)), r"labels must be integers"),
}


@pytest.mark.parametrize("case", BAD_CALLS)
def test_bad_input_raises_a_clear_value_error(case):
    cfg = tiny_config()
    params = init_params(cfg, seed=0)
    images, labels = np.zeros((2, 8, 8, 3), np.float32), np.array([0, 1])
    change, message = BAD_CALLS[case]
    bad_images, bad_labels = change(images, labels)
    with pytest.raises(ValueError, match=message):
        loss_and_grad(params, bad_images, bad_labels, cfg)
    if bad_labels is labels:  # an image problem: apply must refuse it as well
        with pytest.raises(ValueError, match=message):
            apply(params, bad_images, cfg)


def test_params_that_do_not_match_the_config_are_refused():
    cfg = tiny_config()
    images, labels = np.zeros((2, 8, 8, 3)), np.array([0, 1])
    wider = init_params(tiny_config(dim=12, heads=2), seed=0)
    with pytest.raises(ValueError, match=r"params do not match the config: .*has shape \(12,\), expected \(8,\)"):
        apply(wider, images, cfg)
    gated = init_params(tiny_config(gated=True), seed=0)
    with pytest.raises(ValueError, match=r"unexpected leaf blocks/0/attn/gate/w"):
        loss_and_grad(gated, images, labels, cfg)
    missing = init_params(cfg, seed=0)
    del missing["cls_token"]
    with pytest.raises(ValueError, match=r"missing cls_token \(expected shape \(8,\)\)"):
        apply(missing, images, cfg)


def test_label_smoothing_and_config_type_are_checked():
    cfg = tiny_config()
    params = init_params(cfg, seed=0)
    images, labels = np.zeros((2, 8, 8, 3)), np.array([0, 1])
    with pytest.raises(ValueError, match=r"label_smoothing must be a number in \[0, 1\), got 1.5"):
        loss_and_grad(params, images, labels, cfg, label_smoothing=1.5)
    with pytest.raises(ValueError, match=r"cfg must be a ViTConfig, got dict"):
        apply(params, images, cfg.to_dict())
