"""Every tutorial notebook runs top to bottom (RELUATTN_QUICK=1) in a kernel on this interpreter, and each
is committed without outputs. The notebooks' check cells assert their claims, so a broken claim fails here.

Each notebook gets its own kernel. The kernel is this test's Python (a kernelspec written for the test and
found first through JUPYTER_PATH), with the project root on PYTHONPATH, so it imports this checkout's
reluattn whether or not the package is installed. The decoded-image cache is the session's private one
(conftest.py), shared by the notebooks, so CIFAR is decoded once per test run.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = ROOT / "tutorials"
NOTEBOOKS = sorted(TUTORIALS.glob("[0-9][0-9]_*.ipynb"))
CELL_TIMEOUT = 300  # seconds; a whole quick notebook takes well under a minute here
PROBE = "import sys, reluattn; print(sys.executable); print(reluattn.__file__)"


def test_the_tutorials_are_there():
    expected = {"01_why_1_over_L.ipynb", "02_backprop_by_hand.ipynb", "03_same_model_in_jax.ipynb",
                "04_training_on_cifar10.ipynb", "05_key_value_memories.ipynb", "06_parallelism.ipynb"}
    assert expected == {path.name for path in NOTEBOOKS}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_committed_without_outputs(path):
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    assert notebook.metadata["kernelspec"]["name"] == "python3"
    dirty = [index for index, cell in enumerate(notebook.cells)
             if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None)]
    assert not dirty, f"{path.name}: cells {dirty} hold outputs; clear them before committing"


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory):
    """Environment for the kernels: this interpreter as "python3", the checkout importable, quick mode."""
    kernels = tmp_path_factory.mktemp("jupyter") / "kernels" / "python3"
    kernels.mkdir(parents=True)
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3 (tests)", "language": "python"}
    (kernels / "kernel.json").write_text(json.dumps(spec))
    env = {"JUPYTER_PATH": str(kernels.parents[1]), "RELUATTN_QUICK": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return env


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_notebook_runs(path, kernel_env, monkeypatch):
    for name, value in kernel_env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the notebook's own inline backend, as a student sees it
    notebook = nbformat.read(path, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell(PROBE))
    client = NotebookClient(notebook, timeout=CELL_TIMEOUT, kernel_name="python3",
                            resources={"metadata": {"path": str(TUTORIALS)}})
    client.execute()  # raises CellExecutionError, naming the cell, when any cell fails
    probe = "".join(output.get("text", "") for output in notebook.cells[-1].outputs).split()
    assert Path(probe[0]).resolve() == Path(sys.executable).resolve(), f"kernel ran {probe[0]}"
    assert Path(probe[1]).resolve().is_relative_to(ROOT), f"kernel imported reluattn from {probe[1]}"
    images = sum("image/png" in output.get("data", {}) for cell in notebook.cells if cell.cell_type == "code"
                 for output in cell.outputs)
    assert images >= 2, f"{path.name} drew {images} figures"
