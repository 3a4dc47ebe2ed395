# Two commands on a fresh machine: `make train` and `make test`.
# Each creates .venv from pyproject.toml on first use (and again when pyproject.toml changes).

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# Extra flags for `make train`, e.g. make train ARGS="--attention softmax --out runs/softmax"
ARGS   ?=

.PHONY: train test bench docs clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

train: $(STAMP)
	$(PY) -m reluattn train --preset cpu-small $(ARGS)

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) benchmarks/numpy_backend.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
