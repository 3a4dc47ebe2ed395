"""The smoke subset CI runs on the declared minimum versions (.ci/minimums): import, one train_step, the
testing kit on the drop-in. The 3-step `reluattn train` is run by .ci/minimums itself."""

import jax
import numpy as np
import optax

import reluattn
import reluattn.cli  # noqa: F401
import reluattn.testing as rt
from reluattn import jax_backend
from reluattn.config import OptimizerConfig, ViTConfig
from reluattn.jax_backend import dot_product_attention
from reluattn.params import init_params

print(f"jax {jax.__version__}, optax {optax.__version__}, numpy {np.__version__}")
cfg = ViTConfig(image_size=8, patch_size=4, dim=8, depth=1, heads=2, mlp_dim=16)
params = init_params(cfg, seed=0)
opt_cfg = OptimizerConfig(total_steps=2)
opt_state = jax_backend.init_optimizer(params, opt_cfg)
images, labels = rt.make_batch(cfg, seed=0)
params, opt_state, metrics = jax_backend.train_step(params, opt_state, images, labels, cfg, opt_cfg)
assert all(np.all(np.isfinite(np.asarray(value))) for value in jax.tree.leaves(metrics)), metrics
print("train_step: ok")
rt.check_attention_grad(jax_backend.attention, kinds=["relu", "softmax"], max_examples=3)
rt.check_dot_product_attention(dot_product_attention, kinds=["relu", "gelu", "softmax"], max_examples=3)
print("kit on the drop-in: ok")
