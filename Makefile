# Quaymaster developer entry points.
#
#   make up         run the whole control plane locally (PostgreSQL and Redis from wheels)
#   make test       OS packages, lint, then every test tier (what CI runs)
#   make test-fast  every test not marked slow, without lint
#   make lint       ruff, ruff format --check, mypy, import-linter, squawk on the migrations
#   make bench      every benchmark, at its documented scale
#   make deps       OS packages the tests need (as root, with apt-get)

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
APT_PACKAGES := chromium pgbouncer runc postgresql-client busybox-static iproute2 gcc libc6-dev
PYTEST_ARGS ?=
# A chosen subset run a second time through PgBouncer (transaction pooling, as qm_app).
PGBOUNCER_TESTS := tests/e2e/test_rbac_api.py tests/e2e/test_tokens_api.py tests/e2e/test_cli.py \
  tests/integration/test_eviction.py tests/integration/test_watch_correctness.py

.PHONY: help install deps up lint test test-fast bench

help:
	@grep -E '^#   make ' Makefile | sed 's/^#   //'

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Reinstall only when pyproject.toml is newer than the stamp.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

# The change history's row trigger in C (ADR 0066), built into the embedded PostgreSQL. Without
# a C compiler the history keeps its PL/pgSQL trigger, which writes the same rows more slowly.
NATIVE := $(VENV)/.qm_history_ext
PG_CONFIG = $$($(BIN)/python -c "from app.store.backup import wheel_bin_dir; print(wheel_bin_dir() / 'pg_config')")
$(NATIVE): $(STAMP) ext/qm_history/qm_history.c ext/qm_history/qm_history--1.0.sql ext/qm_history/qm_history.control ext/qm_history/Makefile
	@if $(MAKE) -s -C ext/qm_history PG_CONFIG="$(PG_CONFIG)" install >/dev/null; then \
	  touch $(NATIVE); \
	else \
	  echo "install: the qm_history extension did not build; the history keeps its PL/pgSQL trigger"; \
	fi
	@$(MAKE) -s -C ext/qm_history PG_CONFIG="$(PG_CONFIG)" clean >/dev/null 2>&1 || true

install: $(STAMP) $(NATIVE)

deps:
	@if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	  echo "deps: not root or no apt-get; make sure these are installed: $(APT_PACKAGES)"; \
	  exit 0; \
	fi; \
	missing=""; \
	for pkg in $(APT_PACKAGES); do \
	  dpkg -s "$$pkg" >/dev/null 2>&1 || missing="$$missing $$pkg"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "deps: installing$$missing"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq >/dev/null; \
	  apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

up: install
	$(BIN)/python -m app.devstack.up

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m migrations.lint  # squawk on every migration's offline SQL, kept in build/sql

# pytest exits 5 when it collected no tests: that is a failure too.
define pytest
	@rc=0; $(2) $(BIN)/pytest $(1) || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi; \
	exit $$rc
endef

# The slowest tests are listed at the end, to see where the suite's time goes.
test: deps install lint
	$(call pytest,tests --durations=25 $(PYTEST_ARGS))
	@echo "The API's tests again, with the API servers and workers behind a real PgBouncer:"
	$(call pytest,$(PGBOUNCER_TESTS) $(PYTEST_ARGS),QM_TEST_PGBOUNCER=1)

test-fast: install
	$(call pytest,tests -m "not slow" $(PYTEST_ARGS))

# Every benchmark at its documented scale, one after another; each writes its figures to bench/results/ stamped with the commit.
bench: install
	$(BIN)/python bench/store/run.py
	$(BIN)/python -m bench.scheduler.run
	$(BIN)/python -m bench.scheduler.run --queued
	$(BIN)/python -m bench.scheduler.run --profile affinity
	$(BIN)/python bench/controllers/job.py
	$(BIN)/python bench/controllers/namespace_delete.py --runs 3
	$(BIN)/python -m bench.controllers.run --profile deployment
	$(BIN)/python -m bench.controllers.run --profile tasks
	$(BIN)/python -m bench.controllers.quota_cost
	$(BIN)/python -m bench.controllers.reclaim_cost
	$(BIN)/python -m bench.agents.run --usage-every 0
	$(BIN)/python -m bench.agents.run
	$(BIN)/python -m bench.agents.renew_cost
	$(BIN)/python -m bench.controllers.endpointslice
	$(BIN)/python -m bench.discovery.run
	$(BIN)/python -m bench.fairness.run
	$(BIN)/python -m bench.audit.run
	$(BIN)/python -m bench.authz.run
	$(BIN)/python -m bench.backup.run
	$(BIN)/python -m bench.pgbouncer.run
