"""Data parallelism: one training step with the batch sharded over 4 (CPU) devices equals the same step on
one device. XLA fixes the device count when JAX starts, so the 4-device run happens in a subprocess with
XLA_FLAGS=--xla_force_host_platform_device_count=4; it compares in float64 and reports the worst error."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import reluattn as ra

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import json
    import jax
    jax.config.update("jax_enable_x64", True)
    import numpy as np
    import reluattn as ra
    from reluattn.params import flatten
    from reluattn.testing import make_batch, make_parameters, relative_error

    jb = ra.backend("jax")
    cfg = ra.ViTConfig(image_size=8, patch_size=4, channels=3, num_classes=3, dim=12, depth=2, heads=3, mlp_dim=16,
                       attention=ra.AttentionConfig(kind="relu", qk_norm=True, gated=True))
    opt_cfg = ra.OptimizerConfig(learning_rate=1e-2, total_steps=10, clip_norm=0.5)
    params = make_parameters(cfg, 0, np.float64)
    images, labels = make_batch(cfg, 1, np.float64, batch=8)
    mesh = jb.data_mesh()
    result = {"devices": len(jax.devices()), "mesh": int(mesh.size)}

    # Two sharded steps, from replicated params and state.
    sharded_params, sharded_state = jb.replicate((params, jb.init_optimizer(params, opt_cfg)), mesh)
    for _ in range(2):
        sharded_params, sharded_state, sharded_metrics = jb.sharded_train_step(
            sharded_params, sharded_state, images, labels, cfg, opt_cfg, mesh=mesh)
    leaf = sharded_params["blocks"][0]["attn"]["qkv"]["w"]
    result["params_replicated"] = bool(leaf.sharding.is_fully_replicated) and len(leaf.sharding.device_set) == 4
    placed_images, _ = jb.shard_batch((images, labels), mesh)
    result["batch_split"] = sorted(shard.data.shape[0] for shard in placed_images.addressable_shards)

    # The same two steps on one device.
    single_params, single_state = params, jb.init_optimizer(params, opt_cfg)
    for _ in range(2):
        single_params, single_state, single_metrics = jb.train_step(
            single_params, single_state, images, labels, cfg, opt_cfg)
    single_leaf = single_params["head"]["w"]
    result["single_device_count"] = len(single_leaf.sharding.device_set)

    sharded, single = flatten(jax.device_get(sharded_params)), flatten(jax.device_get(single_params))
    updates = lambda new: {p: np.asarray(new[p]) - flatten(params)[p] for p in new}
    a, b = updates(sharded), updates(single)
    result["update_error"] = max(relative_error(a[p], b[p]) for p in b)
    result["metric_error"] = max(relative_error(sharded_metrics[k], single_metrics[k]) for k in single_metrics)
    try:
        jb.shard_batch((images[:7], labels[:7]), mesh)
        result["uneven_batch"] = "accepted"
    except ValueError as error:
        result["uneven_batch"] = str(error)
    print("RESULT" + json.dumps(result))
""")


def test_one_step_on_four_devices_equals_one_step_on_one_device():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    completed = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True,
                               text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    line = [line for line in completed.stdout.splitlines() if line.startswith("RESULT")][-1]
    result = json.loads(line[len("RESULT"):])
    assert result["devices"] == result["mesh"] == 4
    assert result["params_replicated"]
    assert result["batch_split"] == [2, 2, 2, 2]
    assert result["single_device_count"] == 1
    # Only the order of the gradient sums differs (per-device partial sums, then an all-reduce).
    assert result["update_error"] <= 1e-9
    assert result["metric_error"] <= 1e-12
    assert "divide evenly" in result["uneven_batch"]


def test_sharded_step_in_this_process_runs_on_however_many_devices_there_are():
    """In the test process itself (usually 1 CPU device) the sharded path is the plain step."""
    import jax

    jb = ra.backend("jax")
    cfg = ra.ViTConfig(image_size=8, patch_size=4, channels=3, num_classes=3, dim=8, depth=1, heads=2, mlp_dim=8)
    opt_cfg = ra.OptimizerConfig(total_steps=10)
    params = ra.init_params(cfg)
    batch = 2 * len(jax.devices())  # divides evenly over the devices
    images = np.random.default_rng(0).normal(size=(batch, 8, 8, 3)).astype(np.float32)
    labels = np.arange(batch) % 3
    new_params, state, metrics = jb.sharded_train_step(params, jb.init_optimizer(params, opt_cfg), images,
                                                       labels, cfg, opt_cfg)
    expected, _, expected_metrics = jb.train_step(params, jb.init_optimizer(params, opt_cfg), images, labels,
                                                  cfg, opt_cfg)
    np.testing.assert_allclose(np.asarray(new_params["head"]["w"]), np.asarray(expected["head"]["w"]), rtol=1e-6)
    assert float(metrics["loss"]) == pytest.approx(float(expected_metrics["loss"]), rel=1e-6)
