"""Shared fixtures: isolated XDG dirs, a store path, and the real CLI in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.infra.influxd import VERSIONS
from tests.sshd import SSHServer
from tests.tmux import Tmux

ROOT = Path(__file__).resolve().parent.parent
pytest_plugins = ["tests.schema_check"]  # every emitted sample is checked against its declaration


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
