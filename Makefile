# Every target installs what it needs into .venv first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
FUZZ_ARGS ?= --count 50 --nodes 10 --seed 1 -o out/fuzz

.PHONY: install test lint format fuzz bench clean

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m ruff check nnsmith_cov tests scripts
	$(PY) -m pytest -q

lint: $(STAMP)
	$(PY) -m ruff check nnsmith_cov tests scripts
	$(PY) -m ruff format --check nnsmith_cov tests scripts

format: $(STAMP)
	$(PY) -m ruff format nnsmith_cov tests scripts
	$(PY) -m ruff check --fix nnsmith_cov tests scripts

# The main job. Until the coverage-guided campaign lands: generate, validate
# and export a batch of models and print a summary.
fuzz: $(STAMP)
	$(VENV)/bin/nnsmith-cov batch $(FUZZ_ARGS)

bench: $(STAMP)
	$(PY) scripts/bench_generate.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .ruff_cache
