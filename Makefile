# Every target builds or refreshes .venv from the project's own files first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
COMPAT := tests/compat
NODE_STAMP := $(COMPAT)/node_modules/.installed

.PHONY: all venv node demo test test-fast lint bench clean

all: test

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,spark]'
	@touch $(STAMP)

venv: $(STAMP)

$(NODE_STAMP): $(COMPAT)/package.json $(COMPAT)/package-lock.json
	cd $(COMPAT) && npm ci --no-audit --no-fund --loglevel=error
	@touch $(NODE_STAMP)

node: $(NODE_STAMP)

demo: venv
	$(PY) -m examples.pipeline.run

test: venv node
	$(PY) -m pytest -q tests

test-fast: venv
	$(PY) -m pytest -q tests -m "not spark and not compat and not slow"

lint: venv
	$(VENV)/bin/ruff check src tests bench examples
	$(VENV)/bin/mypy

bench: venv
	$(PY) -m bench

clean:
	rm -rf $(VENV) $(COMPAT)/node_modules .pytest_cache .mypy_cache
