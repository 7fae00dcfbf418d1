PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint docs format bench bench-matrix bench-sparse gpu-check clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml constraints.txt
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[test]"
	touch $@

demo: $(VENV)/.installed
	$(BIN)/python examples/demo.py
	$(BIN)/diffiface check

lint: $(VENV)/.installed
	$(BIN)/ruff check diffiface tests examples benchmarks
	$(BIN)/ruff format --check diffiface tests examples benchmarks

format: $(VENV)/.installed
	$(BIN)/ruff format diffiface tests examples benchmarks
	$(BIN)/ruff check --fix diffiface tests examples benchmarks

docs: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir build/site

test: lint docs
	$(BIN)/python -m pytest -q -n 2 --dist worksteal diffiface tests

$(VENV)/.bench: $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[test,bench]"
	touch $@

bench: $(VENV)/.bench
	$(shell command -v taskset >/dev/null && echo taskset -c 0) $(BIN)/python benchmarks/run.py

# the performance matrix alone (QUICK=1: sizes 10 and 1e3, fewer rounds, about 3 minutes)
bench-matrix: $(VENV)/.bench
	$(shell command -v taskset >/dev/null && echo taskset -c 0) $(BIN)/python benchmarks/matrix.py $(if $(QUICK),--quick)

bench-sparse: $(VENV)/.bench
	cd benchmarks && $(shell command -v taskset >/dev/null && echo taskset -c 0) ../$(BIN)/python sparse.py $(if $(QUICK),--quick,--md ../docs/sparse_results.md --png ../docs/sparse_growth.png)

# On a machine with a GPU (docs/benchmarks.md, "On a GPU"): the tests marked gpu and the
# transfer tests, then the GPU benchmark (8 minutes at most); results in build/. It uses the Python that holds
# CUDA torch and JAX (GPU_PYTHON, the venv's where there is one) and diffiface from here.
GPU_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))
GPU_ENV := PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} XLA_PYTHON_CLIENT_PREALLOCATE=false
gpu-check:
	mkdir -p build
	$(GPU_ENV) timeout 270 $(GPU_PYTHON) -m pytest -q -p no:cacheprovider -p no:benchmark -n 8 -rfE \
		-W "ignore::DeprecationWarning" tests/devices >build/gpu_tests.txt 2>&1; \
		echo $$? >build/gpu_tests.rc; tail -n 60 build/gpu_tests.txt
	cd benchmarks && $(GPU_ENV) timeout 200 $(GPU_PYTHON) gpu.py --out ../build/gpu_check.md
	test "$$(cat build/gpu_tests.rc)" = 0

clean:
	rm -rf $(VENV) build dist site .pytest_cache
