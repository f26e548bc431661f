# coddl: `make demo` builds .venv and runs the main job; `make test` runs the whole suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast test-gpu bench clean mutation

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "torch==2.13.0"
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/coddl demo

# The suite runs on pytest-xdist workers: the end-to-end tests mostly wait (on servers, training
# workers, Ray), so more workers than cores keeps the cores busy. A module's tests stay on one worker
# (--dist loadfile), so that a module fixture (a live server, a Ray cluster, the testbed) is built
# once; modules are handed out in collection order, end-to-end ones first (tests/conftest.py).
# TEST_WORKERS=0 runs serially. Tests that measure the machine itself (a link's bandwidth under tc:
# marker `alone`) run afterwards, with nothing beside them.
TEST_WORKERS ?= 4
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
PYTEST_ALONE := $(BIN)/python -m pytest -q -p no:cacheprovider

test: $(STAMP)
	$(PYTEST) -m "not alone"
	$(PYTEST_ALONE) -m alone

test-fast: $(STAMP)
	$(PYTEST) -m "not slow and not alone"
	$(PYTEST_ALONE) -m "alone and not slow"

# The CUDA paths (tests/gpu; they skip without a GPU, so CI runs them as skips only).
test-gpu: $(STAMP)
	$(BIN)/python -m pytest -v -p no:cacheprovider -rA tests/gpu

bench: $(STAMP)
	$(BIN)/python benchmarks/sim_speed.py

clean:
	rm -rf $(VENV) results build *.egg-info

# Mutation testing of the core (not part of `make test`): every listed module, or one of them.
mutation: $(STAMP)
	$(BIN)/python mutation/run.py $(MODULE)
