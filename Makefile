# The two commands a newcomer needs: `make demo` and `make test`. Both install what they need.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint up down status clean chart-sync

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

## The local cluster (real kube-apiserver + kwok, real Slurm), sunk-scheduler with its
## dashboard, and example Pods; prints where to look.
demo: $(STAMP)
	$(BIN)/python -m testbed demo

## Lint, type-check, then every test (the end-to-end ones start the test bed, or reuse it).
test: $(STAMP)
	$(BIN)/python -m testbed build
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m pytest

## ruff, mypy and the import contracts (pyproject.toml [tool.importlinter]: the layers).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

up: $(STAMP)
	$(BIN)/python -m testbed up

down: $(STAMP)
	$(BIN)/python -m testbed down

status: $(STAMP)
	$(BIN)/python -m testbed status

clean: down
	rm -rf $(VENV)

## Copy policies/ and sunk/scripts/ into the chart (a unit test fails when they differ).
chart-sync:
	bash charts/sync-files.sh
