"""Every tutorial notebook runs top to bottom (RELUATTN_QUICK=1) in a kernel on this interpreter, and each
is committed with the outputs of its current code (`make notebooks`), plots included, so that a repository
page shows them. The notebooks' check cells assert their claims, so a broken claim fails here.
The course's pages add up (minutes, keys for every further question, rubric points, the checkers' messages
they quote), and no committed notebook or page holds an absolute path of a machine.

Each notebook gets its own kernel. The kernel is this test's Python (a kernelspec written for the test and
found first through JUPYTER_PATH), with the project root on PYTHONPATH, so it imports this checkout's
reluattn whether or not the package is installed. The decoded-image cache is the session's private one
(conftest.py), shared by the notebooks, so CIFAR is decoded once per test run.
"""

from __future__ import annotations

import html
import importlib.util
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parents[2]
TUTORIALS = ROOT / "tutorials"
NOTEBOOKS = sorted(TUTORIALS.glob("[0-9][0-9]_*.ipynb"))
CELL_TIMEOUT = 300  # seconds; a whole quick notebook takes well under a minute here
LEVEL_0 = "--xla_backend_optimization_level=0"  # what tests/conftest.py adds to XLA_FLAGS for the rest of the suite
PROBE = ("import os, sys, reluattn; print(sys.executable); print(reluattn.__file__); "
         f"print({LEVEL_0!r} in os.environ.get('XLA_FLAGS', ''))")


def test_the_tutorials_are_there():
    expected = {"01_why_1_over_L.ipynb", "02_backprop_by_hand.ipynb", "03_same_model_in_jax.ipynb",
                "04_training_on_cifar10.ipynb", "05_key_value_memories.ipynb", "06_parallelism.ipynb"}
    assert expected == {path.name for path in NOTEBOOKS}


def load_script(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


execute_tutorials = load_script(TUTORIALS / "execute_tutorials.py")
# Notebook 03 gains a section on another branch: its outputs are made (make notebooks 03) once that is merged,
# and this mark goes then (strict: the test fails as soon as 03 carries fresh outputs, to have it removed).
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_committed_with_the_outputs_of_its_code(path):
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    assert notebook.metadata["kernelspec"]["name"] == "python3"
    reason = execute_tutorials.stale_reason(notebook)
    assert reason is None, f"{path.name}: {reason}; run `make notebooks` (python tutorials/execute_tutorials.py)"
    assert notebook.metadata["reluattn"]["outputs"]["RELUATTN_QUICK"] == "1"  # as the instructor site runs it
    images = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs
              if "image/png" in output.get("data", {})]
    assert len(images) >= 2, f"{path.name} shows {len(images)} figures"


def test_outputs_are_stale_once_the_code_changes():
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("x")])
    assert execute_tutorials.stale_reason(notebook) == "it carries no outputs"
    notebook.cells[0].execution_count, notebook.cells[1].execution_count = 1, 2
    notebook.cells[1].outputs = [nbformat.v4.new_output("execute_result", {"text/plain": "1"}, execution_count=2)]
    notebook.metadata["reluattn"] = {"outputs": {"RELUATTN_QUICK": "1",
                                                 "code_sha256": execute_tutorials.code_digest(notebook)}}
    assert execute_tutorials.stale_reason(notebook) is None
    notebook.cells.insert(1, nbformat.v4.new_markdown_cell("a markdown cell changes no output"))
    assert execute_tutorials.stale_reason(notebook) is None
    notebook.cells[0].execution_count = 3
    assert execute_tutorials.stale_reason(notebook) == "its cells were not run top to bottom in one kernel"
    notebook.cells[0].execution_count = 1
    notebook.cells[0].source = "x = 2"
    assert execute_tutorials.stale_reason(notebook) == "a code cell changed since it was run"


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory):
    """Environment for the kernels: this interpreter as "python3", the checkout importable, quick mode."""
    return {**execute_tutorials.kernel_environment(tmp_path_factory.mktemp("jupyter")), "RELUATTN_QUICK": "1"}


def run_notebook(path: Path):
    """The notebook with the probe cell appended, executed top to bottom in a kernel of its own."""
    notebook = nbformat.read(path, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell(PROBE))
    client = NotebookClient(notebook, timeout=CELL_TIMEOUT, kernel_name="python3",
                            resources={"metadata": {"path": str(TUTORIALS)}})
    client.execute()  # raises CellExecutionError, naming the cell, when any cell fails
    return notebook


@pytest.fixture(scope="module")
def executed_notebooks(kernel_env, request):
    """{path: future of the executed notebook} for the notebooks this session tests, all started at the
    first request, two kernels at a time. A kernel spends much of its run on one core (NumPy with one BLAS
    thread, XLA's compiler, Python), so two side by side keep both cores of CI busy. The environment holds
    until every kernel has finished; after a failure under -x, the notebooks not started are dropped."""
    selected = [item.callspec.params["path"] for item in request.session.items
                if getattr(item, "originalname", None) == "test_notebook_runs"]
    with pytest.MonkeyPatch.context() as patch:
        for name, value in kernel_env.items():
            patch.setenv(name, value)
        patch.delenv("MPLBACKEND", raising=False)  # the notebook's own inline backend, as a student sees it
        # XLA's default optimisation level, as a student's kernel has (conftest sets 0 for the rest of the suite):
        # the outputs kept here are what the docs site shows, timings included.
        flags = os.environ.get("XLA_FLAGS", "").replace(LEVEL_0, "").strip()
        if flags:
            patch.setenv("XLA_FLAGS", flags)
        else:
            patch.delenv("XLA_FLAGS", raising=False)
        pool = ThreadPoolExecutor(max_workers=2)
        try:
            yield {path: pool.submit(run_notebook, path) for path in selected}
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_notebook_runs(path, executed_notebooks):
    notebook = executed_notebooks[path].result()  # re-raises the notebook's CellExecutionError
    probe = "".join(output.get("text", "") for output in notebook.cells[-1].outputs).split()
    assert Path(probe[0]).resolve() == Path(sys.executable).resolve(), f"kernel ran {probe[0]}"
    assert Path(probe[1]).resolve().is_relative_to(ROOT), f"kernel imported reluattn from {probe[1]}"
    assert probe[2] == "False", "the kernel compiled at XLA's level 0, not the default a student's kernel has"
    images = sum("image/png" in output.get("data", {}) for cell in notebook.cells if cell.cell_type == "code"
                 for output in cell.outputs)
    assert images >= 2, f"{path.name} drew {images} figures"
    keep_for_the_docs(path, notebook)


def keep_for_the_docs(path: Path, notebook) -> None:
    """With RELUATTN_EXECUTED_TUTORIALS set (.ci/run), the run (without the probe cell) goes there with its
    record, and the docs build of the same checkout shows it instead of running the notebook again."""
    folder = os.environ.get(execute_tutorials.EXECUTED_FOLDER)
    if not folder:
        return
    from reluattn.training.files import write_atomically
    kept = nbformat.from_dict(notebook)
    kept.cells = kept.cells[:-1]
    kept.metadata.setdefault("reluattn", {})["executed"] = execute_tutorials.run_record(kept)
    Path(folder).mkdir(parents=True, exist_ok=True)
    write_atomically(Path(folder) / path.name, nbformat.writes(kept) + "\n")
    assert execute_tutorials.reusable_run(Path(folder) / path.name, path)


def test_a_kept_run_is_reused_only_while_code_and_package_are_unchanged(tmp_path, monkeypatch):
    monkeypatch.setenv("RELUATTN_QUICK", "1")
    tutorial = tmp_path / "01_t.ipynb"
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    nbformat.write(notebook, tutorial)
    executed = tmp_path / "kept.ipynb"
    assert not execute_tutorials.reusable_run(executed, tutorial)  # nothing kept
    notebook.cells[0].execution_count = 1
    notebook.metadata["reluattn"] = {"executed": execute_tutorials.run_record(notebook)}
    nbformat.write(notebook, executed)
    assert execute_tutorials.reusable_run(executed, tutorial)
    monkeypatch.setenv("RELUATTN_QUICK", "0")  # another mode
    assert not execute_tutorials.reusable_run(executed, tutorial)
    monkeypatch.setenv("RELUATTN_QUICK", "1")
    monkeypatch.setattr(execute_tutorials, "package_digest", lambda: "changed")  # the package changed
    assert not execute_tutorials.reusable_run(executed, tutorial)
    monkeypatch.undo()
    monkeypatch.setenv("RELUATTN_QUICK", "1")
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 2")]), tutorial)  # new code
    assert not execute_tutorials.reusable_run(executed, tutorial)


# ------------------------------------------------------------------------------ the course's pages

DOCS = ROOT / "docs"


def sections(path: Path) -> dict:
    """{session number: its text} for the "## Session N — ..." sections of a course page."""
    parts = re.split(r"^## Session (\d) ", path.read_text(encoding="utf-8"), flags=re.M)
    return {int(number): text for number, text in zip(parts[1::2], parts[2::2])}


def table_column(text: str, header: str) -> list[str]:
    """The cells of the column `header` in the first markdown table of `text` whose header row has it."""
    tables = re.findall(r"(?:^\|.*\n?)+", text, flags=re.M)
    for table in tables:
        rows = [[cell.strip() for cell in row.strip().strip("|").split("|")] for row in table.strip().split("\n")]
        if header in rows[0]:
            return [row[rows[0].index(header)] for row in rows[2:]]
    return []


def test_each_sessions_minutes_add_up_to_its_length():
    plans = sections(DOCS / "course" / "sessions.md")
    assert sorted(plans) == [1, 2, 3, 4, 5, 6]
    length = int(re.search(r"Each session lasts \*\*(\d+) minutes\*\*", (DOCS / "course" / "sessions.md").read_text())[1])
    for number, text in plans.items():
        minutes = [int(cell) for cell in table_column(text, "minutes")]
        assert len(minutes) >= 4 and sum(minutes) == length, f"session {number}: {minutes} sum to {sum(minutes)}"


def further_questions(notebook: Path) -> set:
    """The numbers of the notebook's further questions (the numbered items after "Further" in its exercises)."""
    text = next(cell.source.split("## Exercises", 1)[1] for cell in nbformat.read(notebook, as_version=4).cells
                if cell.cell_type == "markdown" and "## Exercises" in cell.source)
    return {int(number) for number in re.findall(r"^(\d+)\. ", text.split("Further", 1)[1], flags=re.M)}


def test_every_further_question_has_a_key_and_every_rubric_totals_20():
    keys = sections(DOCS / "course" / "instructor.md")
    assert sorted(keys) == [1, 2, 3, 4, 5, 6]
    for number, notebook in enumerate(NOTEBOOKS, 1):
        text = keys[number]
        answered = {int(n) for n in re.findall(r"^(\d+)\. ", text.split("**Answer keys.**", 1)[1], flags=re.M)}
        asked = further_questions(notebook)
        assert asked and answered == asked, f"session {number}: keys for {sorted(answered)}, asked {sorted(asked)}"
        points = table_column(text, "points")
        assert points[-1] == "**20**" and sum(int(p) for p in points[:-1]) == 20, f"session {number}: {points}"


def grader_strings() -> list[str]:
    """Every string literal of reluattn/grading, f-strings' literal parts included (split lines joined)."""
    import ast
    found = []
    for path in (ROOT / "reluattn" / "grading").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.append(node.value)
    return found


def test_the_quoted_checker_messages_are_the_checkers():
    strings = grader_strings()
    text = (DOCS / "course" / "instructor.md").read_text(encoding="utf-8")
    quoted = [quote for section in text.split("| the checker says |")[1:]
              for quote in re.findall(r'^\|[^|]+\| "([^"]+)"', section.split("\n\n")[0], flags=re.M)]
    assert len(quoted) >= 25
    missing = [quote for quote in quoted if not any(quote in string for string in strings)]
    assert not missing, f"not a message of reluattn.grading: {missing}"


# ---------------------------------------------------------------------- no machine path anywhere

def site_check():
    return load_script(DOCS / "_ext" / "site_check.py")


def test_no_machine_path_in_the_committed_notebooks_and_pages():
    """Sources and outputs (printed lines, warnings, tracebacks, text results) of every committed notebook."""
    check = site_check()
    files = [*TUTORIALS.rglob("*.ipynb"), *DOCS.rglob("*.md"), TUTORIALS / "README.md"]
    found = {str(path.relative_to(ROOT)): check.machine_paths(check.page_text(path)) for path in files
             if "_build" not in path.parts and check.machine_paths(check.page_text(path))}
    assert not found, found


def test_machine_paths_are_found_in_outputs_and_not_in_image_data(tmp_path):
    check = site_check()
    cell = nbformat.v4.new_code_cell("import tqdm", execution_count=1, outputs=[
        nbformat.v4.new_output("stream", name="stderr", text="/root/.venv/lib/tqdm/auto.py:21: TqdmWarning\n"),
        nbformat.v4.new_output("display_data", {"image/png": "iVBORw0+/work/ab+/tmp/cd==", "text/plain": "<Figure>"}),
        nbformat.v4.new_output("error", ename="OSError", evalue="", traceback=["no such file: /home/someone/x"])])
    for name in ("executed.ipynb", "executed.ipynb.txt"):  # committed, and as a site's _sources hold it
        nbformat.write(nbformat.v4.new_notebook(cells=[cell]), tmp_path / name)
        assert check.machine_paths(check.page_text(tmp_path / name)) == ["/root/.venv", "/home/someone"]


def test_the_site_check_finds_solutions_and_machine_paths(tmp_path):
    check = site_check()
    assert check.machine_paths("see /work/main/x.py and /tmp/ipykernel_1/2.py, not a/work/b or ~/home/x") == [
        "/work/main", "/tmp/ipykernel_1"]
    student, instructor = tmp_path / "student", tmp_path / "instructor"
    for site in (student, instructor):
        site.mkdir()
        (site / "index.html").write_text("<p>clean</p>")
    assert check.main(["--student", str(student), "--instructor", str(instructor)]) == 0
    solution = next(line for line in check.make_exercises().solution_lines() if "@" in line)
    words = solution.split(" ")  # as highlighting splits it, with an entity for the operator
    (student / "page.html").write_text("<pre>" + "".join(f"<span>{html.escape(word)} </span>" for word in words)
                                       + "</pre>")
    (instructor / "page.html").write_text("<p>Warning: /home/someone/.venv/lib/tqdm/auto.py</p>")
    problems = check.problems(student, instructor)
    assert any("solution line" in problem for problem in problems)
    assert any("machine path /home/someone" in problem for problem in problems)


def test_the_site_check_wants_each_tutorial_page_to_link_its_notebooks(tmp_path):
    check = site_check()
    (tmp_path / "_downloads" / "a").mkdir(parents=True)
    (tmp_path / "_downloads" / "b").mkdir()
    (tmp_path / "_downloads" / "a" / "01_x.ipynb").write_text("{}")
    (tmp_path / "_downloads" / "b" / "01_x.ipynb").write_text("{}")
    (tmp_path / "tutorials").mkdir()
    page = tmp_path / "tutorials" / "01_x.html"
    link = '<a class="reference download internal" href="../_downloads/{}/01_x.ipynb">x</a>'
    page.write_text(f'<h1>01</h1><p class="notebook-links">Download: {link.format("a")}</p>')
    assert check.notebook_link_problems(tmp_path, 1) == []
    assert check.notebook_link_problems(tmp_path, 2) == [f"{page}: 1 download links to its notebook, not 2"]
    page.write_text(f'<h1>01</h1><p class="notebook-links">Download: {link.format("a")} · {link.format("b")}</p>')
    assert check.notebook_link_problems(tmp_path, 2) == []
    page.write_text(f'<h1>01</h1><p class="notebook-links">Download: {link.format("a")} · {link.format("c")}</p>')
    assert len(check.notebook_link_problems(tmp_path, 2)) == 1  # a link to no file of the site
    page.write_text("<h1>01</h1><p>no links</p>")
    assert len(check.notebook_link_problems(tmp_path, 1)) == 1


def test_slides_start_at_each_section():
    module = load_script(DOCS / "_ext" / "make_slides.py")
    notebook = module.with_slide_breaks(nbformat.read(NOTEBOOKS[0], as_version=4))
    starts = [cell.source.split("\n")[0] for cell in notebook.cells if cell.metadata.slideshow.slide_type == "slide"]
    assert starts[0].startswith("# 01") and "## 4. Output variance: what ReLUFormer normalises" in starts
    assert all(cell.metadata.slideshow.slide_type in ("slide", "-") for cell in notebook.cells)


def test_a_wrong_answer_shows_in_jupyter_as_one_message(kernel_env, monkeypatch):
    for name, value in kernel_env.items():
        monkeypatch.setenv(name, value)
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("from reluattn.grading import check_softmax_backward\n"
                                                "check_softmax_backward(lambda dout, cache: cache[0] * dout)")]
    with pytest.raises(CellExecutionError):
        NotebookClient(notebook, timeout=CELL_TIMEOUT, kernel_name="python3").execute()
    (error,) = notebook.cells[0].outputs
    assert error.ename == "ExerciseFailed" and len(error.traceback) == 1  # no frames of the grader
    assert "only the diagonal of the Jacobian" in error.traceback[0] and ".py" not in error.traceback[0]
