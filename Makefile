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

.PHONY: setup setup-tensorflow setup-test bench test test-fast clean lint format typecheck docs

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

test: setup-test
	"$(VENV)/bin/python" -m pytest -ra --durations=25 $(PYTEST_ARGS)

test-fast: setup-tensorflow
	"$(VENV)/bin/python" -m pytest -ra -m "not slow" $(PYTEST_ARGS)

clean:
	rm -rf results .pytest_cache

# Lint (ruff; its rule set and the rules left out are in pyproject.toml) and the formatter's
# check (`make format` formats). CI runs it first.
LINT_PATHS = bench launch containers benchmarks tests scripts
lint: setup
	"$(VENV)/bin/python" -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	"$(VENV)/bin/ruff" check $(LINT_PATHS)
	"$(VENV)/bin/ruff" format --check $(LINT_PATHS)

format: setup
	"$(VENV)/bin/python" -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	"$(VENV)/bin/ruff" format $(LINT_PATHS)

# Type check (mypy; what it checks and how is in pyproject.toml). CI runs it after lint.
typecheck: setup
	"$(VENV)/bin/python" -m pip install -q --disable-pip-version-check -r requirements-dev.txt
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
