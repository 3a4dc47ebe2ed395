"""Sphinx configuration for the reluattn site, in two builds for two audiences (`make docs` makes both):

    sphinx-build -t student docs docs/_build/student    the student site: the tutorials' exercise versions
                                                          (not executed: no solution code, no hidden result;
                                                          the committed figures of the cells that hold and use
                                                          no exercise), no instructor pages
    sphinx-build docs docs/_build/instructor             the instructor site: the tutorials with their
                                                          solutions, executed while the site is built (or
                                                          the test suite's runs of them: EXECUTED below),
                                                          the course's answer keys, rubrics and notes

The tutorials are executed with RELUATTN_QUICK=1 (a smaller run of each; set RELUATTN_QUICK=0 to render the
full runs), as `make notebooks` runs them for the outputs committed in tutorials/*.ipynb. The notebooks of the build's audience are copied into docs/tutorials/ first (a generated folder,
not committed), so both sites have the same page names. Formulas are rendered by MathJax 3 served from the site itself
(sphinx-mathjax-offline), so the pages need no network.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # this checkout's reluattn, installed or not
sys.path.insert(0, str(DOCS / "_ext"))
os.environ.setdefault("RELUATTN_QUICK", "1")  # the notebooks' kernels inherit it
os.environ.pop("MPLBACKEND", None)  # the kernels' own inline backend, so that plt.show() draws into the page
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])

import reluattn  # noqa: E402

STUDENT = tags.has("student")  # noqa: F821 (Sphinx defines `tags`; `-t student` sets it)
INSTRUCTOR_PAGES = ("course/instructor",)  # left out of the student site

project = "reluattn"
author = "the reluattn developers"
copyright = "2026, the reluattn developers"
release = reluattn.__version__

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",
    "sphinxarg.ext",
    "reluattn_docs",
]

# ------------------------------------------------------------------------------------------ the pages

# Pages written by others that may not exist yet: listed in the index's toctree when they do.
OPTIONAL_PAGES = ("results", "performance")
exclude_patterns = ["_build", "_ext", "**.ipynb_checkpoints", "Thumbs.db", ".DS_Store", "tutorials/exercises",
                    "run-logs/**/verdicts.md",  # included by reproduction.md, not pages of their own
                    *(f"{page}.md" for page in INSTRUCTOR_PAGES if STUDENT)]
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
smartquotes = False  # keep -- and quotes as typed: command-line flags and code-like text


def lecture_version(tutorial: Path) -> bytes:
    import nbformat
    from make_slides import lecture_notebook  # docs/_ext is on sys.path
    return nbformat.writes(lecture_notebook(tutorial)).encode("utf-8")


def executed_by_the_tests() -> Path | None:
    """The folder RELUATTN_EXECUTED_TUTORIALS, where the test suite leaves the tutorials it ran, when it holds
    every tutorial as running it now would (same code, package and quick mode): the instructor site then
    shows those runs instead of running the notebooks a second time (.ci/run: the tutorials run once)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("execute_tutorials", ROOT / "tutorials" / "execute_tutorials.py")
    execute_tutorials = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(execute_tutorials)
    folder = os.environ.get(execute_tutorials.EXECUTED_FOLDER)
    if STUDENT or not folder:
        return None
    tutorials = execute_tutorials.tutorial_paths()
    fresh = all(execute_tutorials.reusable_run(Path(folder) / path.name, path) for path in tutorials)
    return Path(folder) if fresh and tutorials else None


EXECUTED = executed_by_the_tests()


def copy_tutorials() -> None:
    """tutorials/NN_*.ipynb (the student site: the exercise versions with the figures, lecture_version; the
    instructor site: the tests' runs of them when EXECUTED) -> docs/tutorials/ (only those that changed, so
    rebuilds of one site stay incremental)."""
    target = DOCS / "tutorials"
    target.mkdir(exist_ok=True)
    source = ROOT / "tutorials" / "exercises" if STUDENT else ROOT / "tutorials"
    wanted = {path.name: (EXECUTED / path.name if EXECUTED else path)
              for path in sorted(source.glob("[0-9][0-9]_*.ipynb"))}
    for stale in target.glob("*.ipynb"):
        if stale.name not in wanted:
            stale.unlink()
    for name, source in wanted.items():
        copy = target / name
        # The student pages show the figures too: the exercise version with the tutorial's committed outputs
        # of the cells that hold and use no exercise (make_slides.lecture_notebook, as the walk-through slides).
        content = lecture_version(ROOT / "tutorials" / name) if STUDENT else source.read_bytes()
        if not copy.exists() or copy.read_bytes() != content:
            copy.write_bytes(content)
    # The exercise versions, offered for download beside every page (not pages themselves).
    exercises = target / "exercises"
    exercises.mkdir(exist_ok=True)
    for source in sorted((ROOT / "tutorials" / "exercises").glob("[0-9][0-9]_*.ipynb")):
        if not (exercises / source.name).exists() or (exercises / source.name).read_bytes() != source.read_bytes():
            shutil.copyfile(source, exercises / source.name)


copy_tutorials()


def optional_pages(app, docname, source):
    """Fill the index's placeholder with the optional pages that exist, and the course's with the instructor
    pages (in the instructor site only)."""
    if docname == "index":
        present = [page for page in OPTIONAL_PAGES if (DOCS / f"{page}.md").exists()]
        source[0] = source[0].replace("optional-pages-here", "\n".join(present))
    if docname == "course":
        source[0] = source[0].replace("instructor-pages-here", "" if STUDENT else "\n".join(INSTRUCTOR_PAGES))


def notebook_links(app, doctree):
    """Under the title of each tutorial's page, links to download its notebook: the exercise version on the
    student site; the notebook with its solutions and outputs, and its exercise version, on the instructor's.
    (Before Sphinx collects the downloads of the page: its handler runs at the default priority, 500.)"""
    from docutils import nodes
    from sphinx import addnodes

    docname = app.env.docname
    if not docname.startswith("tutorials/") or not (DOCS / f"{docname}.ipynb").exists():
        return
    name = docname.split("/", 1)[1] + ".ipynb"
    links = ([("the notebook to run (exercise version)", f"exercises/{name}")] if STUDENT else
             [("this notebook, with solutions and outputs", name),
              ("its exercise version, for students", f"exercises/{name}")])
    paragraph = nodes.paragraph("", "Download: ", classes=["notebook-links"])
    for number, (text, target) in enumerate(links):
        link = addnodes.download_reference("", "", reftarget=target, refdoc=docname, refexplicit=True)
        link += nodes.inline(text, text)
        paragraph += [nodes.Text(" · ")] if number else []
        paragraph += link
    title_section = next(iter(doctree.findall(nodes.section)))
    title_section.insert(1, paragraph)


def make_exercises():
    """tutorials/make_exercises.py, which knows the answer markers (imported by path: not a package)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("make_exercises", ROOT / "tutorials" / "make_exercises.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def hidden_results(app, docname, source):
    """The student site: every result marked `<!-- BEGIN ANSWER -->` ... `<!-- END ANSWER -->` in a page (the
    Derivations page holds the exercises' results) replaced by a line saying it is the student's to derive."""
    if STUDENT and "BEGIN ANSWER" in source[0]:
        source[0] = make_exercises().hide_answers(source[0], page=True)


def setup(app):
    app.connect("source-read", optional_pages)
    app.connect("source-read", hidden_results)
    app.connect("doctree-read", notebook_links, priority=400)


# ------------------------------------------------------------------------------------------- notebooks

# The instructor site runs every notebook again (its committed outputs are replaced by this build's), unless
# the test suite has just run them all on this very code (EXECUTED, above: then it shows those runs); the
# student site shows the exercise versions, with the committed outputs of the cells that hold and use no exercise.
nb_execution_mode = "off" if STUDENT or EXECUTED else "force"
nb_execution_timeout = 600           # seconds per cell
nb_execution_raise_on_error = True   # a failing check cell fails the build
nb_execution_show_tb = True
nb_merge_streams = True

# ----------------------------------------------------------------------------------------- API reference

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"undoc-members": False}  # docstrings are plain text: _ext/reluattn_docs.py

# --------------------------------------------------------------------------------------------- HTML

html_theme = "furo"
html_title = "reluattn"
html_static_path = ["_static"]
html_css_files = ["reluattn.css"]
html_copy_source = not STUDENT  # _sources/*.txt would hold the results the student pages leave out
highlight_language = "text"  # fences without a language are shown as typed (notebook cells are Python)
# Code colours with at least 7:1 contrast for every token against their background (WCAG AAA), comments
# included ("friendly" had 2.6:1 for comments, 2.2:1 for constants; monokai 3.5:1): Pygments' a11y styles.
pygments_style = "a11y-high-contrast-light"
pygments_dark_style = "a11y-high-contrast-dark"
