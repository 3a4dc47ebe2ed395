"""Slides from the tutorials, with nbconvert's reveal.js exporter (what `jupyter nbconvert --to slides` runs).

    python docs/_ext/make_slides.py                     # docs/_build/slides/NN_*.slides.html, with the
                                                        # outputs committed in the tutorials (make notebooks)
    python docs/_ext/make_slides.py --execute 01        # one tutorial, run again first (RELUATTN_QUICK=1)

Each `#` or `##` heading of a markdown cell starts a new slide; every other cell continues the slide above.
The tutorials are committed without this metadata, so it is added here, on a copy. The decks load reveal.js
from its CDN when opened.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
TUTORIALS = ROOT / "tutorials"


def with_slide_breaks(notebook):
    """The notebook with a slide starting at each `#`/`##` heading cell and every other cell continuing."""
    for cell in notebook.cells:
        heading = cell.cell_type == "markdown" and cell.source.lstrip().startswith(("# ", "## "))
        cell.metadata["slideshow"] = {"slide_type": "slide" if heading else "-"}
    return notebook


def slides(tutorial: Path, execute: bool) -> str:
    """One tutorial as a reveal.js HTML page."""
    from nbconvert import SlidesExporter
    from nbconvert.preprocessors import ExecutePreprocessor

    notebook = with_slide_breaks(nbformat.read(tutorial, as_version=4))
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
    parser.add_argument("--execute", action="store_true", help="run each tutorial again (quick mode) first")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for tutorial in sorted(TUTORIALS.glob("[0-9][0-9]_*.ipynb")):
        if args.only and not tutorial.name.startswith(tuple(args.only)):
            continue
        target = args.out / f"{tutorial.stem}.slides.html"
        handle, temporary = tempfile.mkstemp(dir=args.out, suffix=".tmp")
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(slides(tutorial, execute=args.execute))
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
        print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
