# make run   installs what is missing into .venv and runs the main job (ds2-mini, PyTorch, CPU)
# GPU users: install a CUDA torch first, and plugins/tf_ds2[gpu] instead of [cpu].
# make test  installs what is missing and runs every test (tests/ and plugins/*/tests/) on
#            TEST_WORKERS processes (pytest-xdist; a module's tests share one worker, so that
#            what a module's fixture trains is trained once), then the few marked serial alone
# make test-quick  the development loop: the same without the tests marked slow (the ones that
#            train a model through a run, or take over ~20 s); `make test` still runs them
# make test-isa  runs the numerics tests again with the frameworks held one ISA below this CPU's
# make test-gpu  runs the tests marked gpu (the kit, whole runs and CUDA graphs on a GPU); they skip
#            without one. GPU_PYTHON=python3 runs them with a Python that already has a CUDA torch and
#            JAX (a bare GPU machine: see docs/gpu.md), instead of installing .venv
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.benchbase-installed
SOURCES := pyproject.toml plugins/torch_ds2/pyproject.toml plugins/tf_ds2/pyproject.toml plugins/jax_ds2/pyproject.toml \
	constraints.txt

TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest
PARALLEL := -n $(TEST_WORKERS) --dist loadscope

.PHONY: run test test-quick test-isa test-gpu lint clean-venv

run: $(STAMP)
	$(BIN)/benchbase run --workload ds2-mini --backend torch --hw cpu

# Tests marked serial measure the CPU time a process gets: they run alone, after the parallel part.
test: $(STAMP)
	$(PYTEST) $(PARALLEL) -m "not serial"
	$(PYTEST) -m "serial"

test-quick: $(STAMP)
	$(PYTEST) $(PARALLEL) -m "not slow and not serial"
	$(PYTEST) -m "serial and not slow"

# An AVX-512 machine checks the AVX2 kernels, an AVX2 machine the portable ones (benchbase/testing/isa.py).
test-isa: $(STAMP)
	$(BIN)/python -m benchbase.testing.isa --cap below -- $(PYTEST) $(PARALLEL) -m "numerics and not serial" -q
	$(BIN)/python -m benchbase.testing.isa --cap below -- $(PYTEST) -m "numerics and serial" -q

# The files that hold tests marked gpu (tests/test_gpu_tier.py checks the list is whole): collecting
# only these needs none of the test-only packages. Those present: the GPU bundle's snapshot of the
# code leaves TensorFlow's plugin out (its CUDA wheels do not travel).
GPU_TESTS := $(wildcard tests/test_gpu_tier.py tests/test_telemetry.py plugins/torch_ds2/tests/test_torch_cuda_graphs.py \
	plugins/torch_ds2/tests/test_torch_backend.py plugins/torch_ds2/tests/test_torch_rnnt_loss_graphs.py \
	plugins/tf_ds2/tests/test_tf_backend.py)
GPU_PYTHON ?= $(BIN)/python
GPU_TEST_ARGS ?=

# JAX takes most of the GPU's memory when it starts unless told not to; torch tests share the process.
test-gpu: $(if $(filter $(BIN)/python,$(GPU_PYTHON)),$(STAMP))
	XLA_PYTHON_CLIENT_PREALLOCATE=false $(GPU_PYTHON) -m pytest -p no:cacheprovider -m gpu $(GPU_TEST_ARGS) $(GPU_TESTS)

lint: $(STAMP)
	$(BIN)/ruff check benchbase plugins tests benchmarks conftest.py
	$(BIN)/mypy

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(SOURCES) | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[test,gpu,distributed,postgres]" -e plugins/torch_ds2 \
		-e "plugins/tf_ds2[cpu]" -e plugins/jax_ds2
	touch $@

clean-venv:
	rm -rf $(VENV)
