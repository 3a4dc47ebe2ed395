"""The class workflow end to end (course/make_course.py, course/grade.py) and the student path.

The student bundle holds no solution line of any tutorial (every code line an exercise version blanks),
no hidden result (the tutorials' and the Derivations page's marked formulas), and no body of reluattn's
refused answers, outside the reluattn wheel itself (the package is the reference implementation: the
course's policy, docs/course.md). Three made-up submissions of notebook 06 grade as expected through the
autograder: a correct one, one with a typical slip, one that calls the grader's own answer. The student
site (built with `-t student`) and the slides (the lecture decks, one per session, and the walk-through decks
of the exercise versions) hold no solution either.

Building the course needs otter-grader (the `course` extra), the site needs Sphinx (the `docs` extra):
without them those tests are reported as skipped, with the reason.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make_exercises = load("make_exercises", ROOT / "tutorials" / "make_exercises.py")
site_check = load("site_check", ROOT / "docs" / "_ext" / "site_check.py")
FORBIDDEN = make_exercises.solution_lines()


def leaks(text: str) -> list[str]:
    return [line for line in FORBIDDEN if line in text]


def fake_cifar_zip(path: Path, per_class: int = 4) -> Path:
    """An image-folder zip like the JPEG copy of CIFAR-10: train/<class>/<n>.jpg, 32x32 RGB."""
    from PIL import Image

    rng = np.random.default_rng(0)
    with zipfile.ZipFile(path, "w") as archive:
        for name in ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"):
            for number in range(per_class):
                buffer = io.BytesIO()
                Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(buffer, "JPEG")
                archive.writestr(f"train/{name}/{number:04d}.jpg", buffer.getvalue())
        archive.writestr("train/../escape.jpg", b"not an image")  # never copied: not a plain member name
    return path


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    pytest.importorskip("otter", reason="the course extra (pip install -e '.[course]') is not installed")
    work = tmp_path_factory.mktemp("course")
    data = fake_cifar_zip(work / "cifar.zip")
    subprocess.run([sys.executable, str(ROOT / "course" / "make_course.py"), "--data", str(data), "--out",
                    str(work / "dist"), "--only", "06", "--images-per-class", "3", "--seed", "7"],
                   check=True, capture_output=True, text=True)
    return work / "dist"


def test_the_student_bundle_holds_the_notebooks_the_wheel_the_data_and_no_answer(course):
    with zipfile.ZipFile(course / "reluattn-course-student.zip") as bundle:
        names = bundle.namelist()
        texts = {name: bundle.read(name).decode("utf-8") for name in names if name.endswith((".ipynb", ".md"))}
        wheel = next(name for name in names if name.endswith(".whl"))
        with zipfile.ZipFile(io.BytesIO(bundle.read(wheel))) as package:
            assert "reluattn/grading/__init__.py" in package.namelist()
        with zipfile.ZipFile(io.BytesIO(bundle.read("reluattn-course-student/data/cifar10-subset.zip"))) as data:
            images = data.namelist()
    notebooks = sorted(name for name in texts if name.endswith(".ipynb"))
    assert [Path(name).name for name in notebooks] == [path.name for path in make_exercises.tutorial_paths()]
    assert len(images) == 30 and all(name.startswith("train/") and name.endswith(".jpg") for name in images)
    readme = texts["reluattn-course-student/README.md"]
    assert Path(wheel).name in readme and "python -m venv" in readme and "What you may read" in readme
    for name, text in texts.items():
        shown = site_check.notebook_text(text) if name.endswith(".ipynb") else text
        assert not leaks(shown), f"{name} holds {leaks(shown)}"
    assert any("Var}(o) = \\frac{c^2" in line for line in FORBIDDEN)  # the hidden formulas are searched for


def test_hidden_tests_are_in_the_autograder_only(course):
    seeds = json.loads((course / "autograder" / "hidden_seeds.json").read_text())
    assert set(seeds) == {"06_parallelism"}
    with zipfile.ZipFile(course / "autograder" / "06_parallelism.zip") as autograder:
        test = autograder.read("tests/online_softmax_attention.py").decode()
    for seed in seeds["06_parallelism"]["check_online_softmax_attention"]:
        assert f"seed={seed})" in test
    assert test.count("'hidden': True") == 2 and test.count("'hidden': False") == 1
    with zipfile.ZipFile(course / "reluattn-course-student.zip") as bundle:
        assert not [name for name in bundle.namelist() if "test" in name or "autograder" in name]


def submissions(folder: Path) -> Path:
    """Three made-up submissions of notebook 06 (its exercise version, filled in, cut before §4's timing
    sweep to keep the test short): correct, a typical slip, and one calling the grader's own answer."""
    tutorial = nbformat.read(ROOT / "tutorials" / "06_parallelism.ipynb", as_version=4)
    solutions = {cell.id: "\n".join(line for line in cell.source.split("\n")
                                    if line.strip() not in (make_exercises.BEGIN, make_exercises.END))
                 for cell in tutorial.cells}

    def made(edit):
        notebook = nbformat.read(make_exercises.EXERCISES / "06_parallelism.ipynb", as_version=4)
        notebook.cells = notebook.cells[:next(i for i, cell in enumerate(notebook.cells) if cell.source.startswith("## 4."))]
        for cell in notebook.cells:
            if cell.cell_type == "code" and cell.id in solutions:
                cell.source = edit(solutions[cell.id])
        return notebook

    imported = ("from reluattn.grading.blocked_attention import full_attention\n\n\n"
                "def blocked_relu_attention(q, k, v, block_size):\n    return full_attention(q, k, v, 'relu')\n")
    folder.mkdir()
    nbformat.write(made(lambda source: source), folder / "correct.ipynb")
    nbformat.write(made(lambda source: source.replace("out = out * rescale + unnormalised @ v",
                                                      "out = out + unnormalised @ v")), folder / "slip.ipynb")
    nbformat.write(made(lambda source: imported if source.startswith("def blocked_relu_attention") else source),
                   folder / "imported.ipynb")
    return folder


def test_three_made_up_submissions_grade_as_expected(course, tmp_path):
    folder = submissions(tmp_path / "submissions")
    scores = tmp_path / "scores.csv"
    subprocess.run([sys.executable, str(course / "autograder" / "grade.py"), str(folder), "--out", str(scores)],
                   check=True, capture_output=True, text=True)
    rows = {row["submission"]: row for row in csv.DictReader(scores.open())}
    points = {name: (row["blocked_relu_attention"], row["online_softmax_attention"], row["total"], row["error"])
              for name, row in rows.items()}
    assert points == {"correct.ipynb": ("3", "3", "6", ""),  # the public check and both hidden ones
                      "slip.ipynb": ("3", "0", "3", ""),  # the output not rescaled when the maximum grows
                      "imported.ipynb": ("0", "3", "3", "")}  # refused: reluattn's own attention


def test_the_derivations_page_hides_every_marked_result_for_students():
    page = (ROOT / "docs" / "derivations.md").read_text(encoding="utf-8")
    hidden = make_exercises.page_hidden_lines()
    assert len(hidden) >= 10 and all(line in page for line in hidden)
    student = make_exercises.hide_answers(page, page=True)
    assert not leaks(student)
    assert student.count(make_exercises.DERIVE_PAGE) == page.count(make_exercises.BEGIN_ANSWER) == 9
    conf = (ROOT / "docs" / "conf.py").read_text(encoding="utf-8")
    assert 'app.connect("source-read", hidden_results)' in conf and "html_copy_source = not STUDENT" in conf


def session_notebooks() -> list[str]:
    """The notebooks of docs/course.md's session plan, in session order."""
    text = (ROOT / "docs" / "course.md").read_text(encoding="utf-8")
    return [notebook for _, notebook in re.findall(r"^\| (\d) \|[^|]+\| `(\d\d_\w+\.ipynb)` \|", text, flags=re.M)]


def test_every_session_has_a_lecture_deck_whose_source_holds_no_answer():
    notebooks = session_notebooks()
    assert len(notebooks) == 6
    sources = sorted((ROOT / "course" / "slides").glob("[0-9][0-9]_*.md"))
    assert [f"{source.stem}.ipynb" for source in sources] == notebooks
    for source in sources:
        text = source.read_text(encoding="utf-8")
        assert not leaks(text), f"{source.name} holds {leaks(text)}"
        assert make_exercises.BEGIN not in text and "BEGIN ANSWER" not in text
        assert text.count("](figure:") >= 2, f"{source.name} shows fewer than two of its tutorial's figures"


def test_lecture_slides_hold_no_answer_and_instructor_decks_do(tmp_path):
    """`make slides`: the lecture decks (course/slides/, one per session: the argument and the figures), the
    walk-through decks (the exercise versions cut at each heading) and the instructor decks (with answers)."""
    pytest.importorskip("nbconvert", reason="nbconvert (jupyterlab's, the dev extra) is not installed")
    script = str(ROOT / "docs" / "_ext" / "make_slides.py")
    for flags in ([], ["--notebooks"], ["--instructor", "06"]):
        subprocess.run([sys.executable, script, "--out", str(tmp_path), *flags], check=True, capture_output=True)
    lectures = sorted(tmp_path.glob("*.slides.html"))
    assert [deck.name.replace(".slides.html", ".ipynb") for deck in lectures] == session_notebooks()
    walkthroughs = sorted((tmp_path / "notebooks").glob("*.slides.html"))
    assert len(walkthroughs) == 6
    for deck in lectures + walkthroughs:
        text = site_check.page_text(deck)
        assert not leaks(text), f"{deck.name} holds {leaks(text)}"
        assert "data:image/png;base64" in deck.read_text(encoding="utf-8")  # the figures are there
    for deck in lectures:
        page = deck.read_text(encoding="utf-8")
        images = re.findall(r"<img ([^>]*)>", page)
        alts = [re.search(r'alt="([^"]*)"', image).group(1) for image in images]
        assert len(images) >= 2 and all(len(alt.split()) >= 8 for alt in alts), f"{deck.name}: {alts}"
        assert page.count('<aside class="notes">') >= 3  # the lecturer's notes (minutes, what to assign)
        assert 'class="jp-Cell jp-CodeCell' not in page  # the argument and the figures: no notebook code
    assert leaks(site_check.page_text(tmp_path / "instructor" / "06_parallelism.slides.html"))


def test_a_lecture_deck_takes_its_figures_from_the_tutorial(tmp_path):
    make_slides = load("make_slides", ROOT / "docs" / "_ext" / "make_slides.py")
    source = tmp_path / "06_parallelism.md"
    source.write_text("# Title\n\ntext\n\nNote:\nfor the lecturer\n---\n## Two\n\n![](figure:06-04)\n---\n\n")
    deck = make_slides.lecture_deck(source)
    assert [cell.metadata.slideshow.slide_type for cell in deck.cells] == ["slide", "notes", "slide"]
    assert deck.cells[1].source == "for the lecturer" and "Note:" not in deck.cells[0].source
    alt = nbformat.read(ROOT / "tutorials" / "06_parallelism.ipynb", as_version=4)
    alt = next(cell.metadata.mystnb.image.alt for cell in alt.cells if cell.get("id") == "06-04")
    assert f'alt="{alt}"' in deck.cells[2].source and "src=\"data:image/png;base64," in deck.cells[2].source
    source.write_text("# Title\n\n![](figure:no-such-cell)\n")
    with pytest.raises(ValueError, match="no figure drawn by a cell 'no-such-cell'"):
        make_slides.lecture_deck(source)
    (tmp_path / "99_no_tutorial.md").write_text("# Title\n")
    with pytest.raises(ValueError, match="no tutorial"):
        make_slides.lecture_deck(tmp_path / "99_no_tutorial.md")


def test_the_student_site_holds_no_solution(tmp_path):
    pytest.importorskip("sphinx", reason="the docs extra (pip install -e '.[docs]') is not installed")
    pytest.importorskip("myst_nb", reason="the docs extra (pip install -e '.[docs]') is not installed")
    site = tmp_path / "student"
    subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", "-t", "student",
                    str(ROOT / "docs"), str(site)], check=True, capture_output=True)
    assert site_check.problems(site, None) == []
    derivations = site_check.page_text(site / "derivations.html")
    assert derivations.count("Left out of the student site") == 9 and not leaks(derivations)
    assert not (site / "_sources" / "derivations.md.txt").exists()
    figures = site_check.page_text(site / "tutorials" / "06_parallelism.html")
    assert "against the full computation: block 1:" not in figures  # a cell that runs an exercise: no output
    assert len(list((site / "_images").glob("*.png"))) >= 6  # the tutorials' figures are on the student pages


def test_every_figure_of_the_tutorials_has_alt_text_saying_what_it_shows():
    figures = 0
    for path in sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code" and any("image/png" in output.get("data", {}) for output in cell.outputs):
                figures += 1
                alt = cell.metadata.get("mystnb", {}).get("image", {}).get("alt", "")
                assert len(alt.split()) >= 8 and ".png" not in alt, f"{path.name}: a figure without alt text"
    assert figures >= 20
