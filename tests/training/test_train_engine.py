"""The engines behind the training loop: the Engine protocol is what the loop calls, the NumPy and JAX
engines score the same parameters alike (one evaluation, two scorers), and `fast` reaches the backend."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import reluattn as ra
from reluattn.training.config import TrainConfig
from reluattn.training.engine import Engine, JaxEngine, NumpyEngine, backend_options, make_engine
from reluattn.training.presets import PRESETS

ROOT = Path(__file__).resolve().parents[2]
MEMBERS = {name for name in vars(Engine) if not name.startswith("_")} | set(Engine.__annotations__)


def test_the_protocol_is_what_the_loop_calls_and_both_engines_have_it():
    called = set()
    for name in ("loop.py", "step_loop.py"):  # train() starts the engine; the loop over steps drives it
        tree = ast.parse((ROOT / "reluattn" / "training" / name).read_text())
        called |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)  # engine.X, self.engine.X
                   and getattr(node.value, "id", getattr(node.value, "attr", None)) == "engine"}
    assert called and called <= MEMBERS, f"the loop calls {sorted(called - MEMBERS)}, which Engine does not document"
    for kind in (NumpyEngine, JaxEngine):
        assert all(callable(getattr(kind, name)) for name in MEMBERS - set(Engine.__annotations__)), kind


def tiny_config(backend: str) -> TrainConfig:
    model = ra.ViTConfig(image_size=8, patch_size=4, num_classes=3, dim=16, depth=1, heads=2, mlp_dim=16)
    return TrainConfig(model=model, steps=2, batch_size=4, backend=backend).resolve(16, 8, 3, 3)


def test_numpy_and_jax_engines_evaluate_alike_and_the_padded_batch_changes_nothing():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (13, 8, 8, 3), dtype=np.uint8)  # 13 = 2 batches of 5 and a padded one
    labels = rng.integers(0, 3, 13)
    mean, std = [0.5, 0.4, 0.3], [0.2, 0.25, 0.3]
    params = ra.init_params(tiny_config("numpy").model, seed=1)
    results = {}
    for backend in ("numpy", "jax"):
        engine = make_engine(tiny_config(backend), images, labels, mean, std)
        engine.start(params)
        results[backend] = engine.evaluate(images, labels, batch_size=5)
    from reluattn.training.augment import normalize
    logits = np.asarray(ra.backend("numpy").apply(params, normalize(images, mean, std), tiny_config("numpy").model),
                        np.float64)  # (13, 3): all images at once, no padding
    log_probs = logits - logits.max(-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    expected_loss = -log_probs[np.arange(13), labels].mean()
    expected_accuracy = (logits.argmax(-1) == labels).mean()
    for backend, result in results.items():
        assert result["n"] == 13
        assert result["accuracy"] == pytest.approx(expected_accuracy, abs=1e-12), backend
        assert result["loss"] == pytest.approx(expected_loss, rel=1e-5), backend


def test_fast_and_the_compute_dtype_reach_the_backend():
    small = PRESETS["cpu-small"]
    assert backend_options(small) == {"compute_dtype": jnp.bfloat16, "fast": True}
    assert backend_options(small.replace(fast=False, compute_dtype="float32")) == {"compute_dtype": None,
                                                                                    "fast": False}


def test_importing_the_tool_and_the_command_line_imports_no_jax():
    # `reluattn --help` and the configs stay quick; JAX is imported when a run or an evaluation starts.
    code = ("import json, sys, reluattn.cli, reluattn.training, reluattn.training.presets\n"
            "print(json.dumps(sorted(name for name in sys.modules if name.split('.')[0] in ('jax', 'jaxlib'))))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []
