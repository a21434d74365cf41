# fabric-bench: `make bench` (the main job) and `make test` do their own set-up.
# VENV and FABRIC_BENCH_CACHE may be relative, absolute, or contain spaces.
PYTHON ?= python3
VENV   ?= .venv
FABRIC ?= ethernet
FLAVOUR ?= cpu
RUNTIME ?= apptainer
BENCH_ARGS ?=
PYTEST_ARGS ?=
export PYTHON VENV

.PHONY: setup setup-tensorflow setup-test bench test check test-fast clean lint format typecheck docs

# setup: the PyTorch side, all `make bench` runs; setup-tensorflow adds TensorFlow and Horovod's
# TensorFlow ops (what `--frameworks tf` and the tests need); setup-test adds the test tools
setup:
	scripts/setup.sh

setup-tensorflow:
	scripts/setup.sh --tensorflow

setup-test:
	scripts/setup.sh --test

# bench: the venv first, then the main job, which prints a DDP result before it builds Horovod
# (~5 min the first time) and runs the engines side by side
bench:
	scripts/setup.sh --without-horovod
	"$(VENV)/bin/python" benchmarks/train_engines.py $(BENCH_ARGS)

# The test tools beyond pytest (requirements-dev.txt: pytest-timeout, ruff, mypy); pytest itself is
# pinned in requirements.txt, which the images install too.
DEV_TOOLS = "$(VENV)/bin/python" -m pip install -q --disable-pip-version-check -r requirements-dev.txt
# Every test's seconds (setup + call + teardown), slowest first, one per line: tests/conftest.py
# writes them (seconds, outcome, markers, test) and prints the 25 slowest.
TEST_DURATIONS ?= results/test-durations.tsv
CHECK_DURATIONS ?= results/check-durations.tsv
# A test that runs past its limit fails with its stack (pytest-timeout): the longest test runs
# ~12 min on 2 cores; a check test is seconds, the margin is for a shared 2-core machine
TEST_TIMEOUT ?= 1800
CHECK_TIMEOUT ?= 120
# The unit tests run on both cores (pytest-xdist), a file's tests on one worker, so a file's real
# runs (one emulated Slurm cluster at a time) never meet; the slow tests that time nothing run the
# same way (tests/conftest.py SIDE_BY_SIDE), the others one at a time, their timings, quiet checks
# and shaped links having the cores to themselves
JOBS ?= 2
PYTEST = "$(VENV)/bin/python" -m pytest -ra
SIDE_BY_SIDE = -n $(JOBS) --dist loadfile

# test: the whole suite, real processes throughout (CI runs it; scripts/test-suite.sh): the cpu-debian
# image builds in the background while the unit tests run side by side, then the slow ones run,
# one durations file for both;
# check: the contributor's loop, every unit test and tiny real runs of the main paths
# (tests/conftest.py CHECK); test-fast: the unit tests alone
test: setup-test
	$(DEV_TOOLS)
	TEST_DURATIONS="$(TEST_DURATIONS)" TEST_TIMEOUT=$(TEST_TIMEOUT) JOBS=$(JOBS) PYTEST_ARGS='$(PYTEST_ARGS)' \
	  scripts/test-suite.sh

check: setup-test
	$(DEV_TOOLS)
	FABRIC_BENCH_TEST_DURATIONS="$(CHECK_DURATIONS)" $(PYTEST) -m "not slow or check" --timeout=$(CHECK_TIMEOUT) \
	  $(SIDE_BY_SIDE) $(PYTEST_ARGS)

test-fast: setup-tensorflow
	$(DEV_TOOLS)
	$(PYTEST) -m "not slow" --timeout=$(CHECK_TIMEOUT) $(SIDE_BY_SIDE) $(PYTEST_ARGS)

clean:
	rm -rf results .pytest_cache

# Lint (ruff; its rule set and the rules left out are in pyproject.toml) and the formatter's
# check (`make format` formats). CI runs it first. Ruff needs the venv, not Horovod: a checkout
# whose Horovod inputs changed lints at once and compiles Horovod (~4 min) where a target needs it.
LINT_PATHS = bench launch containers benchmarks tests scripts
lint:
	scripts/setup.sh --without-horovod
	$(DEV_TOOLS)
	"$(VENV)/bin/ruff" check $(LINT_PATHS)
	"$(VENV)/bin/ruff" format --check $(LINT_PATHS)

format:
	scripts/setup.sh --without-horovod
	$(DEV_TOOLS)
	"$(VENV)/bin/ruff" format $(LINT_PATHS)

# Type check (mypy; what it checks and how is in pyproject.toml). CI runs it after lint.
typecheck: setup
	$(DEV_TOOLS)
	"$(VENV)/bin/mypy"

# The generated reference pages (docs/reference/: the CLI's help, the fabric presets);
# tests/test_docs.py fails when the checked-in ones are stale.
docs: setup
	"$(VENV)/bin/python" scripts/gen_docs.py

# Render and build one image (cached by its inputs; see containers/build.py); the flavour's
# stack image is built first when missing, the fabric image FROM it:
#   make image FABRIC=infiniband FLAVOUR=cuda RUNTIME=apptainer [BASE=local]
BASE ?= site
.PHONY: image image-rehearsal podman-rehearsal
image: setup
	"$(VENV)/bin/fabric-bench" image build --fabric $(FABRIC) --flavour $(FLAVOUR) --runtime $(RUNTIME) --base $(BASE)

# Build the cuda stack and fabric images here on the local CUDA base and write their
# records to containers/rehearsals/ (commit them; tests check they are current):
#   make image-rehearsal [REHEARSAL_FABRICS="ethernet efa"]
REHEARSAL_FABRICS ?=
image-rehearsal: setup
	"$(VENV)/bin/python" -m containers.rehearse $(REHEARSAL_FABRICS)

# Build the cpu stack and ethernet image with podman, run the self-test and a 2-rank
# allreduce in them, and write their records (CI builds the cpu stack with Apptainer only):
#   make podman-rehearsal
podman-rehearsal: setup-test
	"$(VENV)/bin/python" -m containers.rehearse --podman
