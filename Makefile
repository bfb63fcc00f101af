# The two commands a new user runs first (README): `make demo` and `make test`.
# Both set up everything they need on a fresh machine (cached after the first time).
SHELL := /bin/bash
DT_CACHE ?= $(HOME)/.cache/distributetrain
DT_VENV ?= $(DT_CACHE)/venv
PYTHON := $(DT_VENV)/bin/python
PYTEST := $(PYTHON) -m pytest -ra --durations=15
export DT_CACHE DT_VENV

.PHONY: setup setup-kueue setup-all demo demo-queue test test-unit test-cluster test-versions bench cluster-up cluster-down clean-cluster

# What `make demo` needs; the optional parts only where they are used.
setup:
	bash scripts/setup.sh

setup-kueue:
	bash scripts/setup.sh kueue

setup-all:
	bash scripts/setup.sh kueue karpenter kube-router dra

demo: setup
	$(PYTHON) scripts/demo.py

# Three jobs through one Kueue queue (Kueue built by setup, started for the demo).
demo-queue: setup-kueue
	$(PYTHON) scripts/demo_queue.py

# Every tier: unit, the local cluster itself, the manager against it (RBAC enforced),
# real Horovod training across pods, and the fault catalogue (scripts/test.sh says
# which run two at a time).
test: setup-all
	bash scripts/test.sh

test-unit:
	$(PYTEST) -n 3 tests/unit

# A smoke tier on each Kubernetes release the local cluster builds (1.34 to 1.37), each in a
# cluster of its own, then a table of the results (scripts/test-versions.sh; README). Not in
# `make test` (CI runs 1.34): it builds the other releases' control planes, 10-25 minutes each
# the first time.
test-versions: setup-all
	bash scripts/test-versions.sh

bench: setup-all
	bash bench/run_all.sh

cluster-up: setup
	$(PYTHON) -m localcluster up --nodes gpu-a=4,gpu-b=2

cluster-down:
	$(PYTHON) -m localcluster down
