"""Shared fixtures: isolated XDG dirs, a store path, and the real CLI in a subprocess."""

from __future__ import annotations

import ast
import inspect
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.infra.influxd import VERSIONS
from tests.infra.sshd import SSHServer
from tests.infra.tmux import Tmux

ROOT = Path(__file__).resolve().parent.parent
pytest_plugins = ["tests.schema_check"]  # every emitted sample is checked against its declaration

# --- the `peer` marker: which tests need a real peer (`make check` runs the others) ---------------------------
#: the helpers that start a real peer: sshd, tmux, a pty, the Go vSphere simulators, influxd, Alertmanager
PEER_MODULES = frozenset({"tests.infra.sshd", "tests.infra.tmux", "tests.infra.pty_term", "tests.infra.vsphere_sim",
                          "tests.infra.influxd", "tests.infra.alertmanager"})
#: this file's fixtures that start one (every test file sees them without importing their helper)
PEER_FIXTURES = frozenset({"sshd", "tmux", "influx_version"})
#: a peer a test runs by its program's name (found with shutil.which: headless chromium, sysstat's iostat)
PEER_PROGRAMS = ("chromium", "iostat")
_reaches: dict[str, bool] = {}


def _file(module: str) -> Path | None:
    """The source file of a module of this repository's tests (None for any other)."""
    base = ROOT.joinpath(*module.split("."))
    return next((f for f in (base.with_suffix(".py"), base / "__init__.py") if f.is_file()), None)


def _imports(module: str) -> set[str]:
    """The tests.* modules `module` imports, read from its source (nothing is run)."""
    path = _file(module)
    if path is None:
        return set()
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "tests"}
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "tests":
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names if _file(f"{node.module}.{a.name}")}
    return out - {"tests.conftest"}  # every test has it; its peer fixtures are told by name (PEER_FIXTURES)


def reaches_peer(module: str, seen: frozenset[str] = frozenset()) -> bool:
    """Whether `module` imports, itself or through the tests' helpers it imports, a helper that starts a peer."""
    if module not in _reaches:
        _reaches[module] = module in PEER_MODULES or any(
            reaches_peer(m, seen | {module}) for m in _imports(module) - seen - {module})
    return _reaches[module]


def needs_peer(item: pytest.Item) -> bool:
    """A test needs a peer when its file reaches a peer's helper, a fixture it uses starts one, or it looks for
    one's program to run it."""
    module = getattr(item, "module", None)
    if module is not None and reaches_peer(module.__name__):
        return True
    if PEER_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    function = getattr(item, "function", None)
    try:
        text = inspect.getsource(function) if function is not None else ""
    except (OSError, TypeError):
        text = ""
    return any(f'which("{p}' in text for p in PEER_PROGRAMS)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark `peer` every test that needs a real peer, so `make check` (-m "not peer") runs the rest."""
    for item in items:
        if needs_peer(item):
            item.add_marker(pytest.mark.peer)


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Never read or write the developer's own config, store or logs, and never send the tests' calls to
    their 127.0.0.1 peers through a proxy of the developer's environment (a vCenter session honours it)."""
    home = tmp_path_factory.mktemp("xdg")
    for var, sub in (("XDG_CONFIG_HOME", "config"), ("XDG_DATA_HOME", "data"), ("XDG_STATE_HOME", "state")):
        monkeypatch.setenv(var, str(home / sub))
    for var in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv(var.upper(), raising=False)
    return home


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch):
    """Local time is UTC for this test (rendered times are compared), whatever the machine's zone."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture(params=VERSIONS)
def influx_version(request: pytest.FixtureRequest) -> str:
    """Each InfluxDB test runs against every server version the agent supports (tests/infra/influxd.py)."""
    return request.param


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "metrics.db"


def run_cli(*args: str, timeout: float = 60, env: dict[str, str] | None = None,
            input: str | None = None) -> subprocess.CompletedProcess:
    """The real `db2vtop` entry point in a child process."""
    return subprocess.run([sys.executable, "-m", "db2vtop.agent", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, input=input)


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> SSHServer:
    """A real sshd on 127.0.0.1 for the whole session (started on first use)."""
    server = SSHServer(tmp_path_factory.mktemp("sshd"))
    server.setup()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def tmux(tmp_path: Path) -> Tmux:
    """A tmux server of this test's own, killed at the end whatever happens."""
    t = Tmux(tmp_path)
    yield t
    t.kill()
