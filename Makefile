# durableruns — the two commands: `make demo` runs the product, `make test` runs the tests.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
# Django 6 needs Python 3.12+; the machine's default python3 may be older, and pyenv
# shims of inactive versions do not run, so try each candidate and keep the first that works.
PYTHON_CANDIDATES := python3.14 python3.13 python3.12 python3 \
	$(shell ls -d $(HOME)/.pyenv/versions/3.1[2-9]*/bin/python3 /usr/local/bin/python3.1[2-9] 2>/dev/null | sort -rV)
PYTHON ?= $(shell for p in $(PYTHON_CANDIDATES); do \
	$$p -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1 \
	&& { command -v $$p; break; }; done)

TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/durableruns
# pytest-xdist worker N uses Redis db (this db + N): dbs 10-15 leave room for 6 workers.
TEST_REDIS_URL ?= redis://127.0.0.1:6379/10
# Parallel test processes (pytest-xdist). Most of the suite waits on workers, browsers and
# leases rather than computing, so more processes than cores pay off; `TEST_WORKERS=0`
# (or PYTEST_ARGS=-n0) runs serially. worksteal evens out the slow chaos files.
TEST_WORKERS ?= 3

.PHONY: demo test test-fast venv lint bench bench-quick clean

$(VENV)/.installed: pyproject.toml
	@test -n "$(PYTHON)" || { echo "Python 3.12 or newer is required (none found on PATH)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --group test -e .
	touch $@

venv: $(VENV)/.installed

# `make demo PORT=8001` when 8000 is taken.
PORT ?= 8000

demo: venv
	$(PY) manage.py demo --port $(PORT)

test: venv
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} REDIS_URL=$${REDIS_URL:-$(TEST_REDIS_URL)} \
		$(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal $(TEST_SELECT) $(PYTEST_ARGS)

# The inner loop: everything but the process-killing (chaos), browser (e2e) and
# production-sized (scale) tests. CI always runs `make test`.
test-fast: TEST_SELECT = -m "not chaos and not e2e and not scale"
test-fast: test

# Benchmarks (benchmarks/, never part of `make test`): the peers they compare with are
# an optional dependency group, so the product does not depend on them. They use their
# own databases (durableruns_bench*) on BENCH_POSTGRES_URL and Redis at BENCH_REDIS_URL.
$(VENV)/.bench-installed: $(VENV)/.installed pyproject.toml
	$(PY) -m pip install --quiet --group bench
	touch $@

bench: $(VENV)/.bench-installed
	$(PY) -m benchmarks $(BENCH_ARGS)

bench-quick: $(VENV)/.bench-installed
	$(PY) -m benchmarks --quick $(BENCH_ARGS)

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) var
