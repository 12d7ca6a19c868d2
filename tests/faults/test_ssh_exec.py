"""An SSH server that accepts `exec` and never answers it (tests/faults/hostile_ssh.py), against the real
agent: a remote guest and esxtop share one [[ssh]] target with one session slot, and the server never
answers esxtop's exec request.

Before: paramiko's exec_command waited for the answer with no timeout, before the command's own deadline
began; esxtop's worker stayed there for good holding the target's only session, its cycles were
"skipped" for the rest of the run, and the remote guest sharing the target starved. Now every command is
one deadline from the wait for a session to the exit status, its channel closed from outside when it
passes: esxtop's cycles fail saying so, and the remote guest's samples keep coming.
"""

from __future__ import annotations

import itertools

from db2vtop.agent.core.model import SELF_MEASUREMENT
from db2vtop.agent.core.store import Store
from tests.faults.agent import start, wait_seconds, write_config
from tests.faults.hostile_ssh import HostileSSH

RUN_S = 20


def test_an_exec_never_answered_times_out_and_the_targets_other_collectors_keep_working(tmp_path):
    with HostileSSH(tmp_path / "ssh", silent=r"^esxtop ") as server:
        store = tmp_path / "m.db"
        cfg = write_config(tmp_path / "c.toml", store, extra=f"""
[[ssh]]
name = "db1"
host = "127.0.0.1"
port = {server.port}
user = "monitor"
key_file = "{server.client_key}"
known_hosts = "{server.known_hosts}"
max_sessions = 1
[[remote_guest]]
ssh = "db1"
os = "linux"
interval = "1s"
timeout = "4s"
[[esxtop]]
name = "esx1"
ssh = "db1"
interval = "5s"
timeout = "2s"
""")
        agent = start(cfg, store, tmp_path / "agent.log", "--duration", str(RUN_S))
        try:
            wait_seconds(store, 3)
            rc = agent.wait(RUN_S + 60)
        finally:
            agent.kill()
        log = agent.text()
        assert rc == 0, log[-3000:]
        assert server.unanswered >= 2, server.commands  # esxtop asked more than once: its worker was free again
        assert "after the stop" not in log, log[-3000:]  # the stop found nothing stuck
        with Store(store) as s:
            remote = sorted(r.ts / 1e9 for r in s.rows("guest_cpu", 0) if r.tags.get("guest") == "db1"
                            and r.tags.get("cpu") == "total")
            esxtop = [r.fields for r in s.rows(SELF_MEASUREMENT, 0) if r.tags["collector"] == "esxtop:esx1"]
    statuses = [f["status"] for f in esxtop]
    assert statuses and "skipped" not in statuses and set(statuses) <= {"error", "timeout"}, esxtop
    assert all("esxtop timed out after" in f["last_error"] for f in esxtop), esxtop
    # the remote guest never starved: samples across the whole run, no hole longer than esxtop's hold and a cycle
    assert remote and remote[-1] - remote[0] >= RUN_S - 8, remote
    holes = [(a, b) for a, b in itertools.pairwise(remote) if b - a > 5]
    assert not holes, holes
