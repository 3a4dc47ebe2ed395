# Two commands on a fresh machine: `make train` and `make test`; and `make docs` for the site.
# Each creates .venv from pyproject.toml on first use (and again when pyproject.toml changes).

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.installed-docs
COURSE_STAMP := $(VENV)/.installed-course
# Extra flags for `make train`, e.g. make train ARGS="--attention softmax --out runs/softmax"
ARGS   ?=

.PHONY: train test bench docs notebooks slides lab course grade clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev,interop]"
	touch $(STAMP)

$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e ".[dev,docs]"
	touch $(DOCS_STAMP)

$(COURSE_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e ".[dev,course]"
	touch $(COURSE_STAMP)

train: $(STAMP)
	$(PY) -m reluattn train --preset cpu-fast $(ARGS)

# The course and site tests need both extras: nothing is skipped. -n auto: a worker per core (pytest-xdist),
# each test file whole on one worker (its module fixtures built once); `pytest tests/x.py` runs in one process.
test: $(DOCS_STAMP) $(COURSE_STAMP)
	$(PY) -m pytest -q -n auto --dist loadfile

bench: $(STAMP)
	$(PY) benchmarks/numpy_backend.py

# The two sites (warnings are errors): docs/_build/student, the exercise versions of the notebooks (not run,
# no solutions; the figures of the cells that hold and use no exercise), and docs/_build/instructor, the tutorials executed (RELUATTN_QUICK=1) with the course's
# answer keys and notes. Then both are checked for solution code (student) and machine paths (both).
docs: $(DOCS_STAMP)
	$(PY) -m sphinx -W --keep-going -q -b html -t student docs docs/_build/student
	$(PY) -m sphinx -W --keep-going -q -b html docs docs/_build/instructor
	$(PY) docs/_ext/site_check.py --student docs/_build/student --instructor docs/_build/instructor
	@echo "open docs/_build/student/index.html (students) or docs/_build/instructor/index.html (instructors)"

# The tutorials run again in place (RELUATTN_QUICK=1, as the instructor site runs them), so that the committed
# notebooks carry the outputs of their code; the tests fail while a code cell has changed since. Only some:
# make notebooks ONLY="01 04"
ONLY ?=
notebooks: $(STAMP)
	$(PY) tutorials/execute_tutorials.py $(ONLY)

# Slides (nbconvert's reveal.js exporter): the lecture decks, one per session, written in course/slides/ (the
# argument and the tutorials' figures, no answers) into docs/_build/slides; walk-through decks of the exercise
# versions (a slide per section, the committed figures of the cells that hold no exercise) into
# docs/_build/slides/notebooks; instructor decks of the tutorials (solutions and outputs) into .../instructor.
slides: $(STAMP)
	$(PY) docs/_ext/make_slides.py --out docs/_build/slides
	$(PY) docs/_ext/make_slides.py --out docs/_build/slides --notebooks
	$(PY) docs/_ext/make_slides.py --out docs/_build/slides --instructor
	@echo "open docs/_build/slides/01_why_1_over_L.slides.html (lecture; press s for the notes), docs/_build/slides/notebooks/ (the exercise versions) or docs/_build/slides/instructor/ (with answers)"

# The class workflow (docs/course.md): dist/course/ with the student bundle (exercise notebooks, the reluattn
# wheel, a CIFAR-10 subset of DATA, an image-folder zip such as the JPEG copy) and the otter-grader autograder
# with hidden tests; then `make grade SUBMISSIONS=folder` writes scores.csv (points per question).
DATA ?= $(RELUATTN_DATA)
SUBMISSIONS ?= submissions
SCORES ?= scores.csv
course: $(COURSE_STAMP)
	@test -n "$(DATA)" || { echo "make course: give DATA=<an image-folder zip of CIFAR-10 (train/<class>/<image>)>"; exit 2; }
	$(PY) course/make_course.py --data "$(DATA)"

grade: $(COURSE_STAMP)
	$(PY) dist/course/autograder/grade.py "$(SUBMISSIONS)" --out "$(SCORES)"

# Jupyter Lab on the tutorials (students: tutorials/exercises/), without running the tests first.
lab: $(STAMP)
	$(VENV)/bin/jupyter lab tutorials/

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis docs/_build docs/tutorials
