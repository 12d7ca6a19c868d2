"""The agent ends when told, whatever its collectors do: a real `db2vtop agent` process with a
collector that stops the event loop turning and one that blocks a thread forever."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from db2vtop.agent.core.model import SELF_MEASUREMENT
from db2vtop.agent.core.store import Store
from db2vtop.agent.runtime import Runtime
from db2vtop.agent.service import Signals
from tests.conftest import ROOT

GRACE_S = 1.0 + 5.0  # the longest collector timeout here (1 s) + the agent's 5 s margin, no sink


@pytest.fixture
def procs():
    started: list[subprocess.Popen] = []
    yield started
    for p in started:  # a failed test must not leave a spinning agent behind
        p.kill()
        p.wait()


def start(procs, tmp_path, mode: str, *args: str) -> tuple[subprocess.Popen, object]:
    cfg = tmp_path / "config.toml"
    cfg.write_text('[guest]\ninterval = "1s"\n')
    store = tmp_path / "metrics.db"
    log = (tmp_path / "agent.log").open("w")
    p = subprocess.Popen([sys.executable, "-m", "tests.infra.stuck_agent_proc", mode, "-c", str(cfg), "--store",
                          str(store), *args], cwd=ROOT, stderr=log, stdout=log)
    procs.append(p)
    return p, store


def nothing_lost(store) -> int:
    """Every guest cycle the runtime recorded as ok has its samples in the store (they are
    submitted together, so a lost batch shows as a difference)."""
    with Store(store) as s:
        ok = [r for r in s.rows(SELF_MEASUREMENT) if r.tags["collector"] == "guest" and r.fields["status"] == "ok"]
        cpu = [r for r in s.rows("guest_cpu") if r.tags.get("cpu") == "total"]
    assert ok and len(cpu) == len(ok), (len(cpu), len(ok))
    return len(ok)


def test_sigterm_ends_an_agent_whose_collectors_spin_and_block(procs, tmp_path):
    p, store = start(procs, tmp_path, "spin+block")
    time.sleep(7)  # a few guest cycles; from its fifth cycle on the stand-in spins
    sent = time.monotonic()
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=GRACE_S + 15) == 0
    took = time.monotonic() - sent
    log = (tmp_path / "agent.log").read_text()
    assert took < GRACE_S + 5, (took, log)
    assert "shutdown: still running" in log and "flushing the store" in log
    assert nothing_lost(store) >= 2
    assert len(log.splitlines()) < 40, log  # skipped cycles are summarised, not written one by one


def test_duration_is_honoured_with_a_collector_blocked_forever(procs, tmp_path):
    p, store = start(procs, tmp_path, "block", "--duration", "3")
    started = time.monotonic()
    assert p.wait(timeout=3 + GRACE_S + 15) == 0
    assert time.monotonic() - started < 3 + GRACE_S + 5
    assert nothing_lost(store) >= 2


def test_a_sighup_before_the_event_loop_runs_is_not_lost():
    """It arrives between the start line and the loop (a test sends it on seeing that line): the run it asks
    to end had not begun, so stop() found nothing to stop and the reload waited for the next signal."""
    saved = {sig: signal.getsignal(sig) for sig in Signals.NAMES}
    try:
        signals = Signals(None, None)  # a reload asks nothing of the pipeline
        signal.raise_signal(signal.SIGHUP)
        t0 = time.monotonic()
        assert signals.run(Runtime([], []), False, time.monotonic() + 10) is True
        assert time.monotonic() - t0 < 5
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
