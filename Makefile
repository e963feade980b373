# make run   installs what is missing into .venv and runs the main job (ds2-mini, PyTorch, CPU)
# GPU users: install a CUDA torch first, and plugins/tf_ds2[gpu] instead of [cpu].
# make test  installs what is missing and runs the tests
# make test-isa  runs the numerics tests again with the frameworks held one ISA below this CPU's
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.benchbase-installed
SOURCES := pyproject.toml plugins/torch_ds2/pyproject.toml plugins/tf_ds2/pyproject.toml plugins/jax_ds2/pyproject.toml \
	constraints.txt

.PHONY: run test test-isa lint clean-venv

run: $(STAMP)
	$(BIN)/benchbase run --workload ds2-mini --backend torch --hw cpu

test: $(STAMP)
	$(BIN)/python -m pytest

# An AVX-512 machine checks the AVX2 kernels, an AVX2 machine the portable ones (benchbase/testing/isa.py).
test-isa: $(STAMP)
	$(BIN)/python -m benchbase.testing.isa --cap below -- $(BIN)/python -m pytest -m numerics -q

lint: $(STAMP)
	$(BIN)/ruff check benchbase plugins tests benchmarks
	$(BIN)/mypy

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(SOURCES) | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[test,gpu]" -e plugins/torch_ds2 \
		-e "plugins/tf_ds2[cpu]" -e plugins/jax_ds2
	touch $@

clean-venv:
	rm -rf $(VENV)
