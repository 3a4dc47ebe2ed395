r"""Make the student notebooks in tutorials/exercises/ from the tutorials.

In a tutorial, the code a student should write sits between two marker lines:

    def layernorm_backward(dout, cache):
        x_hat, inv_std, scale = cache
        # BEGIN SOLUTION
        ...the reference code...
        # END SOLUTION

The student version keeps everything else (text, the checker cell under each exercise) and puts
`raise NotImplementedError(...)` in place of the marked code, at the marker's indentation. Every marked
function `name` is graded by `reluattn.grading.check_<name>`.

In a markdown cell, the result a student should derive (the final formula; the steps leading to it stay)
sits between two HTML comments, invisible in the rendered tutorial:

    <!-- BEGIN ANSWER -->
    $$ \frac{\partial\ell}{\partial x} = ... $$
    <!-- END ANSWER -->

and the student version says instead that the result is theirs to derive. The same markers in a docs page
(docs/derivations.md) keep its results off the student site (docs/conf.py). A code cell may also be marked
as a whole (no `def` before its `# BEGIN SOLUTION`): it is a demonstration built on answers, blanked alike
but graded by no checker. Each further question of a tutorial's "Exercises" cell gets an answer cell under it. The student version links to
nothing that holds the answers, and starts with a cell that installs reluattn from a copy of the project where it is missing (e.g. Colab).

    python tutorials/make_exercises.py          # (re)write tutorials/exercises/*.ipynb
    python tutorials/make_exercises.py --check  # exit 1 if any is missing or out of date (the tests check this)
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import sys
import tempfile
import textwrap
from pathlib import Path

import nbformat

TUTORIALS = Path(__file__).resolve().parent
EXERCISES = TUTORIALS / "exercises"
BEGIN, END = "# BEGIN SOLUTION", "# END SOLUTION"
BLANK = 'raise NotImplementedError("your code here: see the derivation above")'
BEGIN_ANSWER, END_ANSWER = "<!-- BEGIN ANSWER -->", "<!-- END ANSWER -->"
DERIVE = ("*The result is yours to derive from the steps above; the checker under your code says when it is "
          "right.*")
DERIVE_PAGE = ("*Left out of the student site: this result is one of the course's exercises, derived in its tutorial; "
               "the instructor's site shows it.*")
PAGES_WITH_ANSWERS = (TUTORIALS.parent / "docs" / "derivations.md",)  # docs pages whose marked results students must not see
INSTALL = """# reluattn must be importable. In the project's environment (`make lab`) it is, and this cell does nothing.
# Elsewhere (e.g. Colab) install it from a copy of this project: it is not published on PyPI, so a plain
# `pip install reluattn` would fetch whatever package holds that name there.
import importlib.util
import subprocess
import sys

RELUATTN_SOURCE = ""  # the project's folder, its wheel, or a git+https URL of its repository
if importlib.util.find_spec("reluattn") is None:
    if not RELUATTN_SOURCE:
        raise ModuleNotFoundError("reluattn is not installed: set RELUATTN_SOURCE in this cell to a copy of the "
                                  "project (folder, wheel or git+https URL) and run it again")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", RELUATTN_SOURCE], check=True)"""


def tutorial_paths() -> list[Path]:
    """The tutorials that hold exercises (marked solutions), in order."""
    return [path for path in sorted(TUTORIALS.glob("[0-9][0-9]_*.ipynb"))
            if any(BEGIN in cell.source for cell in nbformat.read(path, as_version=4).cells)]


def replace_marked(source: str, begin: str, end: str, replacement) -> str:
    """`source` with every block between a `begin` and an `end` line replaced by replacement(begin line)."""
    out, inside = [], False
    for number, line in enumerate(source.split("\n"), 1):
        if line.strip() == begin:
            if inside:
                raise ValueError(f"line {number}: {begin} inside another marked block")
            inside = True
            out.append(replacement(line))
        elif line.strip() == end:
            if not inside:
                raise ValueError(f"line {number}: {end} without {begin}")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError(f"{begin} without {end}")
    return "\n".join(out)


def blank_out(source: str) -> str:
    """The cell's code with every marked block replaced by a NotImplementedError at the marker's indentation."""
    return replace_marked(source, BEGIN, END, lambda line: line[:len(line) - len(line.lstrip())] + BLANK)


def hide_answers(source: str, page: bool = False) -> str:
    """A markdown cell (or, page=True, a docs page) with every marked result replaced by DERIVE (DERIVE_PAGE)."""
    return replace_marked(source, BEGIN_ANSWER, END_ANSWER, lambda line: DERIVE_PAGE if page else DERIVE)


def exercise_functions(source: str) -> list[str]:
    """Names of the functions whose body holds a solution block, in order."""
    names, current = [], None
    for line in source.split("\n"):
        match = re.match(r"def (\w+)\(", line)
        if match:
            current = match.group(1)
        elif line.strip() == BEGIN and current is not None and current not in names:
            names.append(current)
    return names


def marked_lines(source: str, begin: str, end: str) -> list[str]:
    """The stripped, non-trivial lines between the markers (not comments, nor a table's |---| rule): what a
    student version must not hold."""
    lines, inside = [], False
    for line in source.split("\n"):
        if line.strip() in (begin, end):
            inside = line.strip() == begin
        elif inside and len(line.strip()) > 12 and not line.strip().startswith("#") and re.search(r"\w{2}", line):
            lines.append(line.strip())
    return lines


def hidden_lines(tutorial: Path) -> list[str]:
    """The tutorial's marked solution code and marked results, line by line."""
    cells = nbformat.read(tutorial, as_version=4).cells
    return [line for cell in cells for begin, end in ((BEGIN, END), (BEGIN_ANSWER, END_ANSWER))
            for line in marked_lines(cell.source, begin, end)]


def reference_lines() -> list[str]:
    """Body lines of the reluattn functions that answer an exercise (those the checkers refuse), leaving out
    short lines, comments, docstrings and plain unpacking (which the exercises give too)."""
    import inspect  # with reluattn, only here: the rest of this script needs nbformat only

    from reluattn.grading import refusal
    found = set()
    for exercise in refusal.ANSWERS:
        for code, name in refusal._answers(exercise).values():
            module_name, function_name = name.rsplit(".", 1)
            source = textwrap.dedent(inspect.getsource(getattr(sys.modules[module_name], function_name)))
            body = ast.parse(source).body[0].body
            skip = range(body[0].lineno, body[0].end_lineno + 1) if ast.get_docstring(ast.parse(source).body[0]) else ()
            lines = [line for number, line in enumerate(source.split("\n"), 1) if number > 1 and number not in skip]
            found |= {line.strip() for line in lines if len(line.strip()) > 30
                      and not line.strip().startswith(("#", '"', "return out", "raise "))
                      and not re.fullmatch(r"[\w, ]+ = \w+(\.shape)?", line.strip())}
    return sorted(found)


def page_hidden_lines() -> list[str]:
    """The results marked in the docs pages (the Derivations page), line by line."""
    return [line for page in PAGES_WITH_ANSWERS if page.exists()
            for line in marked_lines(page.read_text(encoding="utf-8"), BEGIN_ANSWER, END_ANSWER)]


def solution_lines() -> list[str]:
    """Everything a student version or the student site must not hold."""
    return sorted({line for tutorial in tutorial_paths() for line in hidden_lines(tutorial)} | set(reference_lines())
                  | set(page_hidden_lines()))


def with_answer_cells(cell) -> list:
    """An "Exercises" cell split at each further question (`N. ` items after "Further"), each question followed
    by a markdown cell for the student's answer."""
    position = cell.source.index("Further", cell.source.index("## Exercises"))
    preamble, *questions = re.split(r"(?m)^(?=\d+\. )", cell.source[position:])
    first = nbformat.v4.new_markdown_cell(cell.source[:position] + preamble.rstrip("\n"))
    first.id = cell.get("id", "exercises")
    cells = [first]
    for question in questions:
        number = question.split(".", 1)[0]
        asked = nbformat.v4.new_markdown_cell(question.rstrip("\n"))
        asked.id = f"further-{number}"
        answer = nbformat.v4.new_markdown_cell(f"**Your answer to question {number}.** *(Write it here: text, "
                                               f"formulas in `$...$`, or a code cell below this one.)*")
        answer.id = f"answer-{number}"
        cells += [asked, answer]
    return cells


def student_notebook(tutorial: Path):
    """The student version of one tutorial, as a notebook object without outputs (the tutorials are committed
    with theirs)."""
    notebook = nbformat.read(tutorial, as_version=4)
    notebook.metadata.pop("reluattn", None)  # how the tutorial's outputs were made (execute_tutorials.py)
    names = [name for cell in notebook.cells if cell.cell_type == "code" for name in exercise_functions(cell.source)]
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.source = blank_out(cell.source)
            cell.outputs, cell.execution_count = [], None  # a solution cell's output would give it away
        elif cell.cell_type == "markdown":
            cell.source = hide_answers(cell.source)
    for index in reversed(range(len(notebook.cells))):
        cell = notebook.cells[index]
        if cell.cell_type == "markdown" and "## Exercises" in cell.source and "Further" in cell.source:
            notebook.cells[index:index + 1] = with_answer_cells(cell)
    intro = nbformat.v4.new_markdown_cell(
        f"**Exercises.** Each `raise NotImplementedError` marks code for you to write: "
        f"{', '.join(f'`{name}`' for name in names)}. The cell after each one runs its checker from "
        f"`reluattn.grading` (`check_<name>`), which says what is wrong until it is right. Cells that use a "
        f"function fail until you have written it. Where `reluattn` is missing (on Colab, for instance), set "
        f"`RELUATTN_SOURCE` in the first code cell to a copy of the project and run it; CIFAR-10 is downloaded on first use.\n\n"
        f"*Generated by `tutorials/make_exercises.py` — edit the tutorial, not this file.*")
    intro.id = "student-version"
    install = nbformat.v4.new_code_cell(INSTALL)
    install.id = "install-reluattn"
    notebook.cells[1:1] = [intro, install]  # after the title cell
    return notebook


def write_atomically(path: Path, text: str) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only check that the exercises are up to date")
    args = parser.parse_args(argv)
    stale = []
    for tutorial in tutorial_paths():
        target = EXERCISES / tutorial.name
        text = nbformat.writes(student_notebook(tutorial)) + "\n"
        if target.exists() and target.read_text(encoding="utf-8") == text:
            continue
        stale.append(target)
        if not args.check:
            EXERCISES.mkdir(exist_ok=True)
            write_atomically(target, text)
            print(f"wrote {target.relative_to(TUTORIALS.parent)}")
    if args.check and stale:
        print("out of date (run python tutorials/make_exercises.py): " + ", ".join(path.name for path in stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
