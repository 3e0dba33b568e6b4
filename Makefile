# Every target installs what it needs into .venv first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
FUZZ_ARGS ?= --backends ort,tvm --time 5m --seed 1 -o out/fuzz-$(shell date +%Y%m%d-%H%M%S)

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

# The main job. Until the coverage-guided campaign lands: the unguided loop
# (generate, search, export, ORT + TVM, oracle) for five minutes into out/.
fuzz: $(STAMP)
	$(VENV)/bin/nnsmith-cov fuzz $(FUZZ_ARGS)

bench: $(STAMP)
	$(PY) scripts/bench_generate.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .ruff_cache
