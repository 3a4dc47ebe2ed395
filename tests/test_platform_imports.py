"""reluattn imports without POSIX-only modules (Windows has no fcntl, termios, resource, pwd, grp): every
module of the package is imported in a subprocess whose import system refuses them."""

import os
import subprocess
import sys
from pathlib import Path

CODE = """
import importlib, importlib.abc, pkgutil, sys
BLOCKED = {"fcntl", "termios", "resource", "pwd", "grp"}
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"No module named {name!r} (blocked: a Windows-like platform)")
for name in BLOCKED:
    sys.modules.pop(name, None)
sys.meta_path.insert(0, Refuse())
import reluattn
names = [info.name for info in pkgutil.walk_packages(reluattn.__path__, "reluattn.")
         if not info.name.endswith("__main__")]  # __main__ would run the CLI
for name in names:
    importlib.import_module(name)
assert {"reluattn.cli", "reluattn.testing", "reluattn.training.run_folder"} <= set(names)
assert not BLOCKED & set(sys.modules), BLOCKED & set(sys.modules)
print(len(names), "modules")
"""


def test_every_module_imports_without_posix_only_modules():
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "modules" in result.stdout
