"""A part of the agent that cannot go on ends the agent with a non-zero status, instead of leaving it
running blind: before, the store writer's thread died on its first unexpected error and the agent ran
on, storing nothing, and exited 0. A service manager restarts an agent that ends this way."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT
from tests.faults.agent import write_config


@pytest.mark.parametrize(("mode", "said"), [
    ("store", "store-writer cannot go on: StoreError:"),
    ("loop", "collector:breaks cannot go on: RuntimeError: the loop's own bookkeeping broke"),
])
def test_a_thread_that_cannot_go_on_ends_the_agent_with_status_1(tmp_path, mode, said):
    store = tmp_path / "m.db"
    cfg = write_config(tmp_path / "config.toml", store)
    started = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "tests.faults.broken_agent_proc", mode, "-c", str(cfg),
                        "--duration", "60"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr[-3000:]
    assert time.monotonic() - started < 30, "it ran on after the failure"
    assert said in r.stderr, r.stderr[-3000:]
    assert "db2vtop: stopped because a part of the agent failed:" in r.stderr
