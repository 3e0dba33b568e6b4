# Every target installs what it needs into .venv first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Test processes: files are spread over them, each file's tests run in order in one of them
TEST_JOBS ?= 2
FUZZ_ARGS ?= --backends ort,tvm --collector python+binary --time 5m --seed 1 -o corpus/fuzz-$(shell date +%Y%m%d-%H%M%S)

.PHONY: install test lint format fuzz experiment bench clean native-tools instrumented

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,ray]'
	touch $(STAMP)

install: $(STAMP)

test: native-tools $(STAMP)
	$(PY) -m ruff check nnsmith_cov tests scripts
	$(PY) -m pytest -q -n $(TEST_JOBS) --dist loadfile

lint: $(STAMP)
	$(PY) -m ruff check nnsmith_cov tests scripts
	$(PY) -m ruff format --check nnsmith_cov tests scripts

format: $(STAMP)
	$(PY) -m ruff format nnsmith_cov tests scripts
	$(PY) -m ruff check --fix nnsmith_cov tests scripts

# The main job: a five-minute coverage-guided campaign (ORT + TVM; TVM's Python, and ORT's and
# TVM's C++ from their wheels, measured together, one map part per collector; feedback on) into an
# LMDB corpus under corpus/.
fuzz: $(STAMP)
	$(VENV)/bin/nnsmith-cov fuzz $(FUZZ_ARGS)

# The generator x feedback comparison, then `report` over it (EXPERIMENT_ARGS="--time 4h").
EXPERIMENT_ARGS ?= --time 5m --out out/experiment
experiment: $(STAMP)
	$(PY) scripts/experiment.py $(EXPERIMENT_ARGS)

bench: $(STAMP)
	$(PY) scripts/bench_generate.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .ruff_cache

# Native coverage (the llvm collector): Debian's clang-19 / llvm-19, and what the
# instrumented onnxoptimizer build needs (its slow test builds it under `make test`),
# each installed only when missing. libclang-rt-19-dev holds the profile runtime of
# source-based coverage, only a Recommends of clang-19.
NATIVE_PKGS := clang-19 llvm-19 libclang-rt-19-dev libprotobuf-dev protobuf-compiler cmake
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

native-tools:
	@missing=""; for p in $(NATIVE_PKGS); do \
	dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "installing$$missing"; $(SUDO) apt-get update -q && \
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends $$missing; fi

# onnxoptimizer built from its sdist with instrumentation/ into ~/.cache/nnsmith-cov/instrumented/
# (skipped when already built there); `--backends onnxoptimizer` runs it.
instrumented: native-tools $(STAMP)
	nice -n 10 $(PY) scripts/build_instrumented.py onnxoptimizer
