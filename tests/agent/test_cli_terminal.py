"""The command line as a terminal shows it: the real `db2vtop` in a pty (tests/infra/pty_term.py), the pty its
controlling terminal, so Ctrl-C is the SIGINT a shell's foreground job gets.

- A source that cannot be read now (a vCenter refusing connections after an agent recorded its findings):
  the findings only it could renew are stale, triage says UNKNOWN and names the source on its first line.
- Ctrl-C while a source never answers (a TCP server on 127.0.0.1 that accepts and stays silent): the
  command ends with 130 and no traceback, long before the source's timeout.
- One onset for one incident: triage's first line and the Stack screen say the same start, or that it began
  before what was recorded.
- First contact: `config init -o` into a directory that does not exist yet, `mark` with a mistyped
  `--store`, a report of a run against the previous run of its name (text, and HTML in headless Chromium).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from db2vtop.agent.core.model import Fact, Finding, Sample, Severity
from db2vtop.agent.core.runs import BEGIN, END, edge_marker
from db2vtop.agent.core.store import Store
from tests.conftest import run_cli
from tests.infra.pty_term import Terminal
from tests.tui.test_tui_terminal import ROOT, db2vtop, env_for

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


def test_a_finding_judged_from_the_stored_inventory_of_a_source_down_is_stale_too(tmp_path):
    """N16's remainder: esx01's vCPU-to-thread ratio is judged from the host fact vCenter described before it
    went down. That inventory is the last one stored and only vCenter could renew it, so the warning is stale
    like the CPU-ready one judged from vCenter's samples: nothing is open, the status is UNKNOWN (exit 3), and
    JSON says when it went stale. Not a case of this rule: any finding judged from facts of a kind only the
    sources that failed describe."""
    store = recorded_store(tmp_path / "m.db", ended_s_ago=360)
    with Store(store, writer=True) as w:
        w.write(facts=[Fact("vsphere_host", {"vcenter": "vc1", "host": "esx01"},
                            {"cpu_threads": 16, "vcpus_powered_on": 28}, time.time_ns() - 900 * S)])
    config = vcenter_config(tmp_path / "vc.toml", refused_port())
    status, screen = run_in_terminal([*db2vtop(), "triage", "-c", str(config), "--store", str(store)],
                                     tmp_path / "home")
    first = next(line for line in screen.splitlines() if line.startswith("db2vtop triage:"))
    assert status == 3, screen
    assert first.startswith("db2vtop triage: UNKNOWN: source vsphere:vc1 could not be read"), first
    assert "1 critical, 1 warning findings stale since" in first and "0 critical, 0 warning open" in first, first
    stale = screen.split("Stale: open when their entity stopped reporting", 1)[1]
    assert "[WARNING] vcpu-le-threads" in stale and "\nFindings" not in screen, screen

    doc = json.loads(run_cli("triage", "-c", str(config), "--store", str(store), "--format", "json",
                             env={"VC1_PASSWORD": "secret"}).stdout)
    ratio = [f for f in doc["findings"] if f["rule"] == "vcpu-le-threads"]
    assert doc["status"] == "UNKNOWN" and len(ratio) == 1, doc
    assert ratio[0]["stale_since"] is not None and ratio[0]["resolved_at"] is None, ratio


def test_the_findings_screen_shows_a_stale_finding_as_stale(tmp_path):
    """The agent recorded the finding stale (its vCenter went quiet): the Findings screen lists it dimmed as
    `CRIT stale`, not as a current critical one, and counts it apart."""
    store = recorded_store(tmp_path / "m.db", ended_s_ago=360)
    with Store(store, writer=True) as w:
        last = w.time_range()[1]  # its newest sample: stale since then
        w.write(findings=[Finding("cpu-ready", Severity.CRITICAL, {"layer": "vm", "vcenter": "vc1", "vm": "db2prod02"},
                                  "db2prod02: CPU ready 15.0% per vCPU (8 vCPUs)",
                                  {"values": {"cpu_ready_pct": 15.0}, "samples": 30, "stale_since_ns": last},
                                  "why", "fix", [], last - 580 * S, last)])
    term = Terminal([*db2vtop(), "replay", "--store", str(store)], 120, 30, truecolor=False,
                    env=env_for(tmp_path / "home"), cwd=ROOT)
    try:
        term.wait(lambda s: " replay " in s and "Help" in s, 30, "the replay")
        term.send("\x1b[F")  # End: the recording's last moment, after the finding went stale
        term.wait(lambda s: "paused" in s.splitlines()[0], 20, "the end")
        term.send("3")
        screen = term.wait(lambda s: "cpu-ready" in s and " open, " in s, 30, "the Findings screen")
    finally:
        term.close()
    assert "0 open, 1 stale, 0 resolved in the window" in screen, screen
    row = next(line for line in screen.splitlines() if "cpu-ready" in line)
    assert "CRIT stale" in row, screen


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
    is bounded at 10 s), one line saying so, no traceback. A second Ctrl-C once that line is out changes nothing.
    (Not sooner: a terminal's ^C discards output the reader has not taken yet, as it would for a user.)"""
    config = vcenter_config(tmp_path / "hang.toml", silent_server, 'timeout = "120s"\n')
    term = Terminal([*db2vtop(), *command, "-c", str(config), "--store", str(tmp_path / "m.db")], 120, 40,
                    truecolor=False, env={**env_for(tmp_path / "home"), "VC1_PASSWORD": "secret"}, cwd=ROOT)
    try:
        term.wait_for(ready, 30)
        term.send("\x03")
        term.wait_for("db2vtop: interrupted", 10)
        with contextlib.suppress(OSError):  # it may have ended already
            term.send("\x03")
        status, screen = term.ended(10)
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
        status, screen = term.ended(10)
    finally:
        term.close()
    assert status == 130 and "db2vtop: interrupted" in screen, screen
    assert "Traceback" not in screen, screen


# --- one onset for one incident ----------------------------------------------------------------------------

def incident_store(path: Path, minutes: int, incident_minutes: int) -> tuple[int, int]:
    """`minutes` of 20 s vCenter samples up to now, VM db2prod02 at 15 % CPU ready per vCPU for the last
    `incident_minutes` (the whole recording when longer); the first hot sample's time and the last's."""
    end = time.time_ns() // (20 * S) * 20 * S
    steps = minutes * 3
    samples, onset = [], None
    for k in range(steps):
        ts = end - (steps - 1 - k) * 20 * S
        hot = (steps - 1 - k) * 20 < incident_minutes * 60
        onset = ts if hot and onset is None else onset
        for vm, ready in (("db2prod02", 15.0 if hot else 0.5), ("app01", 0.5)):
            samples.append(Sample("vsphere_vm", {"vcenter": "vc1", "vm": vm, "host": "esx01", "cluster": "prod"},
                                  {"cpu_ready_pct": ready, "cpu_usage_pct": 40.0, "cpu_costop_pct": 0.0,
                                   "mem_balloon_bytes": 0, "mem_swapped_bytes": 0, "vcpus": 8}, ts))
    facts = [Fact("vsphere_vm", {"vcenter": "vc1", "vm": vm}, {"host": "esx01", "num_cpu": 8}, end - steps * 20 * S)
             for vm in ("db2prod02", "app01")]
    with Store(path, writer=True) as store:
        store.write(samples, facts=facts)
    assert onset is not None
    return onset, end


def stack_screen_verdict(store: Path, end_ns: int, home: Path) -> str:
    """The Stack screen of VM db2prod02 at the end of the recording (`replay`, End, `:vm db2prod02`), 120x40:
    its VERDICT line."""
    term = Terminal([*db2vtop(), "replay", "--store", str(store)], 120, 40, truecolor=False, env=env_for(home),
                    cwd=ROOT)
    try:
        term.wait(lambda s: " replay " in s and "Help" in s, 30, "the replay")
        term.send("\x1b[F")  # End: the recording's last moment
        last = time.strftime("%H:%M:%S", time.gmtime(end_ns / S))
        term.wait(lambda s: last in s.splitlines()[0], 20, f"the end of the recording, {last}")
        term.send(":")
        term.wait_for("vm NAME")
        term.send("vm db2prod02\r")
        screen = term.wait(lambda s: "VERDICT" in s and "vm db2prod02" in s, 30, "the Stack screen's verdict")
    finally:
        term.close()
    return next(line for line in screen.splitlines() if "VERDICT" in line)


@pytest.mark.parametrize(("minutes", "incident", "words"), [
    (30, 8, "since {onset}, 8m"),  # began 8 minutes ago, in a 5-minute window: not the window's edge
    (30, 40, "since before {onset} (≥ 30m)"),  # began before anything recorded: no onset to give
], ids=["onset-before-the-window", "onset-before-the-data"])
def test_the_stack_screen_and_triage_give_one_onset(tmp_path, minutes, incident, words):
    """One incident, one onset: triage's first line and the Stack screen (window 5m) say the same start."""
    store = tmp_path / "m.db"
    onset_ns, end_ns = incident_store(store, minutes, incident)
    onset = time.strftime("%H:%M", time.gmtime(onset_ns / S))
    expected = words.format(onset=onset)
    status, screen = run_in_terminal([*db2vtop(), "triage", "--store", str(store), "-c", os.devnull],
                                     tmp_path / "home")
    first = next(line for line in screen.splitlines() if line.startswith("db2vtop triage:"))
    assert status == 2 and f"stack db2prod02: host {expected.replace(onset, onset + ' UTC')}" in first, first
    verdict = stack_screen_verdict(store, end_ns, tmp_path / "home")
    assert f"VERDICT  host {expected}:" in verdict, verdict


# --- first contact: config init, mark, report ----------------------------------------------------------------

def test_config_init_makes_the_missing_directory_private(tmp_path):
    """The README's first command on a fresh machine: ~/.config/db2vtop/ does not exist yet."""
    home = tmp_path / "home"
    home.mkdir()
    target = home / ".config" / "db2vtop" / "config.toml"
    status, screen = run_in_terminal([*db2vtop(), "config", "init", "-o", str(target)], home)
    assert status == 0 and f"wrote {target}; check it with: db2vtop config check -c {target}" in screen, screen
    assert [oct(p.stat().st_mode & 0o777) for p in (home / ".config", target.parent, target)] == \
        ["0o700", "0o700", "0o600"]
    status, screen = run_in_terminal([*db2vtop(), "config", "check", "-c", str(target)], home)
    assert status == 0 and ": OK (" in screen, screen


def test_mark_refuses_a_store_that_does_not_exist(tmp_path):
    """A mistyped --store: said, nothing made (no store, no directory); an existing store nobody records is
    marked, with that said."""
    home = tmp_path / "home"
    typo = tmp_path / "stores" / "metrcs.db"
    status, screen = run_in_terminal([*db2vtop(), "mark", "run 1", "--store", str(typo)], home)
    assert status == 1 and f"db2vtop: no store at {typo}; a marker goes into the store an agent or watch" in screen, \
        screen
    assert not typo.parent.exists()
    idle = tmp_path / "idle.db"
    with Store(idle, writer=True):
        pass
    status, screen = run_in_terminal([*db2vtop(), "mark", "run 1", "--store", str(idle)], home)
    assert status == 0, screen
    assert f"marker 'run 1' stored in {idle}; no agent or watch is recording this store" in screen, screen


def two_runs_of_one_name(path: Path) -> Path:
    t0 = 1_714_564_800 * S
    with Store(path, writer=True) as w:
        w.write([Sample("guest_cpu", {"guest": "g", "cpu": "total"}, {"busy_pct": 10.0 + k, "steal_pct": 0.0},
                        t0 + k * 5 * S) for k in range(200)],
                annotations=[edge_marker("bench", BEGIN, ts=t0 + 10 * S), edge_marker("bench", END, ts=t0 + 100 * S),
                             edge_marker("bench", BEGIN, tags={"command": "sleep 90"}, ts=t0 + 500 * S),
                             edge_marker("bench", END, tags={"exit_status": "0", "command": "sleep 90"},
                                         ts=t0 + 590 * S)])
    return path


def test_a_report_names_the_run_and_its_baseline_of_one_name_apart(tmp_path):
    """`report bench --baseline bench~1`: the text and the HTML (as headless Chromium reads it) name each run as
    `report --list` does; the HTML shows the command as code, not markdown back-ticks."""
    store = two_runs_of_one_name(tmp_path / "b.db")
    status, screen = run_in_terminal([*db2vtop(), "report", "bench", "--baseline", "bench~1", "--store", str(store)],
                                     tmp_path / "home", cols=200)
    lines = screen.splitlines()
    assert status == 0 and lines[0] == "db2vtop report: run bench against bench~1", screen
    assert lines[3].startswith("- baseline bench~1: 2024-05-01 12:00:10 UTC"), screen
    page = tmp_path / "r.html"
    status, screen = run_in_terminal([*db2vtop(), "report", "bench", "--baseline", "bench~1", "--store", str(store),
                                      "--format", "html", "-o", str(page)], tmp_path / "home")
    assert status == 0, screen
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "chromium is missing: tests/infra/install-deps.sh installs it"
    dom = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=60, check=True,
                         env={**os.environ, "HOME": str(tmp_path)}).stdout
    text = re.sub(r"<[^>]+>", "", dom)  # what the page says, as the browser parsed it
    assert "db2vtop report: run bench against bench~1" in text
    assert "time from each run's start: bench (run)bench~1 (baseline)" in text
    assert "command sleep 90)" in text and "<code>sleep 90</code>" in dom and "`" not in text
