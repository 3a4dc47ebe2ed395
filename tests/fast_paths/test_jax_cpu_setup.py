"""reluattn.jax_backend.fast.cpu_setup: importing changes nothing; configure() (called by the trainer)
changes malloc's settings, and how to stop it.

Each case runs in a fresh Python process, since the settings are process-wide and applied once.
"""

import json
import os
import platform
import subprocess
import sys

import pytest

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPORT = ("import json, reluattn.jax_backend; from reluattn.jax_backend.fast import cpu_setup; "
          "print(json.dumps(cpu_setup.configure()))")
glibc_linux = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                                 reason="the malloc settings exist only on Linux with glibc")


def applied_in_fresh_process(code=REPORT, **environment) -> dict:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("MALLOC_", "RELUATTN_"))}
    env.update(environment, PYTHONPATH=PROJECT_ROOT + os.pathsep + env.get("PYTHONPATH", ""))
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


# glibc has no call that reads mallopt's settings back, so these scripts replace mallopt with a recorder
# (through ctypes.CDLL, which cpu_setup uses to reach it) before importing every reluattn module.
IMPORT_EVERYTHING = """
import ctypes, json, os, pkgutil, importlib, sys
calls = []
real_cdll = ctypes.CDLL
class Recording:
    def __init__(self, library):
        self.library = library
    def __getattr__(self, name):
        if name == "mallopt":
            return lambda *args: calls.append(args) or 1
        return getattr(self.library, name)
ctypes.CDLL = lambda *args, **kwargs: Recording(real_cdll(*args, **kwargs))
import jax, matplotlib  # their own imports set variables of their own (TF_CPP_MIN_LOG_LEVEL, ...)
environment = dict(os.environ)
import reluattn
skip = ("reluattn.__main__",)  # running it would start the command line
for module in pkgutil.walk_packages(reluattn.__path__, "reluattn."):
    if module.name not in skip:
        importlib.import_module(module.name)
from reluattn.jax_backend.fast import cpu_setup
print(json.dumps({"mallopt calls": calls, "environment changed": dict(os.environ) != environment,
                  "applied": cpu_setup.applied, "modules": len(sys.modules)}))
"""


def test_importing_any_reluattn_module_changes_no_process_setting():
    report = applied_in_fresh_process(IMPORT_EVERYTHING)
    assert report["mallopt calls"] == [] and report["applied"] == {}
    assert report["environment changed"] is False


@glibc_linux
def test_configure_calls_mallopt_when_asked():
    code = IMPORT_EVERYTHING.replace("from reluattn.jax_backend.fast import cpu_setup",
                                     "from reluattn.jax_backend.fast import cpu_setup; cpu_setup.configure()")
    report = applied_in_fresh_process(code)
    assert len(report["mallopt calls"]) == 4 and report["applied"]["MALLOC_MMAP_MAX_"] == 0


@glibc_linux
def test_configure_keeps_large_blocks_in_the_malloc_heap():
    assert applied_in_fresh_process() == {"MALLOC_ARENA_MAX": 1, "MALLOC_MMAP_MAX_": 0,
                                          "MALLOC_TRIM_THRESHOLD_": 2**31 - 1, "MALLOC_TOP_PAD_": 64 * 2**20}


@glibc_linux
def test_settings_the_user_made_are_left_alone():
    applied = applied_in_fresh_process(MALLOC_ARENA_MAX="4", MALLOC_TOP_PAD_="0")
    assert "MALLOC_ARENA_MAX" not in applied and "MALLOC_TOP_PAD_" not in applied
    assert applied["MALLOC_MMAP_MAX_"] == 0


def test_opting_out_changes_nothing():
    assert applied_in_fresh_process(RELUATTN_CPU_SETUP="0") == {}


def test_nothing_is_changed_once_a_jax_backend_exists():
    code = "import jax; jax.devices(); " + REPORT  # the backend starts before reluattn's is imported
    assert applied_in_fresh_process(code) == {}


@glibc_linux
def test_training_sets_up_malloc_before_loading_data(tmp_path):
    # Decoding images starts threads; malloc settings made after that do not reach every thread, so the
    # trainer must run the CPU setup first. Stop the run at the data loader and look.
    code = (
        "import json, reluattn.training.loop as t\n"
        "class Stop(Exception): pass\n"
        "def loader(*args, **kwargs):\n"
        "    import sys\n"
        "    raise Stop(json.dumps(sys.modules['reluattn.jax_backend.fast.cpu_setup'].applied\n"
        "                          if 'reluattn.jax_backend.fast.cpu_setup' in sys.modules else {}))\n"
        "t.load_run_data = loader\n"
        "from reluattn.training.presets import PRESETS\n"
        "try:\n"
        f"    t.train(PRESETS['cpu-small'], {str(tmp_path / 'run')!r}, progress=False)\n"
        "except Stop as stop:\n"
        "    print(stop.args[0])\n")
    assert applied_in_fresh_process(code)["MALLOC_MMAP_MAX_"] == 0


HINT_SCRIPT = """
import json, warnings, numpy as np
import reluattn as ra
from reluattn.jax_backend.fast import cpu_setup
if CONFIGURE:
    cpu_setup.configure()
cfg = ra.ViTConfig(image_size=8, patch_size=4, dim=8, depth=1, heads=2, mlp_dim=8, num_classes=3)
params = ra.init_params(cfg, seed=0)
images, labels = np.zeros((2, 8, 8, 3), np.float32), np.array([0, 1])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for _ in range(2):
        ra.backend("jax").loss_and_grad(params, images, labels, cfg, fast=True)
    ra.backend("jax").loss_and_grad(params, images, labels, cfg)  # the plain path never hints
print(json.dumps([str(w.message) for w in caught if "malloc set-up" in str(w.message)]))
"""


@glibc_linux
@pytest.mark.parametrize("configure, environment, hints", [(False, {}, 1), (True, {}, 0),
                                                          (False, {"RELUATTN_CPU_SETUP": "0"}, 0)])
def test_the_fast_path_hints_once_at_the_missing_cpu_setup(configure, environment, hints):
    messages = applied_in_fresh_process(HINT_SCRIPT.replace("CONFIGURE", str(configure)), **environment)
    assert len(messages) == hints
    if hints:
        assert "cpu_setup.configure()" in messages[0] and "RELUATTN_CPU_SETUP=0" in messages[0]
