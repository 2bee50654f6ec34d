# coverfarm: `make run` runs a sweep end to end on the embedded default; `make test` runs every check.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV ?= .venv
BIN := $(VENV)/bin
# Python 3.12 is required (executorch 1.5.1 ships cp312 wheels). Found on PATH or under pyenv.
PYTHON312 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12.*/bin/python3.12) $(wildcard /usr/local/bin/python3.12 /usr/bin/python3.12))
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# Test processes (pytest-xdist): one per core here; tests/conftest.py keeps each file in one process.
PYTEST_WORKERS ?= 2

.PHONY: help install stack run test test-hosts lint typecheck unit fuzz bench clean

help:
	@echo "make run    - a sweep end to end on the embedded default (no servers), grid served"
	@echo "make test   - install if needed, then ruff, mypy and the test suite"
	@echo "make test-hosts - the farm across hosts in network namespaces (root; tests/hosts)"
	@echo "make bench  - the benchmark scripts in benchmarks/"
	@echo "make stack STACK=NAME [WHEEL=path.whl] - a stack's virtualenv in .stacks/NAME (docs/stacks.md)"

$(STAMP): requirements/lock.txt requirements/lerobot.txt pyproject.toml scripts/system-deps.sh
	bash scripts/system-deps.sh
	@if [ -z "$(PYTHON312)" ]; then \
	  echo "coverfarm needs Python 3.12: install it (e.g. 'pyenv install 3.12.1') or set PYTHON312=/path/to/python3.12" >&2; exit 1; fi
	@test -x $(BIN)/python || $(PYTHON312) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip==24.3.1
	# PIP_CONSTRAINT is cleared: the lock file is the only source of versions.
	PIP_CONSTRAINT= $(BIN)/python -m pip install --quiet -r requirements/lock.txt
	PIP_CONSTRAINT= $(BIN)/python -m pip install --quiet --no-deps -r requirements/lerobot.txt
	PIP_CONSTRAINT= $(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	bash scripts/check-deps.sh $(BIN)/python
	@touch $(STAMP)

install: $(STAMP)

# A stack's virtualenv, .stacks/NAME, from requirements/stacks/NAME.txt (docs/stacks.md); with WHEEL, a
# stack of a local executorch wheel, pinned by its sha256, on release stack BASE (default et-1.5.1).
STACK ?=
WHEEL ?=
BASE ?=
STACKS_ROOT ?= .stacks
stack:
	@if [ -z "$(STACK)" ]; then \
	  echo "make stack needs STACK=NAME (python3 -m coverfarm.stacks list names them)" >&2; exit 2; fi
	@if [ -z "$(PYTHON312)" ]; then \
	  echo "coverfarm needs Python 3.12: install it (e.g. 'pyenv install 3.12.1') or set PYTHON312=/path/to/python3.12" >&2; exit 1; fi
	$(PYTHON312) -m farmrun.stack_build $(STACK) --python $(PYTHON312) --root $(STACKS_ROOT) $(if $(WHEEL),--wheel $(WHEEL)) $(if $(BASE),--base $(BASE))

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) -m "not fuzz" --ignore=tests/hosts $(PYTEST_ARGS)

# schemathesis over the served schema, bounded (fixed seed and examples); -s prints each run's figures.
fuzz: $(STAMP)
	$(BIN)/python -m pytest -n 0 -s -m fuzz tests/orchestrator/devices/test_fuzz.py

test: lint typecheck unit fuzz

# The farm across hosts (docker-compose.yml's services in network namespaces) and its faults, one at a
# time: each test builds hosts and breaks one. Needs root, iproute2 and PostgreSQL 15 (skipped without).
test-hosts: $(STAMP)
	$(BIN)/python -m pytest -n 0 -s tests/hosts $(PYTEST_ARGS)

run: $(STAMP)
	$(BIN)/coverfarm up

bench: $(STAMP)
	$(BIN)/python benchmarks/engine_stages.py
	$(BIN)/python benchmarks/partitioner.py
	$(BIN)/python benchmarks/farm_api.py
	$(BIN)/python benchmarks/farm_overhead.py
	$(BIN)/python benchmarks/farm_rerun.py
	$(BIN)/python benchmarks/farm_sweep.py
	$(BIN)/python benchmarks/dashboard_page.py
	$(BIN)/python benchmarks/runner_latency.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
