"""Importing the study changes no process-wide setting (matplotlib's backend, the environment) and loads
none of the trainer's modules beyond the run folder's readers: it reaches the trainer through the
`reluattn train` command."""

import json
import subprocess
import sys

SCRIPT = """
import json, os, sys, importlib, pkgutil
import matplotlib
matplotlib.use("svg")
before = dict(os.environ)
import reluattn.study
for module in pkgutil.walk_packages(reluattn.study.__path__, "reluattn.study."):
    importlib.import_module(module.name)
print(json.dumps({"backend": matplotlib.get_backend(), "environment_changed": dict(os.environ) != before,
                  "training": sorted(m for m in sys.modules if m.startswith("reluattn.training"))}))
"""


def test_importing_the_study_leaves_the_process_alone():
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["backend"] == "svg" and not report["environment_changed"]
    # the run folder's files and lock, nothing of the trainer itself
    assert set(report["training"]) <= {"reluattn.training", "reluattn.training.files", "reluattn.training.folder_lock",
                                       "reluattn.training.run_folder"}, report["training"]
