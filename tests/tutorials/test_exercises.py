"""The student notebooks in tutorials/exercises/: up to date with the tutorials, every blank fails its
checker, and every reference solution (the tutorial's code) passes it.

Only the notebooks' function definitions are run here (with their imports and the setup cell), not the
notebooks themselves: tests/tutorials/test_tutorials.py runs the tutorials, and a student notebook stops at its first
blank by design.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import re
from pathlib import Path

import nbformat
import pytest

from reluattn import grading

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("make_exercises", ROOT / "tutorials" / "make_exercises.py")
make_exercises = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_exercises)

TUTORIALS = make_exercises.tutorial_paths()


def definitions(path: Path) -> dict:
    """Run a notebook's first code cell (its setup), then only the imports and (undecorated) function
    definitions of the other code cells, in order; return the resulting namespace."""
    cells = [cell.source for cell in nbformat.read(path, as_version=4).cells
             if cell.cell_type == "code" and cell.get("id") != "install-reluattn"]
    namespace: dict = {"__name__": "notebook"}
    exec(compile(cells[0], f"{path.name}[setup]", "exec"), namespace)
    for index, source in enumerate(cells[1:], 1):
        tree = ast.parse(source)
        # Decorated functions (hypothesis tests in notebook 03) need the cell's other names; none is an exercise.
        keep = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
                or (isinstance(node, ast.FunctionDef) and not node.decorator_list)]
        exec(compile(ast.Module(body=keep, type_ignores=[]), f"{path.name}[cell {index}]", "exec"), namespace)
    return namespace


def exercises() -> list:
    """(tutorial, function name) for every marked function."""
    found = []
    for path in TUTORIALS:
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code":
                found += [(path, name) for name in make_exercises.exercise_functions(cell.source)]
    return found


EXERCISES = exercises()
IDS = [f"{path.stem}:{name}" for path, name in EXERCISES]


@pytest.fixture(scope="module")
def namespaces():
    """{tutorial name: (reference namespace, student namespace)}."""
    return {path.name: (definitions(path), definitions(make_exercises.EXERCISES / path.name)) for path in TUTORIALS}


def test_student_notebooks_are_up_to_date(capsys):
    assert make_exercises.main(["--check"]) == 0, capsys.readouterr().out


def test_every_tutorial_with_exercises_is_covered():
    assert {path.name for path in TUTORIALS} == {"01_why_1_over_L.ipynb", "02_backprop_by_hand.ipynb",
                                                 "03_same_model_in_jax.ipynb", "04_training_on_cifar10.ipynb",
                                                 "05_key_value_memories.ipynb", "06_parallelism.ipynb"}
    assert len(EXERCISES) == 19
    listed = {name for names in grading.CHECKERS.values() for name in names}
    assert {f"check_{name}" for _, name in EXERCISES} == listed


def test_student_notebooks_hold_no_solution():
    for path in TUTORIALS:
        tutorial = nbformat.read(path, as_version=4)
        student = nbformat.read(make_exercises.EXERCISES / path.name, as_version=4)
        text = "\n".join(cell.source for cell in student.cells)
        assert make_exercises.BEGIN not in text and make_exercises.END not in text
        assert make_exercises.BEGIN_ANSWER not in text and make_exercises.END_ANSWER not in text
        assert text.count(make_exercises.BLANK) == sum(cell.source.count(make_exercises.BEGIN) for cell in tutorial.cells)
        hidden = make_exercises.hidden_lines(path)
        assert hidden, f"{path.name} marks nothing"
        leaked = [line for line in hidden if line in text]
        assert not leaked, f"{path.name}: the student version holds {leaked}"
        assert "](../" not in text and "solution" not in text.lower(), "a link out of the exercises folder"


def test_student_notebooks_hold_no_reference_body():
    bodies = make_exercises.reference_lines()
    assert len(bodies) > 20  # the refused functions were found
    for path in TUTORIALS:
        text = (make_exercises.EXERCISES / path.name).read_text(encoding="utf-8")
        text = "\n".join(cell.source for cell in nbformat.reads(text, as_version=4).cells)
        leaked = [line for line in bodies if line in text]
        assert not leaked, f"{path.name} holds reluattn's own answer: {leaked}"


def test_student_notebooks_carry_no_outputs(tmp_path):
    """The tutorials are committed with their outputs; a solution cell's output must not reach a student."""
    for path in TUTORIALS:
        student = nbformat.read(make_exercises.EXERCISES / path.name, as_version=4)
        assert "reluattn" not in student.metadata
        assert all(not cell.outputs and cell.execution_count is None for cell in student.cells if cell.cell_type == "code")
    executed = nbformat.read(TUTORIALS[0], as_version=4)
    for count, cell in enumerate((cell for cell in executed.cells if cell.cell_type == "code"), 1):
        cell.execution_count = count
        cell.outputs = [nbformat.v4.new_output("stream", text="the answer is 42\n")]
    executed.metadata["reluattn"] = {"outputs": {"RELUATTN_QUICK": "1", "code_sha256": "0" * 64}}
    nbformat.write(executed, tmp_path / TUTORIALS[0].name)
    student = make_exercises.student_notebook(tmp_path / TUTORIALS[0].name)
    assert "the answer is 42" not in nbformat.writes(student) and "reluattn" not in student.metadata
    assert all(cell.execution_count is None for cell in student.cells if cell.cell_type == "code")


def test_student_notebooks_hide_the_marked_formulas():
    student = nbformat.read(make_exercises.EXERCISES / "02_backprop_by_hand.ipynb", as_version=4)
    text = "\n".join(cell.source for cell in student.cells)
    assert text.count(make_exercises.DERIVE) == 7
    assert "\\operatorname{mean}(\\mathrm{d}\\hat x \\odot \\hat x)" not in text
    assert "\\frac{\\partial r}{\\partial x_j}" in text  # the derivation's steps stay


@pytest.mark.parametrize("path, name", EXERCISES, ids=IDS)
def test_reference_solution_passes(path, name, namespaces, capsys):
    reference, _ = namespaces[path.name]
    getattr(grading, f"check_{name}")(reference[name])
    assert "\N{CHECK MARK}" in capsys.readouterr().out


@pytest.mark.parametrize("path, name", EXERCISES, ids=IDS)
def test_blank_fails_and_says_so(path, name, namespaces):
    _, student = namespaces[path.name]
    with pytest.raises(grading.ExerciseFailed, match="not written yet"):
        getattr(grading, f"check_{name}")(student[name])


@pytest.mark.parametrize("path, name", EXERCISES, ids=IDS)
def test_student_signature_matches_the_reference(path, name, namespaces):
    reference, student = namespaces[path.name]
    assert inspect.signature(student[name]) == inspect.signature(reference[name])


def test_blank_out_keeps_indentation_and_rejects_unbalanced_markers():
    source = "def f(x):\n    y = x\n    # BEGIN SOLUTION\n    return y\n    # END SOLUTION\n"
    assert make_exercises.blank_out(source) == f"def f(x):\n    y = x\n    {make_exercises.BLANK}\n"
    with pytest.raises(ValueError, match="without"):
        make_exercises.blank_out("    # BEGIN SOLUTION\n    x = 1\n")
    with pytest.raises(ValueError, match="without"):
        make_exercises.blank_out("x = 1\n# END SOLUTION\n")
    shown = make_exercises.hide_answers(f"steps\n{make_exercises.BEGIN_ANSWER}\n$$x = 1$$\n{make_exercises.END_ANSWER}\nmore")
    assert shown == f"steps\n{make_exercises.DERIVE}\nmore"
    with pytest.raises(ValueError, match="without"):
        make_exercises.hide_answers(f"{make_exercises.BEGIN_ANSWER}\n$$x$$")


def test_install_cell_installs_only_the_copy_it_is_given(monkeypatch):
    """Where reluattn is missing, the first cell must not `pip install reluattn` (not our name on PyPI): without
    RELUATTN_SOURCE it stops with instructions; with one, it installs exactly that."""
    import subprocess
    calls = []
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None)
    monkeypatch.setattr(subprocess, "run", lambda command, **kwargs: calls.append(command))
    with pytest.raises(ModuleNotFoundError, match="RELUATTN_SOURCE"):
        exec(make_exercises.INSTALL, {})
    assert calls == []
    exec(make_exercises.INSTALL.replace('RELUATTN_SOURCE = ""', 'RELUATTN_SOURCE = "/copies/reluattn"'), {})
    assert [command[-1] for command in calls] == ["/copies/reluattn"]
    for path in TUTORIALS:
        student = nbformat.read(make_exercises.EXERCISES / path.name, as_version=4)
        (install,) = [cell for cell in student.cells if cell.get("id") == "install-reluattn"]
        assert install.source == make_exercises.INSTALL


def test_every_further_question_is_followed_by_an_answer_cell():
    for path in TUTORIALS:
        tutorial = next(cell.source for cell in nbformat.read(path, as_version=4).cells
                        if cell.cell_type == "markdown" and "## Exercises" in cell.source)
        asked = re.findall(r"^(\d+)\. ", tutorial.split("## Exercises", 1)[1].split("Further", 1)[1], flags=re.M)
        cells = nbformat.read(make_exercises.EXERCISES / path.name, as_version=4).cells
        for number in asked:
            position = next(i for i, cell in enumerate(cells) if cell.source.startswith(f"{number}. "))
            assert cells[position + 1].source.startswith(f"**Your answer to question {number}.**"), path.name
        assert asked and len(asked) == sum(cell.source.startswith("**Your answer") for cell in cells)
