# The few entry points a person types. `make help` lists them.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV ?= .venv
PYTHON ?= python3
BIN := $(CURDIR)/$(VENV)/bin
export PATH := $(BIN):$(PATH)
# One scenario: make molecule SCENARIO=git_lfs
SCENARIO ?= $(sort $(notdir $(patsubst %/molecule.yml,%,$(wildcard molecule/*/molecule.yml))))

.PHONY: help tools setup test-setup lock lint check unit harness molecule fresh-test test lab bench overload-bench registry-bench lab-crash lab-down clean

help:  ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-15s %s\n", $$1, $$2}'

tools:  ## the programs the targets run that a bare Debian 12 may lack (git-lfs, python3-venv, ...)
	scripts/ensure-tools

setup: tools $(VENV)/.toolchain $(VENV)/.bytecode .cache/fleet-inputs.json  ## tools, and a virtualenv with the pinned toolchain that make lab needs (pyproject.toml + constraints.txt)

test-setup: setup $(VENV)/.tests  ## setup, and what the tests add: linters, pytest, Molecule, torch, transformers

# One optional-dependencies list of pyproject.toml as a requirements file.
extra = $(PYTHON) -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["$(1)"]))' > $(VENV)/$(1).txt
PIP_INSTALL = $(BIN)/pip install -q --disable-pip-version-check --progress-bar off

# The toolchain with --no-compile: Python compiles what it imports when it first imports it, and
# byte-compiling every file at install (the ansible package's collections alone are 15,000, few
# ever imported) made this step 102 s where it takes 34 s without, on a 2-core machine. The tests'
# list is compiled at install: both pytest workers import torch and transformers at once, and
# would each compile the same modules.
$(VENV)/.toolchain: pyproject.toml constraints.txt | tools
	@echo "$$(date +%T) setup: the toolchain (pyproject.toml's toolchain list, pinned by constraints.txt) into $(VENV)"
	$(PYTHON) -m venv $(VENV)
	$(call extra,toolchain)
	$(PIP_INSTALL) --no-compile -c constraints.txt -r $(VENV)/toolchain.txt
	$(PIP_INSTALL) --no-deps -e .   # the ftfleet command
	touch $@

# Bytecode for what Ansible and the tests import. Where PYTHONDONTWRITEBYTECODE is set (as on
# this kind of machine), Python compiles every module it imports from source, in every process, and
# keeps nothing: each ansible-playbook and each worker it forks compiled ansible-core and the filter
# plugins again (a no-op site.yml on the lab: 159 CPU-s in 98 s without, 133 CPU-s in 82 s with;
# docs/testing.md). Where the variable is not set, Python writes its own bytecode and this does
# nothing. Ansible's collections are left out (its collection loader compiles their source whatever
# is on disk), and so are tests folders. A file that does not compile here (a vendored Python 2
# test, say) is no failure: Python would compile it on import, as before. Made again when a
# project file changes.
PROJECT_PY_DIRS := filter_plugins callback_plugins ftdomain ftfleet ftgateway ftnative
$(VENV)/.bytecode: $(VENV)/.toolchain $(wildcard $(addsuffix /*.py,$(PROJECT_PY_DIRS)) ftdomain/*/*.py)
	@if [ -n "$${PYTHONDONTWRITEBYTECODE:-}" ]; then \
	  echo "$$(date +%T) setup: bytecode for the virtualenv and the project's Python (PYTHONDONTWRITEBYTECODE is set)"; \
	  $(BIN)/python -m compileall -q -j0 -x '/ansible_collections/|/tests?/' $(VENV)/lib $(PROJECT_PY_DIRS) >/dev/null 2>&1 || true; \
	fi
	touch $@

# The tables every host's input check reads (ftdomain/inputs/derived.py): the roles' documented
# options, literal defaults and outputs, and the fleet_* names, made here from the files they come
# from rather than by a check while a playbook runs. A check that finds them stale (a role edited
# since) derives them itself, in each worker: right, only slower.
.cache/fleet-inputs.json: $(VENV)/.toolchain ftdomain/inputs/derived.py $(wildcard roles/*/meta/argument_specs.yml roles/*/defaults/main.yml roles/*/tasks/*.yml) group_vars/all/fleet.yml docs/variables.md
	$(BIN)/python -m ftdomain.inputs.derived

$(VENV)/.tests: $(VENV)/.toolchain
	@echo "$$(date +%T) setup: what the tests add (pyproject.toml's tests list) into $(VENV)"
	$(call extra,tests)
	$(PIP_INSTALL) -c constraints.txt -r $(VENV)/tests.txt
	scripts/ensure-promtool   # the rules' unit tests: promtool from Debian's prometheus, not installed
	touch $@

# Local version labels (torch's +cpu of a wheel on this machine's disk) are dropped: a pin must
# resolve on the package index, where "torch==2.13.0" also matches a local "2.13.0+cpu" file.
lock: test-setup  ## rewrite constraints.txt from the current virtualenv
	{ sed -n '1,2p' constraints.txt; $(BIN)/pip freeze --all | grep -vE '^(pip|setuptools|wheel)==' | sed -E 's/^([^=]+==[^+]+)\+.*$$/\1/'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

lint: test-setup  ## yamllint --strict, ansible-lint (production profile), ruff, vermin per place (scripts/check-pythons)
	@echo "$$(date +%T) lint: yamllint, ansible-lint, ruff, check-pythons"
	yamllint --strict .
	ansible-lint
	ruff check .
	ruff format --check .
	$(BIN)/python scripts/check-pythons
	@echo "$$(date +%T) lint: passed"

# The loop a contributor runs before every commit: everything that needs no Docker and no playbook
# run (the playbook-level tests are make unit's second half, about 15 minutes).
check: lint  ## the fast loop: lint, then tests/unit on both cores (about 1.5 minutes here)
	@echo "$$(date +%T) check: tests/unit on 2 workers"
	pytest tests/unit -q -n 2

# Coverage of ftdomain/ (the filters' code) from tests/unit/, which call it in-process; the
# playbook-level tests run without the tracer, which slowed their own Python by about 10 % (the
# in-process tests of ftnative, the lab model and the answers: 105 CPU-s with it, 94 without).
unit: test-setup  ## pytest: the filters' unit tests (with coverage), then the playbook-level tests on both cores
	@echo "$$(date +%T) unit: tests/unit with ftdomain coverage, then the rest on 2 workers"
	pytest tests/unit -q --cov=ftdomain --cov-report=term-missing --cov-fail-under=90
	pytest -m "not docker and not lab and not scale" -n 2 --dist loadfile --durations=20 --ignore=tests/unit

harness: tools  ## a Docker engine and the locally built base image
	scripts/ensure-docker
	scripts/build-base-image

molecule: harness test-setup  ## the tests that need Docker and every Molecule scenario (or SCENARIO=name), in two lanes
	scripts/docker-tests $(SCENARIO)

fresh-test: harness test-setup  ## `make lab` in a clean clone of HEAD on a fresh Debian 12 container, the lab's checks, then make lab-down
	pytest -m lab -p no:cacheprovider -s

# Unit and the harness as two jobs at once (each job's output whole, at its end): on a fresh
# machine the harness (apt, debootstrap) waits on the network and dpkg while unit's two workers
# compute. Then lint, the Docker tests, the fresh-machine test and the scenarios in two lanes, lint
# first in the shorter (beside unit, lint took 58 s of unit's processors for its own 70: both are
# CPU-bound; docs/testing.md).
test:  ## everything a reviewer runs: unit and the harness at once, then lint, the Docker tests, the fresh-machine test and every scenario in two lanes
	$(MAKE) --no-print-directory -j2 --output-sync=target unit harness
	scripts/docker-tests --fresh --lint $(SCENARIO)

# The toolchain's pip and the base image's debootstrap at once (neither needs the other; both
# need the tools, which the sub-make runs once first): on a fresh machine that overlaps about
# 50 s of each.
lab:  ## bring up the local lab fleet and serve a tiny model (README)
	$(MAKE) --no-print-directory -j2 setup harness
	scripts/lab up

bench: lab  ## the lab, then the serving benchmark: each layer's latency and throughput (docs/performance.md)
	ftfleet bench

# NVIDIA's AIPerf in a virtualenv of its own (it pins a newer stack than the project's tests).
BENCH_VENV ?= .bench-venv
AIPERF_VERSION ?= 0.13.0
$(BENCH_VENV)/.aiperf-$(AIPERF_VERSION):
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install --quiet "aiperf==$(AIPERF_VERSION)" pyyaml
	touch $@

overload-bench: lab $(BENCH_VENV)/.aiperf-$(AIPERF_VERSION)  ## the lab, then overload through the front with AIPerf: capacity, the tenants alone, then 1x, 2x and 5x of it from three keys (docs/performance.md, "Overload")
	$(BENCH_VENV)/bin/python -m benchmarks.overload --out docs/bench/overload.json
	$(BENCH_VENV)/bin/python -m benchmarks.overload --table docs/bench/overload.json

registry-bench: harness test-setup  ## the images and models stages on 1, 2 and 4 hosts, without and with a registry (docs/performance.md)
	$(BIN)/python scripts/registry-bench

lab-crash: setup  ## on the lab: kill lab-node1's tritonserver 3 times, then its gateway, under load of 200-token answers; then every gateway down (docs/operations.md)
	scripts/lab-crash --tokens 200 --ignore-eos --kills 3 --settle 10

lab-down: setup  ## remove everything `make lab` created
	scripts/lab down

clean:  ## remove the virtualenv and caches (images and containers stay)
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache .coverage
