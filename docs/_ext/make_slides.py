"""Slides from the tutorials, with nbconvert's reveal.js exporter (what `jupyter nbconvert --to slides` runs),
for two audiences:

    python docs/_ext/make_slides.py                     # lecture decks, docs/_build/slides/NN_*.slides.html:
                                                        # the exercise versions (no solution code, no hidden
                                                        # result), with the figures and printed results of the
                                                        # cells that hold and use no exercise (committed outputs)
    python docs/_ext/make_slides.py --instructor        # instructor decks, docs/_build/slides/instructor/:
                                                        # the tutorials with their solutions and outputs
    python docs/_ext/make_slides.py --instructor --execute 01   # one tutorial, run again first (RELUATTN_QUICK=1)

Each `#` or `##` heading of a markdown cell starts a new slide; every other cell continues the slide above.
The tutorials are committed without this metadata, so it is added here, on a copy. The decks load reveal.js
from its CDN when opened.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys
import tempfile
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
TUTORIALS = ROOT / "tutorials"
EXERCISES = TUTORIALS / "exercises"


def with_slide_breaks(notebook):
    """The notebook with a slide starting at each `#`/`##` heading cell and every other cell continuing."""
    for cell in notebook.cells:
        heading = cell.cell_type == "markdown" and cell.source.lstrip().startswith(("# ", "## "))
        cell.metadata["slideshow"] = {"slide_type": "slide" if heading else "-"}
    return notebook


def lecture_notebook(tutorial: Path):
    """The exercise version of `tutorial` without its install cell, carrying the tutorial's committed outputs
    for the code cells that are the same in both versions and name no exercise function (a cell that runs
    a student's function has no true output to show, and its numbers would give the result away)."""
    spec = importlib.util.spec_from_file_location("make_exercises", TUTORIALS / "make_exercises.py")
    make_exercises = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_exercises)
    source = nbformat.read(tutorial, as_version=4)
    names = {name for cell in source.cells if cell.cell_type == "code"
             for name in make_exercises.exercise_functions(cell.source)}
    names |= {name for cell in source.cells if cell.cell_type == "code" and make_exercises.BEGIN in cell.source
              for name in re.findall(r"^def (\w+)\(", cell.source, flags=re.M)}
    outputs = {cell.source: cell.outputs for cell in source.cells if cell.cell_type == "code"}
    notebook = nbformat.read(EXERCISES / tutorial.name, as_version=4)
    notebook.cells = [cell for cell in notebook.cells if cell.get("id") != "install-reluattn"]
    for cell in notebook.cells:
        if cell.cell_type == "code" and cell.source in outputs and not any(
                re.search(rf"\b{name}\b", cell.source) for name in names):
            cell.outputs = outputs[cell.source]
    return notebook


def slides(tutorial: Path, execute: bool, instructor: bool = True) -> str:
    """One tutorial as a reveal.js HTML page: its instructor deck, or its lecture deck (lecture_notebook)."""
    from nbconvert import SlidesExporter
    from nbconvert.preprocessors import ExecutePreprocessor

    notebook = with_slide_breaks(nbformat.read(tutorial, as_version=4) if instructor else lecture_notebook(tutorial))
    if execute:
        os.environ.setdefault("RELUATTN_QUICK", "1")
        ExecutePreprocessor(timeout=600, kernel_name="python3").preprocess(
            notebook, {"metadata": {"path": str(TUTORIALS)}})
    body, _ = SlidesExporter().from_notebook_node(notebook)
    return body


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("only", nargs="*", help="tutorial name prefixes, e.g. 01 02 (default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "_build" / "slides")
    parser.add_argument("--instructor", action="store_true",
                        help="the instructor decks (with solutions), into OUT/instructor/")
    parser.add_argument("--execute", action="store_true",
                        help="with --instructor: run each tutorial again (quick mode) first")
    args = parser.parse_args(argv)
    if args.execute and not args.instructor:
        parser.error("--execute runs the tutorials with their solutions: use it with --instructor")
    if args.instructor:
        args.out = args.out / "instructor"
    args.out.mkdir(parents=True, exist_ok=True)
    for tutorial in sorted(TUTORIALS.glob("[0-9][0-9]_*.ipynb")):
        if args.only and not tutorial.name.startswith(tuple(args.only)):
            continue
        target = args.out / f"{tutorial.stem}.slides.html"
        handle, temporary = tempfile.mkstemp(dir=args.out, suffix=".tmp")
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(slides(tutorial, execute=args.execute, instructor=args.instructor))
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
        print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
