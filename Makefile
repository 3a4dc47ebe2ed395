# Two commands on a fresh machine: `make train` and `make test`; and `make docs` for the site.
# Each creates .venv from pyproject.toml on first use (and again when pyproject.toml changes).

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.installed-docs
# Extra flags for `make train`, e.g. make train ARGS="--attention softmax --out runs/softmax"
ARGS   ?=

.PHONY: train test bench docs clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e ".[dev,docs]"
	touch $(DOCS_STAMP)

train: $(STAMP)
	$(PY) -m reluattn train --preset cpu-small $(ARGS)

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) benchmarks/numpy_backend.py

# The site, into docs/_build/html: the notebooks are executed (RELUATTN_QUICK=1), warnings are errors.
docs: $(DOCS_STAMP)
	$(PY) -m sphinx -W --keep-going -q -b html docs docs/_build/html
	@echo "open docs/_build/html/index.html"

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis docs/_build docs/tutorials
