# Berth: `make run` serves it, `make test` proves it. Both install what is missing.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
export DATA_DIR ?= $(CURDIR)/var
export UV_PROJECT_ENVIRONMENT := $(CURDIR)/.venv
PY := .venv/bin/python

.PHONY: run test check setup host venv sandbox-image lint test-sqlite test-postgres

# Served under supervisord, in the foreground (scripts/supervisord.conf): a process that
# dies is started again alone; Ctrl-C stops them all.
run: host venv ## install what is missing, then serve on http://localhost:8000
	@$(PY) manage.py prepare
	@exec scripts/supervise

test: ## the same set-up minus serving, lint, then the suite on SQLite and PostgreSQL
	@scripts/host-setup packages --for-tests
	@$(MAKE) --no-print-directory host venv sandbox-image
	@$(MAKE) --no-print-directory lint test-sqlite test-postgres

setup: host venv sandbox-image

host:
	@scripts/host-setup packages
	@scripts/host-setup docker
	@scripts/host-setup redis

# Bytecode compiled at install: where PYTHONDONTWRITEBYTECODE is set, every start would
# otherwise recompile Django, Twisted and Celery (seconds per process).
venv:
	@uv=$$(scripts/ensure-uv); py=$$(scripts/find-python); \
	  "$$uv" sync --frozen --quiet --compile-bytecode --python "$$py"

sandbox-image: venv
	@$(PY) manage.py build_sandbox_image

lint:
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy .
	.venv/bin/lint-imports

# JUNIT_DIR=<dir>: each pass also writes its JUnit XML there (passed ids compared across
# changes to the suite). Each pass says its wall time at its end.
# The suite runs on TEST_WORKERS pytest-xdist workers (most tests wait on containers, so
# more workers than cores pay), each with its own data dir, database, ports, queues and
# containers (config/settings_test.py); a file's tests stay on one worker (`loadfile`), so
# a module's stack is started once. The `alone` tests (they restart the shared dockerd,
# or measure pacing) run after them, by themselves.
TEST_WORKERS ?= 3
PYTEST_PARALLEL = $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

test-sqlite:
	@start=$$(date +%s); status=0; \
	  $(PYTEST_PARALLEL) -m "not alone and not postgres" \
	    $(if $(JUNIT_DIR),--junitxml=$(JUNIT_DIR)/sqlite.xml) || status=$$?; \
	  $(PY) -m pytest -m "alone and not postgres" \
	    $(if $(JUNIT_DIR),--junitxml=$(JUNIT_DIR)/sqlite-alone.xml) || status=$$?; \
	  echo "test-sqlite: $$(( $$(date +%s) - start )) s"; exit $$status

# The database-heavy tests again on a throwaway PostgreSQL cluster (not the Docker or
# browser ones, but those marked `postgres`, which need it: two hosts; daphne's, the
# `servers` mark, yes): started here, removed when the
# target ends, pass or fail. It listens on a Unix socket in its own fresh directory and
# on no TCP port, so a cluster left over by an interrupted run (or a second checkout
# testing at once) cannot collide. Each worker has a database of its own (pytest-django
# names it). Under /tmp: the postgres user must reach it, and a clone may sit in a
# private home.
test-postgres:
	@dir=$$(mktemp -d /tmp/berth-test-postgres-XXXXXXXX); \
	  trap 'scripts/host-setup postgres-stop "$$dir"' EXIT; \
	  scripts/host-setup postgres-start "$$dir"; \
	  start=$$(date +%s); status=0; \
	  DATABASE_URL="postgres://postgres@$${dir//\//%2F}/berth" \
	  $(PYTEST_PARALLEL) -m "(postgres or not docker) and not browser and not alone" \
	    $(if $(JUNIT_DIR),--junitxml=$(JUNIT_DIR)/postgres.xml) || status=$$?; \
	  echo "test-postgres: $$(( $$(date +%s) - start )) s"; exit $$status

# The daily loop (under a minute with mypy's cache warm): lint, then the tests that need
# no engine, daphne, browser, second process or PostgreSQL. `make test` before pushing.
check: venv lint
	@start=$$(date +%s); \
	  $(PY) -m pytest -n 2 -q -m "not docker and not servers and not browser and not alone and not postgres"; \
	  echo "check: $$(( $$(date +%s) - start )) s"
