"""The NumPy backend is pure NumPy: importing it (and using it) must not pull in JAX, SciPy or PyTorch."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, sys
import numpy as np
import reluattn
import reluattn.numpy_backend as nb
cfg = reluattn.ViTConfig(image_size=8, patch_size=4, dim=8, heads=2, depth=1, mlp_dim=8)
params = reluattn.init_params(cfg)
nb.loss_and_grad(params, np.zeros((1, 8, 8, 3)), np.array([1]), cfg)
print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] in ("jax", "jaxlib", "scipy", "torch"))))
"""


def test_importing_and_using_the_numpy_backend_imports_no_jax_scipy_or_torch():
    result = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True,
                            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


def test_the_backend_modules_import_only_numpy_and_the_pure_project_modules():
    allowed = {"numpy", "math", "typing", "__future__"}
    for path in (ROOT / "reluattn" / "numpy_backend").glob("*.py"):
        for line in path.read_text().splitlines():
            words = line.split()
            if words[:1] == ["import"] or (words[:1] == ["from"] and not words[1].startswith(".")):
                assert words[1].split(".")[0] in allowed, f"{path.name}: {line.strip()}"
            if words[:1] == ["from"] and words[1].startswith(".."):
                assert words[1] in ("..config", "..params", "..checks"), f"{path.name}: {line.strip()}"
