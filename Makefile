# The two commands a newcomer needs: `make demo` and `make test`. Both install what they need.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The test bed's Kubernetes release (1.35, 1.36 or 1.37; unset: 1.37), for `up`, `demo`,
# `build` and the end-to-end tests: `SUNK_TESTBED_KUBERNETES=1.36 make test`.
export SUNK_TESTBED_KUBERNETES

.PHONY: demo test lint up down status clean chart-sync image chart lock

# The locked dependencies (every hash checked), then sunk itself from the checkout.
$(STAMP): pyproject.toml requirements-dev.lock
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q --require-hashes -r requirements-dev.lock
	$(BIN)/pip install -q --no-deps -e .
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

## dist/sunk-<version>.oci.tar: the scheduler's image, from Debian's packages, without a
## container daemon (needs root, debootstrap and binutils); the same commit gives the same digest.
image: $(STAMP)
	$(BIN)/python -m release.image

## dist/sunk-<version>.tgz: the Helm chart, linted, versioned from pyproject.toml.
chart: $(STAMP)
	$(BIN)/python -m release.chart

## Re-resolve requirements.lock (the image's) and requirements-dev.lock (CI's) from pyproject.toml.
lock: $(STAMP)
	$(BIN)/uv pip compile pyproject.toml --universal --generate-hashes --python-version 3.11 \
	  --no-header -q -o requirements.lock
	$(BIN)/uv pip compile pyproject.toml --extra dev --universal --generate-hashes \
	  --python-version 3.11 --no-header -q -o requirements-dev.lock

## Copy policies/ and sunk/scripts/ into the chart (a unit test fails when they differ).
chart-sync:
	bash charts/sync-files.sh
