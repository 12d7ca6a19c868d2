# db2vtop: `make run` starts the TUI on this machine, `make test` installs what the tests
# need and runs them. Everything lands in .venv/, build/ and ~/.cache/db2vtop/ (influxd 1.8.10,
# built once with `go install`); nothing is installed globally except Debian packages
# (openssh-server, sysstat, tmux, systemd) that the tests use as real peers.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test test-deps lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/db2vtop watch

test-deps:
	tests/infra/install-deps.sh
	tests/infra/build-influxd.sh

test: $(STAMP) test-deps
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: $(STAMP) test-deps
	$(PY) bench/store.py
	$(PY) bench/agent_overhead.py
	$(PY) bench/storage.py
	$(PY) bench/remote.py
	$(PY) bench/db2.py
	$(PY) bench/influx.py

clean:
	rm -rf $(VENV) build .pytest_cache
