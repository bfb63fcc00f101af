# The two commands a new user runs first (README): `make demo` and `make test`.
# Both set up everything they need on a fresh machine (cached after the first time).
SHELL := /bin/bash
DT_CACHE ?= $(HOME)/.cache/distributetrain
DT_VENV ?= $(DT_CACHE)/venv
PYTHON := $(DT_VENV)/bin/python
PYTEST := $(PYTHON) -m pytest -ra --durations=15
export DT_CACHE DT_VENV

.PHONY: setup setup-kueue setup-all demo demo-queue test test-unit test-cluster bench cluster-up cluster-down clean-cluster

# What `make demo` needs; the optional parts only where they are used.
setup:
	bash scripts/setup.sh

setup-kueue:
	bash scripts/setup.sh kueue

setup-all:
	bash scripts/setup.sh kueue karpenter kube-router

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
	$(PYTEST) -n 2 tests/unit

bench: setup-all
	bash bench/run_all.sh

cluster-up: setup
	$(PYTHON) -m localcluster up --nodes gpu-a=4,gpu-b=2

cluster-down:
	$(PYTHON) -m localcluster down
