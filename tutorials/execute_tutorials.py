"""Run the tutorials in place, so that the committed notebooks carry their outputs (`make notebooks`).

    python tutorials/execute_tutorials.py            # run every tutorial, write its outputs into it
    python tutorials/execute_tutorials.py 01 04      # only these (name prefixes)
    python tutorials/execute_tutorials.py --check    # exit 1 if a tutorial's outputs are missing or stale

They run as the instructor site runs them (docs/conf.py): in quick mode (RELUATTN_QUICK=1, unless it is set
otherwise), with matplotlib's inline backend, in a kernel on this interpreter with this checkout importable,
the working directory tutorials/. CIFAR-10 comes from RELUATTN_DATA where it is set, as in the notebooks.

A notebook written here records in its metadata (`reluattn.outputs`) the quick mode it ran in and a digest
of its code cells: `--check` (and the tests) call its outputs stale as soon as a code cell changes. A change
to the package alone is not seen: run this again when a change shows in the outputs. The notebook-level
metadata stays as committed (no Python version), cells get no timings, and a notebook is not written when
an output holds an absolute path of this machine: print a name relative to something instead.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

import nbformat

TUTORIALS = Path(__file__).resolve().parent
ROOT = TUTORIALS.parent
CELL_TIMEOUT = 600  # seconds per cell, as the docs build allows


def tutorial_paths(only=()) -> list[Path]:
    """The tutorials, in order (only those whose names start with one of `only`, when given)."""
    return [path for path in sorted(TUTORIALS.glob("[0-9][0-9]_*.ipynb")) if not only or path.name.startswith(tuple(only))]


def code_digest(notebook) -> str:
    """sha256 of the notebook's code cells' sources, in order: what its outputs were made from."""
    sources = [cell.source for cell in notebook.cells if cell.cell_type == "code"]
    return hashlib.sha256(json.dumps(sources).encode()).hexdigest()


# Where the tests leave the tutorials they ran (tests/tutorials/test_tutorials.py), for the docs build to show
# instead of running them a second time (.ci/run sets it; docs/conf.py reads it).
EXECUTED_FOLDER = "RELUATTN_EXECUTED_TUTORIALS"


def package_digest() -> str:
    """sha256 of reluattn's Python sources: a notebook's outputs are made from them as well as from its code."""
    digest = hashlib.sha256()
    for path in sorted((ROOT / "reluattn").rglob("*.py")):
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def run_record(notebook) -> dict:
    """How an executed notebook was made: the quick mode, and digests of its code and of the package."""
    return {"RELUATTN_QUICK": os.environ.get("RELUATTN_QUICK"), "code_sha256": code_digest(notebook),
            "package_sha256": package_digest()}


def reusable_run(executed: Path, tutorial: Path) -> bool:
    """Whether `executed` (a run of `tutorial` the tests kept) shows what running `tutorial` now would: the
    same code cells, package and quick mode, every cell run in order without an error."""
    if not executed.is_file():
        return False
    notebook = nbformat.read(executed, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    return (notebook.metadata.get("reluattn", {}).get("executed") == run_record(nbformat.read(tutorial, as_version=4))
            and [cell.execution_count for cell in code] == list(range(1, len(code) + 1))
            and not any(output.output_type == "error" for cell in code for output in cell.outputs))


def stale_reason(notebook) -> str | None:
    """Why the notebook's outputs are not those of its current code (None when they are)."""
    recorded = notebook.metadata.get("reluattn", {}).get("outputs")
    if not recorded:
        return "it carries no outputs"
    if recorded.get("code_sha256") != code_digest(notebook):
        return "a code cell changed since it was run"
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    if [cell.execution_count for cell in code] != list(range(1, len(code) + 1)):
        return "its cells were not run top to bottom in one kernel"
    if any(output.output_type == "error" for cell in code for output in cell.outputs):
        return "a cell failed"
    return None


def machine_paths(notebook) -> list[str]:
    """The absolute machine paths in the notebook's sources and outputs (docs/_ext/site_check.py's test)."""
    spec = importlib.util.spec_from_file_location("site_check", ROOT / "docs" / "_ext" / "site_check.py")
    site_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(site_check)
    return site_check.machine_paths(site_check.notebook_text(nbformat.writes(notebook)))


def kernel_environment(folder: Path) -> dict:
    """Environment variables for a kernel named python3 that runs this interpreter on this checkout, with the
    kernelspec written into `folder` (found first through JUPYTER_PATH)."""
    kernel = folder / "kernels" / "python3"
    kernel.mkdir(parents=True)
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3 (ipykernel)", "language": "python"}
    (kernel / "kernel.json").write_text(json.dumps(spec))
    return {"JUPYTER_PATH": str(folder), "RELUATTN_QUICK": os.environ.get("RELUATTN_QUICK", "1"),
            "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}


def execute(tutorial: Path):
    """The tutorial run top to bottom, with its outputs and the record of how they were made."""
    from nbclient import NotebookClient

    notebook = nbformat.read(tutorial, as_version=4)
    committed_metadata = copy.deepcopy(notebook.metadata)
    NotebookClient(notebook, timeout=CELL_TIMEOUT, kernel_name="python3", record_timing=False,
                   resources={"metadata": {"path": str(TUTORIALS)}}).execute()
    notebook.metadata = committed_metadata
    notebook.metadata["reluattn"] = {"outputs": {"RELUATTN_QUICK": os.environ["RELUATTN_QUICK"],
                                                 "code_sha256": code_digest(notebook)}}
    return notebook


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("only", nargs="*", help="tutorial name prefixes, e.g. 01 04 (default: all)")
    parser.add_argument("--check", action="store_true", help="only check that the outputs are fresh")
    args = parser.parse_args(argv)
    if args.check:
        stale = [(path.name, stale_reason(nbformat.read(path, as_version=4))) for path in tutorial_paths(args.only)]
        stale = [f"{name} ({reason})" for name, reason in stale if reason]
        if stale:
            print("outputs to make again (make notebooks): " + ", ".join(stale))
        return 1 if stale else 0

    from reluattn.training.files import write_atomically

    with tempfile.TemporaryDirectory() as folder:
        os.environ.update(kernel_environment(Path(folder)))
        os.environ.pop("MPLBACKEND", None)  # the kernel's own inline backend, so that plt.show() draws
        for tutorial in tutorial_paths(args.only):
            print(f"running {tutorial.name} (RELUATTN_QUICK={os.environ['RELUATTN_QUICK']})", flush=True)
            notebook = execute(tutorial)
            found = machine_paths(notebook)
            if found:
                print(f"not written: {tutorial.name} prints machine paths ({', '.join(found)})")
                return 1
            write_atomically(tutorial, nbformat.writes(notebook) + "\n")
            print(f"wrote {tutorial.relative_to(ROOT)} ({tutorial.stat().st_size / 1e3:.0f} kB)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
