"""reluattn: ReLU attention, relu(q.k / sqrt(Dh)) / L, in a NumPy ViT with hand-written backprop and a
jit-compiled JAX ViT with the same functional API.

    import reluattn as ra
    cfg = ra.ViTConfig(attention=ra.AttentionConfig(kind="relu", alpha=1.0))
    params = ra.init_params(cfg, seed=0)
    logits = ra.backend("numpy").apply(params, images, cfg)   # or ra.backend("jax")

Backends are imported on first use, so `import reluattn` (and the NumPy backend) never imports JAX.
The two backends are twins: the same file names and function names (the name table is
`reluattn.twins`). Importing any reluattn module changes no process-wide setting.
"""

from .config import AttentionConfig, OptimizerConfig, ViTConfig
from .params import init_params

__all__ = ["AttentionConfig", "OptimizerConfig", "ViTConfig", "init_params", "backend"]
__version__ = "0.1.0"

BACKENDS = ("numpy", "jax")


def backend(name: str):
    """The backend module `name` ("numpy" or "jax"). Both expose the same functions:
    `apply(params, images, cfg)`, `loss_and_grad(params, images, labels, cfg)`, `attention(...)`,
    `init_optimizer(params, opt_cfg)` and `train_step(...)`; the JAX ones also take the opt-in speed
    options `compute_dtype=` and `fast=`."""
    if name == "numpy":
        from . import numpy_backend
        return numpy_backend
    if name == "jax":
        from . import jax_backend
        return jax_backend
    raise ValueError(f"backend must be one of {', '.join(BACKENDS)}; got {name!r}")
