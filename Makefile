# db2vtop: `make run` starts the TUI on this machine, `make test` installs what the tests
# need and runs them. Everything lands in .venv/, build/ and ~/.cache/db2vtop/ (influxd 1.8.10 and
# 2.7.12, Alertmanager, each built once from its Go module); nothing is installed globally except Debian packages
# (openssh-server, sysstat, tmux, systemd, chromium) that the tests use as real peers.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-run
# most tests wait on a peer or a child process, so more workers than cores keeps both cores busy
TEST_WORKERS ?= 4

.PHONY: run check test test-ready test-deps lint docs-check bench snapshots clean vsphere-sim vcsim-models wheelhouse

# `make run` installs what running needs (db2vtop and its runtime dependencies); the test extras
# (ibm_db's CLI driver, ruff, hypothesis, pyte, ...: most of the venv's size) come with `make test`.
# One line says what happens; setuptools' notice on every editable install (a block of asterisks that
# reads as an error) is not shown: PYTHONWARNINGS reaches pip's build of the package. Errors still are.
PIP := PYTHONWARNINGS=ignore $(PY) -m pip --disable-pip-version-check
$(RUN_STAMP): pyproject.toml setup.py
	@echo "installing db2vtop and what it needs to run into $(VENV)/ (once)..."
	@$(PYTHON) -m venv $(VENV)
	@$(PIP) install --quiet --upgrade pip
	@$(PIP) install --quiet -e .
	@touch $(RUN_STAMP)

$(STAMP): pyproject.toml $(RUN_STAMP)
	@echo "installing the test tools into $(VENV)/ (once)..."
	@$(PIP) install --quiet -e '.[test]'
	@touch $(STAMP)

run: $(RUN_STAMP)
	$(VENV)/bin/db2vtop watch

# The peers each build from its own Go module (and influxd 2.7's Flux from its crates): independent, so
# `make test` builds them side by side with the venv (their downloads overlap; each build takes its own lock).
PEERS := peer-debs peer-influxd peer-influxd2 peer-alertmanager
.PHONY: $(PEERS)
peer-debs:
	tests/infra/install-deps.sh
peer-influxd:
	tests/infra/build-influxd.sh
peer-influxd2:
	tests/infra/build-influxd2.sh
peer-alertmanager:
	tests/infra/build-alertmanager.sh

test-deps: $(PEERS)

# The Go vSphere scenario simulator (tests/infra/vsphere-sim, govmomi pinned in its go.mod).
# Go's build and module caches make a rebuild with unchanged sources a no-op.
VSPHERE_SIM := build/vsphere-sim
$(VSPHERE_SIM): tests/infra/vsphere-sim/go.mod tests/infra/vsphere-sim/go.sum $(wildcard tests/infra/vsphere-sim/*.go)
	cd tests/infra/vsphere-sim && GOFLAGS=-buildvcs=false go build -trimpath -o ../../../$(VSPHERE_SIM) .

vsphere-sim: $(VSPHERE_SIM)

# govmomi's own simulator models, unpatched (tests/infra/vcsim-models, the same govmomi pinned in its go.mod).
VCSIM_MODELS := build/vcsim-models
$(VCSIM_MODELS): tests/infra/vcsim-models/go.mod tests/infra/vcsim-models/go.sum $(wildcard tests/infra/vcsim-models/*.go)
	cd tests/infra/vcsim-models && GOFLAGS=-buildvcs=false go build -trimpath -o ../../../$(VCSIM_MODELS) .

vcsim-models: $(VCSIM_MODELS)

# The wheels of every runtime dependency and of setuptools: tests/test_packaging.py builds
# db2vtop's wheel and installs it into a clean venv from here, offline, as a user would.
WHEELHOUSE := build/wheelhouse/.complete
$(WHEELHOUSE): pyproject.toml setup.py $(STAMP)
	rm -rf build/wheelhouse
	$(PY) -m pip wheel --quiet --disable-pip-version-check -w build/wheelhouse . 'setuptools>=77'
	rm -rf build/wheelhouse/db2vtop-*.whl build/lib build/bdist.*
	touch $@

wheelhouse: $(WHEELHOUSE)

# What the tests need, built side by side by `make test` (after every variable it names is defined).
test-ready: $(STAMP) test-deps $(VSPHERE_SIM) $(VCSIM_MODELS) $(WHEELHOUSE)

test:
	$(MAKE) --no-print-directory -j4 test-ready
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(PY) -m tests.docs_check
	$(PY) -m pytest -q --durations=30 -n $(TEST_WORKERS) --dist loadfile -m 'not serial'
	$(PY) -m pytest -q -m serial

# The inner loop (under 2 minutes on 2 cores): lint, import layers, the docs and every test that needs no
# real peer (sshd, tmux or a pty, influxd, Alertmanager, a vSphere simulator, chromium: tests/conftest.py
# marks those `peer` by what they import and use). `make test` runs everything.
check: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(PY) -m tests.docs_check
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m 'not peer and not serial'

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

# The docs name every config key and CLI option of the code (and no other); TOML examples load.
docs-check: $(STAMP)
	$(PY) -m tests.docs_check

BENCHES := store agent_overhead storage remote db2 vsphere vsphere_vs_telegraf triage report influx fleet_influx tui
bench: $(STAMP) test-deps $(VSPHERE_SIM)
	for b in $(BENCHES); do $(PY) bench/$$b.py || exit 1; done

# Regenerate the TUI's SVG snapshots after a deliberate change (Textual upgrade, new layout);
# review them (open the SVGs in a browser) before committing.
snapshots: $(STAMP)
	$(PY) -m pytest -q tests/tui/test_tui_snapshots.py --snapshot-update

clean:
	rm -rf $(VENV) build .pytest_cache
