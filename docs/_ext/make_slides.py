"""The course's slides, with nbconvert's reveal.js exporter (what `jupyter nbconvert --to slides` runs), for
three uses (`make slides` builds all three):

    python docs/_ext/make_slides.py                     # the lecture decks, docs/_build/slides/NN_*.slides.html:
                                                        # what the lecturer projects in each session, written in
                                                        # course/slides/NN_*.md: the argument step by step and
                                                        # the tutorial's figures, no solution
    python docs/_ext/make_slides.py --notebooks         # walk-through decks, docs/_build/slides/notebooks/: the
                                                        # exercise versions cut at each heading (no solution code,
                                                        # no hidden result), with the figures and printed results
                                                        # of the cells that hold and use no exercise
    python docs/_ext/make_slides.py --instructor        # instructor decks, docs/_build/slides/instructor/:
                                                        # the tutorials with their solutions and outputs
    python docs/_ext/make_slides.py --instructor --execute 01   # one tutorial, run again first (RELUATTN_QUICK=1)

A lecture deck's source, course/slides/NN_name.md (one per session, named as its tutorial), is Markdown:
a line `---` ends a slide; a line `Note:` starts the slide's speaker notes (press `s` in the deck); and
`![alt](figure:CELL-ID)` shows the figure that cell of the tutorial drew, from its committed output (the
tutorials are committed executed: `make notebooks`), with the cell's alt text when `alt` is empty. A deck
names a figure by the id of the cell that draws it, so a figure that is gone fails the build.

In the walk-through decks, each `#` or `##` heading of a markdown cell starts a new slide and every other
cell continues the slide above. The tutorials are committed without this metadata, so it is added here, on
a copy. The decks load reveal.js and MathJax from their CDNs when opened.
"""

from __future__ import annotations

import argparse
import html
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
LECTURES = ROOT / "course" / "slides"
FIGURE = re.compile(r"!\[([^\]]*)\]\(figure:([\w-]+)\)")  # ![alt](figure:CELL-ID)
SLIDE_BREAK = re.compile(r"^---[ \t]*$", flags=re.M)
NOTES = re.compile(r"^Note:[ \t]*$", flags=re.M)


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


def tutorial_figures(tutorial: Path) -> dict:
    """{cell id: (the PNG it drew, base64; its alt text)} for the code cells of `tutorial` that drew a figure."""
    figures = {}
    for cell in nbformat.read(tutorial, as_version=4).cells:
        pngs = [output["data"]["image/png"] for output in cell.get("outputs", [])
                if "image/png" in output.get("data", {})]
        if cell.cell_type == "code" and pngs:
            alt = cell.metadata.get("mystnb", {}).get("image", {}).get("alt", "")
            figures[cell.get("id")] = ("".join(pngs[-1]).replace("\n", ""), alt)
    return figures


def lecture_paths(only=()) -> list[Path]:
    """The lecture decks' sources, course/slides/NN_*.md, in order (those starting with one of `only`)."""
    return [path for path in sorted(LECTURES.glob("[0-9][0-9]_*.md")) if not only or path.name.startswith(tuple(only))]


def lecture_deck(source: Path):
    """The lecture deck written in `source` (course/slides/NN_name.md) as a notebook of markdown cells, one per
    slide (and one per slide's notes), its figures taken from tutorials/NN_name.ipynb."""
    tutorial = TUTORIALS / f"{source.stem}.ipynb"
    if not tutorial.is_file():
        raise ValueError(f"{source.name}: no tutorial {tutorial.name} to take its figures from")
    figures = tutorial_figures(tutorial)

    def image(match) -> str:
        alt, cell = match.group(1).strip(), match.group(2)
        if cell not in figures:
            raise ValueError(f"{source.name}: {tutorial.name} has no figure drawn by a cell {cell!r} "
                             f"(cells with figures: {', '.join(map(str, figures))})")
        png, cell_alt = figures[cell]
        alt = alt or cell_alt
        if not alt:
            raise ValueError(f"{source.name}: the figure of cell {cell!r} has no alt text")
        return (f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{png}" '
                'style="max-height: 58vh; max-width: 100%;">')

    cells = []
    for chunk in SLIDE_BREAK.split(source.read_text(encoding="utf-8")):
        slide, *notes = NOTES.split(chunk, maxsplit=1)
        if not slide.strip():
            continue
        cells.append(nbformat.v4.new_markdown_cell(FIGURE.sub(image, slide.strip()), metadata={
            "slideshow": {"slide_type": "slide"}}))
        if notes and notes[0].strip():
            cells.append(nbformat.v4.new_markdown_cell(notes[0].strip(), metadata={
                "slideshow": {"slide_type": "notes"}}))
    for number, cell in enumerate(cells, 1):
        cell.id = f"slide-{number}"  # the same deck from the same source, byte for byte
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return notebook


def lecture_slides(source: Path) -> str:
    """One lecture deck as a reveal.js HTML page (slides that run long scroll)."""
    from nbconvert import SlidesExporter

    title = re.sub(r"[$\\]", "", source.read_text(encoding="utf-8").split("\n", 1)[0].lstrip("# ")).strip()
    body, _ = SlidesExporter(reveal_scroll=True).from_notebook_node(
        lecture_deck(source), resources={"metadata": {"name": title}})
    return body


def slides(tutorial: Path, execute: bool, instructor: bool = True) -> str:
    """One tutorial as a reveal.js HTML page: its instructor deck, or its walk-through deck (lecture_notebook)."""
    from nbconvert import SlidesExporter
    from nbconvert.preprocessors import ExecutePreprocessor

    notebook = with_slide_breaks(nbformat.read(tutorial, as_version=4) if instructor else lecture_notebook(tutorial))
    if execute:
        os.environ.setdefault("RELUATTN_QUICK", "1")
        ExecutePreprocessor(timeout=600, kernel_name="python3").preprocess(
            notebook, {"metadata": {"path": str(TUTORIALS)}})
    body, _ = SlidesExporter().from_notebook_node(notebook)
    return body


def write(target: Path, text: str) -> None:
    """`text` into `target`, through a temporary file renamed over it."""
    handle, temporary = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
    with os.fdopen(handle, "w", encoding="utf-8") as file:
        file.write(text)
    os.chmod(temporary, 0o644)
    os.replace(temporary, target)
    print(f"wrote {target}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("only", nargs="*", help="tutorial name prefixes, e.g. 01 02 (default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "_build" / "slides")
    audience = parser.add_mutually_exclusive_group()
    audience.add_argument("--notebooks", action="store_true",
                          help="the walk-through decks (the exercise versions, no solutions), into OUT/notebooks/")
    audience.add_argument("--instructor", action="store_true",
                          help="the instructor decks (with solutions), into OUT/instructor/")
    parser.add_argument("--execute", action="store_true",
                        help="with --instructor: run each tutorial again (quick mode) first")
    args = parser.parse_args(argv)
    if args.execute and not args.instructor:
        parser.error("--execute runs the tutorials with their solutions: use it with --instructor")
    if not (args.notebooks or args.instructor):  # the lecture decks
        args.out.mkdir(parents=True, exist_ok=True)
        for source in lecture_paths(args.only):
            write(args.out / f"{source.stem}.slides.html", lecture_slides(source))
        return 0
    args.out = args.out / ("instructor" if args.instructor else "notebooks")
    args.out.mkdir(parents=True, exist_ok=True)
    for tutorial in sorted(TUTORIALS.glob("[0-9][0-9]_*.ipynb")):
        if args.only and not tutorial.name.startswith(tuple(args.only)):
            continue
        write(args.out / f"{tutorial.stem}.slides.html",
              slides(tutorial, execute=args.execute, instructor=args.instructor))
    return 0


if __name__ == "__main__":
    sys.exit(main())
