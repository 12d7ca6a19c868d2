"""The real `db2vtop` command in a child process: agent --once, then query."""

from __future__ import annotations

import csv
import io
import json
import re
import signal
import subprocess
import sys
import time

import pytest

from db2vtop.agent.core.store import Store
from tests.conftest import ROOT, run_cli


def test_agent_once_then_query_prints_real_rows(store_path):
    r = run_cli("agent", "--once", "--store", str(store_path))
    assert r.returncode == 0, r.stderr
    q = run_cli("query", "--store", str(store_path), "--measurement", "guest_disk", "--format", "json")
    assert q.returncode == 0, q.stderr
    rows = json.loads(q.stdout)
    assert rows, "no guest_disk rows"
    for row in rows:
        assert set(row) == {"ts", "measurement", "tags", "fields"}
        assert row["measurement"] == "guest_disk" and isinstance(row["ts"], int)
        assert {"guest", "device", "type"} <= set(row["tags"])
        assert {"read_iops", "write_iops", "read_bytes_per_s", "write_bytes_per_s", "read_await_ms",
                "write_await_ms", "queue_size", "util_pct"} <= set(row["fields"])
        assert abs(row["ts"] - time.time_ns()) < 600 * 10**9
    for m in ("guest_cpu", "guest_mem", "guest_net", "db2vtop_collector", "db2vtop_agent"):
        assert json.loads(run_cli("query", "--store", str(store_path), "-m", m).stdout), m
    c = run_cli("query", "--store", str(store_path), "-m", "guest_cpu", "--format", "csv", "--since", "10m")
    table = list(csv.DictReader(io.StringIO(c.stdout)))
    total = next(r for r in table if r["cpu"] == "total")
    assert float(total["idle_pct"]) + float(total["busy_pct"]) <= 100.01 and total["load1"] != ""
    with Store(store_path) as s:
        kinds = {f.kind for f in s.facts()}
    assert {"guest", "guest_block_device", "guest_net_interface"} <= kinds


def test_query_errors(store_path, tmp_path):
    r = run_cli("query", "--store", str(tmp_path / "none.db"), "-m", "guest_cpu")
    assert r.returncode == 1 and "no store at" in r.stderr
    assert run_cli("agent", "--once", "--store", str(store_path)).returncode == 0
    r = run_cli("query", "--store", str(store_path), "-m", "guest_cpuu")
    assert r.returncode == 1 and "no measurement 'guest_cpuu'" in r.stderr and "guest_cpu" in r.stderr
    r = run_cli("query", "--store", str(store_path), "-m", "guest_cpu", "--since", "soon")
    assert r.returncode == 2 and "not a duration" in r.stderr
    old = run_cli("query", "--store", str(store_path), "-m", "guest_cpu", "--since", "0s")
    assert old.returncode == 0 and json.loads(old.stdout) == []


@pytest.mark.parametrize("args", [[], ["watch"], ["agent"], ["query"], ["config"], ["config", "check"],
                                  ["config", "init"], ["triage"], ["rules"], ["replay"], ["mark"]])
def test_help_on_every_command(args):
    r = run_cli(*args, "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: db2vtop")


def test_version():
    from db2vtop.agent import __version__
    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"db2vtop {__version__}"


def test_agent_stops_cleanly_on_sigterm_and_keeps_its_samples(store_path):
    p = subprocess.Popen([sys.executable, "-m", "db2vtop.agent", "agent", "--store", str(store_path)], cwd=ROOT,
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            time.sleep(0.5)
            if store_path.exists():
                with Store(store_path) as s:
                    if s.latest("guest_cpu"):
                        break
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 0, p.stderr.read()
    finally:  # a failed wait must not leave the agent running after the test
        p.kill()
        p.wait()
    with Store(store_path) as s:
        assert s.latest("guest_cpu") and s.latest("db2vtop_collector")


def test_agent_duration(store_path):
    """It stops by itself, and says so as its last line (the counterpart of its first)."""
    r = run_cli("agent", "--store", str(store_path), "--duration", "2")
    assert r.returncode == 0, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    into = re.escape(str(store_path))
    assert re.search(rf"db2vtop agent \(pid \d+\) stopped after \d+s: \d+ cycles, \d+ samples into {into}, "
                     r"0 collector errors; exit status 0$", last), r.stderr
    with Store(store_path) as s:
        assert s.latest("guest_mem")


def test_mark_goes_straight_into_an_idle_store(store_path):
    with Store(store_path, writer=True):  # recorded once; nobody writes it now
        pass
    r = run_cli("mark", "run 1 start", "--text", "TPC-like OLTP, 120 clients", "--store", str(store_path))
    assert r.returncode == 0 and "stored" in r.stdout and "no agent or watch is recording" in r.stdout
    with Store(store_path) as s:
        (m,) = s.annotations()
    assert (m.event, m.name, m.text, m.tags) == ("marker", "run 1 start", "TPC-like OLTP, 120 clients", {"by": "cli"})


def test_mark_is_queued_for_a_running_agent_which_records_it(store_path):
    p = subprocess.Popen([sys.executable, "-m", "db2vtop.agent", "agent", "--store", str(store_path)], cwd=ROOT,
                         stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not store_path.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        r = run_cli("mark", "run 2 start", "--store", str(store_path))
        assert r.returncode == 0 and "queued" in r.stdout
        names: list[str] = []
        while "run 2 start" not in names and time.monotonic() < deadline:
            time.sleep(0.3)
            with Store(store_path) as s:
                names = [a.name for a in s.annotations()]
        assert names == ["run 2 start"]
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=30)
        finally:
            p.kill()
            p.wait()


def test_replay_needs_recorded_samples(store_path):
    with Store(store_path, writer=True):
        pass
    r = run_cli("replay", "--store", str(store_path))
    assert r.returncode == 1 and "holds no samples" in r.stderr


def test_text_from_outside_never_reaches_the_terminal_raw(store_path):
    """A marker name (from the inbox, so from anyone who could write it) with escape sequences that
    would retitle the terminal and clear it: `report` prints them escaped."""
    name = "r1\x1b]0;PWNED-TITLE\x07\x1b[2J"
    with Store(store_path, writer=True):
        pass
    for edge in ("--begin", "--end"):
        assert run_cli("mark", name, edge, "--store", str(store_path)).returncode == 0
    r = run_cli("report", name, "--store", str(store_path))
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout
    assert "r1\\x1b]0;PWNED-TITLE\\x07\\x1b[2J" in r.stdout


def test_the_watch_log_is_private_and_never_written_through_a_link(isolated_home, tmp_path):
    """watch logs to a file (the TUI has the terminal); it was 0644 whatever the umask."""
    log = isolated_home / "state" / "db2vtop" / "watch.log"
    blocked = tmp_path / "file"
    blocked.write_text("")  # a store under a file cannot be made: watch stops before its UI, after its log
    r = run_cli("watch", "--store", str(blocked / "m.db"))
    assert r.returncode == 2 and "Not a directory" in r.stderr
    assert (log.stat().st_mode & 0o777) == 0o600
    log.unlink()
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    log.symlink_to(victim)
    r = run_cli("watch", "--store", str(blocked / "m.db"))
    assert r.returncode != 0 and victim.read_text() == "keep\n"
