"""The command line as a terminal shows it: the real `db2vtop` in a pty (tests/pty_term.py), the pty its
controlling terminal, so Ctrl-C is the SIGINT a shell's foreground job gets.

- A source that cannot be read now (a vCenter refusing connections after an agent recorded its findings):
  the findings only it could renew are stale, triage says UNKNOWN and names the source on its first line.
- Ctrl-C while a source never answers (a TCP server on 127.0.0.1 that accepts and stays silent): the
  command ends with 130 and no traceback, long before the source's timeout.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from db2vtop.agent.core.model import Fact, Sample
from db2vtop.agent.core.store import Store
from tests.conftest import run_cli
from tests.pty_term import Terminal
from tests.test_tui_terminal import ROOT, db2vtop, env_for

S = 10**9


def refused_port() -> int:
    """A port on 127.0.0.1 nothing listens on: connecting to it is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vcenter_config(path: Path, port: int, extra: str = "") -> Path:
    path.write_text(f'[guest]\nenabled = false\n[[vcenter]]\nname = "vc1"\nurl = "https://127.0.0.1:{port}/sdk"\n'
                    f'user = "monitor"\npassword_env = "VC1_PASSWORD"\nverify_tls = false\n{extra}')
    return path


def recorded_store(path: Path, ended_s_ago: float) -> Path:
    """What an agent recorded of vCenter vc1 until `ended_s_ago`: 10 minutes of 20 s samples, VM db2prod02
    at 15 % CPU ready per vCPU (a critical cpu-ready finding), app01 healthy."""
    end = time.time_ns() - int(ended_s_ago * S)
    samples = []
    for k in range(30):
        ts = end - (29 - k) * 20 * S
        for vm, ready in (("db2prod02", 15.0), ("app01", 0.5)):
            samples.append(Sample("vsphere_vm", {"vcenter": "vc1", "vm": vm, "host": "esx01", "cluster": "prod"},
                                  {"cpu_ready_pct": ready, "cpu_usage_pct": 40.0, "cpu_costop_pct": 0.0,
                                   "mem_balloon_bytes": 0, "mem_swapped_bytes": 0, "vcpus": 8}, ts))
    facts = [Fact("vsphere_vm", {"vcenter": "vc1", "vm": vm}, {"host": "esx01", "num_cpu": 8}, end - 600 * S)
             for vm in ("db2prod02", "app01")]
    with Store(path, writer=True) as store:
        store.write(samples, facts=facts)
    return path


def run_in_terminal(argv: list[str], home: Path, cols: int = 400, rows: int = 60) -> tuple[int, str]:
    """The command in a pty to its end: its exit status and the screen."""
    term = Terminal(argv, cols, rows, truecolor=False, env={**env_for(home), "VC1_PASSWORD": "secret"}, cwd=ROOT)
    try:
        status = term.exited(60)
        term.reader.join(5)
        return status, "\n".join(line.rstrip() for line in term.lines())
    finally:
        term.close()


def test_a_vcenter_down_after_its_findings_makes_them_stale_and_triage_unknown(tmp_path):
    """The review's 3 a.m. case: the store holds a critical CPU-ready finding recorded until 6 minutes ago, and
    vCenter now refuses connections. Nothing renewed the finding, so it is stale, not CRITICAL; the status is
    UNKNOWN (exit 3) and the first line names the source that is down."""
    store = recorded_store(tmp_path / "m.db", ended_s_ago=360)
    config = vcenter_config(tmp_path / "vc.toml", refused_port())
    status, screen = run_in_terminal([*db2vtop(), "triage", "-c", str(config), "--store", str(store)],
                                     tmp_path / "home")
    first = next(line for line in screen.splitlines() if line.startswith("db2vtop triage:"))  # after the progress
    assert status == 3, screen
    assert first.startswith("db2vtop triage: UNKNOWN: source vsphere:vc1 could not be read (vcenter vc1: cannot "
                            "reach"), screen
    assert "1 critical finding stale since" in first and "0 critical, 0 warning open" in first, screen
    assert "Stale: open when their entity stopped reporting" in screen and "[CRITICAL] cpu-ready" in screen
    assert "\nFindings" not in screen, screen  # not listed as current

    doc = json.loads(run_cli("triage", "-c", str(config), "--store", str(store), "--format", "json",
                             env={"VC1_PASSWORD": "secret"}).stdout)
    assert doc["status"] == "UNKNOWN" and "vsphere:vc1" in doc["failed_sources"]
    ready = [f for f in doc["findings"] if f["rule"] == "cpu-ready"]
    assert len(ready) == 1 and ready[0]["stale_since"] is not None and ready[0]["resolved_at"] is None


def test_a_vcenter_down_with_a_fresh_store_keeps_the_findings_current(tmp_path):
    """The other side: an agent recorded the finding a moment ago (its sample period has not passed), so it is
    current and CRITICAL outranks the blind spot; the first line still names the source that is down."""
    store = recorded_store(tmp_path / "m.db", ended_s_ago=5)
    config = vcenter_config(tmp_path / "vc.toml", refused_port())
    r = run_cli("triage", "-c", str(config), "--store", str(store), env={"VC1_PASSWORD": "secret"})
    first = r.stdout.splitlines()[0]
    assert r.returncode == 2, r.stdout
    assert first.startswith("db2vtop triage: CRITICAL: 1 critical, 0 warning open; source vsphere:vc1 could not "
                            "be read"), first
    assert "stale" not in first


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that accepts every connection and never says a word (a hung vCenter)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not done.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        done.set()
        thread.join(5)
        for c in held:
            c.close()
        server.close()


@pytest.mark.parametrize(("command", "ready"), [
    (["triage"], "collecting now from vsphere:vc1"),
    (["stacks"], "describing vsphere:vc1"),
    (["agent", "--once"], "agent (pid"),
])
def test_ctrl_c_ends_a_command_waiting_on_a_silent_vcenter(tmp_path, silent_server, command, ready):
    """Ctrl-C while the vCenter (timeout 120 s) has not answered: exit 130 well before that timeout (the wait
    is bounded at 10 s), one line saying so, no traceback. A second Ctrl-C right after changes nothing."""
    config = vcenter_config(tmp_path / "hang.toml", silent_server, 'timeout = "120s"\n')
    term = Terminal([*db2vtop(), *command, "-c", str(config), "--store", str(tmp_path / "m.db")], 120, 40,
                    truecolor=False, env={**env_for(tmp_path / "home"), "VC1_PASSWORD": "secret"}, cwd=ROOT)
    try:
        term.wait_for(ready, 30)
        term.send("\x03")
        term.send("\x03")
        status = term.exited(10)
        term.reader.join(5)
        screen = term.text()
    finally:
        term.close()
    assert status == 130, screen
    assert "db2vtop: interrupted" in screen, screen
    assert "Traceback" not in screen and "Exception ignored" not in screen, screen


def test_ctrl_c_ends_config_check_blocked_on_its_file(tmp_path):
    """`config check` of a named pipe nobody writes (it waits in open(2)): Ctrl-C ends it with 130, no traceback."""
    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)
    term = Terminal([*db2vtop(), "config", "check", "-c", str(fifo)], 120, 20, truecolor=False,
                    env=env_for(tmp_path / "home"), cwd=ROOT)
    try:
        wchan = Path(f"/proc/{term.proc.pid}/wchan")
        deadline = time.monotonic() + 30
        while wchan.read_text() != "wait_for_partner":  # the kernel's wait for the pipe's other end
            assert time.monotonic() < deadline, f"config check never waited on the pipe: {term.text()}"
            time.sleep(0.05)
        term.send("\x03")
        status = term.exited(10)
        term.reader.join(5)
        screen = term.text()
    finally:
        term.close()
    assert status == 130 and "db2vtop: interrupted" in screen, screen
    assert "Traceback" not in screen, screen
