"""Benchmark runs: `db2vtop run` around a real command while a real agent records this machine,
`db2vtop report` of recorded runs against a baseline, and the HTML report in headless Chromium."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from db2vtop.agent.core.events import event_annotation
from db2vtop.agent.core.model import Finding, Sample
from db2vtop.agent.core.runs import (
    BEGIN,
    END,
    RunNotFoundError,
    baseline_for,
    edge_marker,
    find_run,
    previous_run,
    runs,
)
from db2vtop.agent.core.store import Store, StoreError
from db2vtop.checks.triage import EVENTS_LISTED
from tests.conftest import ROOT, run_cli
from tests.infra.png import count_colour, non_white, read_png

S = 10**9


# --- runs from markers ----------------------------------------------------------------

def test_runs_are_found_by_name_latest_first_open_or_between_two_markers():
    from db2vtop.agent.core.model import Annotation

    marks = [edge_marker("oltp", BEGIN, ts=10), edge_marker("oltp", END, ts=20),
             Annotation("marker", "load start", ts=25), edge_marker("oltp", BEGIN, ts=30),
             Annotation("marker", "oltp end", ts=40),  # typed by hand in the TUI: found by its name
             Annotation("marker", "load stop", ts=45), Annotation("reset", "oltp begin", ts=47),  # not a marker
             edge_marker("batch", BEGIN, ts=50)]
    run = find_run(marks, "oltp")
    assert (run.begin_ns, run.end_ns, run.open) == (30, 40, False)
    assert (previous_run(marks, run).begin_ns, previous_run(marks, run).end_ns) == (10, 20)
    assert previous_run(marks, find_run(marks[:2], "oltp")) is None
    batch = find_run(marks, "batch")
    assert batch.open and batch.until(99) == 99 and batch.duration_s(50 + 3 * S) == 3.0
    pair = find_run(marks, "load start..load stop")
    assert (pair.begin_ns, pair.end_ns) == (25, 45)
    done = edge_marker("oltp", END, tags={"exit_status": "3", "command": "x"}, ts=60)
    assert find_run([*marks, done], "oltp").exit_status is None  # the open run's own end is at 40
    assert find_run([marks[0], done], "oltp").exit_status == 3
    assert find_run([marks[0], done], "oltp begin..oltp end").exit_status is None  # a span of two markers
    assert [(r.name, r.begin_ns, r.end_ns) for r in runs(marks)] == [("oltp", 10, 20), ("oltp", 30, 40),
                                                                     ("batch", 50, None)]
    with pytest.raises(RunNotFoundError, match=r"no run named 'nope'; runs: batch, oltp"):
        find_run(marks, "nope")
    with pytest.raises(RunNotFoundError, match=r"no marker 'load start' after a marker 'load stop'"):
        find_run(marks, "load stop..load start")
    with pytest.raises(RunNotFoundError, match=r"no marker named 'x'"):
        find_run(marks, "x..load stop")


def test_a_runs_own_name_as_baseline_means_its_previous_run_and_name_tilde_n_goes_back():
    marks = [edge_marker("bench", BEGIN, ts=10), edge_marker("bench", END, ts=20),
             edge_marker("bench", BEGIN, ts=30), edge_marker("bench", END, ts=40),
             edge_marker("other", BEGIN, ts=45), edge_marker("other", END, ts=48),
             edge_marker("bench", BEGIN, ts=50), edge_marker("bench", END, ts=60)]
    latest = find_run(marks, "bench")
    assert latest.begin_ns == 50 and find_run(marks, "bench~0").begin_ns == 50
    assert find_run(marks, "bench~1").begin_ns == 30 and find_run(marks, "bench~2").begin_ns == 10
    assert find_run(marks, "bench~1").name == "bench"
    with pytest.raises(RunNotFoundError, match=r"run 'bench' has 3 runs recorded: 'bench~3' goes back further"):
        find_run(marks, "bench~3")
    assert baseline_for(marks, latest, "bench", previous=False).begin_ns == 30  # the previous, not itself
    assert baseline_for(marks, find_run(marks, "bench~1"), "bench", previous=False).begin_ns == 10
    assert baseline_for(marks, latest, "bench~2", previous=False).begin_ns == 10
    assert baseline_for(marks, latest, None, previous=True).begin_ns == 30
    assert baseline_for(marks, latest, None, previous=False) is None
    with pytest.raises(RunNotFoundError, match="is the run being reported itself"):
        baseline_for(marks, latest, "bench~0", previous=False)
    with pytest.raises(RunNotFoundError, match="has no earlier run"):
        baseline_for(marks, find_run(marks, "bench~2"), "bench", previous=False)


def test_report_list_and_a_baseline_of_the_same_name(tmp_path):
    store = tmp_path / "b.db"
    with Store(store, writer=True) as w:
        t0 = 1_714_564_800 * S
        w.write([Sample("guest_cpu", {"guest": "g", "cpu": "total"}, {"busy_pct": 10.0 + k, "steal_pct": 0.0},
                        t0 + k * 5 * S) for k in range(200)],
                annotations=[edge_marker("bench", BEGIN, ts=t0 + 10 * S), edge_marker("bench", END, ts=t0 + 100 * S),
                             edge_marker("bench", BEGIN, tags={"command": "sleep 90"}, ts=t0 + 500 * S),
                             edge_marker("bench", END, tags={"exit_status": "0"}, ts=t0 + 590 * S)])
    listed = run_cli("report", "--list", "--store", str(store))
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].startswith("bench ") and "2024-05-01 12:08:20 UTC  90 s, exit status 0  sleep 90" in lines[0]
    assert lines[1].startswith("bench~1 ") and "2024-05-01 12:00:10 UTC  90 s" in lines[1]
    r = run_cli("report", "bench", "--baseline", "bench", "--store", str(store), "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["baseline"]["begin"].startswith("2024-05-01T12:00:10") and doc["run"]["begin"].startswith(
        "2024-05-01T12:08:20")
    busy = doc["delta"]["stacks"]
    assert all(v["change_pct"] != 0 for st in busy.values() for fig in st.get("guest", {}).values()
               for v in [fig] if fig["unit"] == "%" and fig["run"])  # not the run against itself
    same = run_cli("report", "bench", "--baseline", "bench~0", "--store", str(store))
    assert same.returncode == 1 and "is the run being reported itself" in same.stderr
    none = run_cli("report", "--store", str(store))
    assert none.returncode == 2 and "report --list" in none.stderr


def test_what_changed_ignores_moves_under_the_units_floor():
    from db2vtop.checks.report import moved_enough

    assert not moved_enough("%", 0.03, 0.0)  # CPU steal 0 -> 0.03 %: "new", but noise
    assert moved_enough("%", 37.2, 11.3)  # CPU busy +230 %
    assert not moved_enough("ms", 0.9, 0.6) and moved_enough("ms", 12.0, 2.0)
    assert not moved_enough("%", 50.0, 48.0)  # over the floor but under 10 %


# --- a recorded fleet: two runs of one stack ------------------------------------------

LUN, LUN2 = "naa.600a098038303053", "naa.600a0980383030ff"
BASE = (1_700_000_000 * S + 5 * S, 1_700_000_000 * S + 605 * S)
RUN = (1_700_000_000 * S + 1205 * S, 1_700_000_000 * S + 1805 * S)
MOVED = 1_700_000_000 * S + 1500 * S  # the VM moves from esx01 to esx02 during the run
CONFIG = ('[guest]\nenabled = false\n[[vcenter]]\nname = "vc1"\nurl = "https://127.0.0.1:1/sdk"\nuser = "u"\n'
          'password_env = "DB2VTOP_TEST_NONE"\n'
          '[[ssh]]\nname = "db2prod01"\nhost = "127.0.0.1"\nport = 1\nuser = "db2inst1"\n'
          '[[ssh]]\nname = "netapp"\nhost = "127.0.0.1"\nport = 1\nuser = "admin"\n'
          '[[db2]]\nname = "prod"\nssh = "db2prod01"\ndatabase = "PROD"\n'
          '[[storage]]\nname = "netapp1"\nkind = "ontap"\nssh = "netapp"\n'
          '[[stack]]\nname = "prod"\ndb2 = "prod"\nvm = "db2prod01"\nvcenter = "vc1"\nguest = "db2prod01"\n'
          'storage = ["netapp1"]\n')


def _fleet(path: Path) -> None:
    """Samples every 20 s: a healthy baseline, then a run where DB2 commits less, its log writes
    slow down and the hypervisor queues; another VM's LUN on the same host is far worse all along,
    and the hosts' LUN figures while the VM was elsewhere are worse still (both must stay out)."""
    t0 = 1_700_000_000 * S
    rows = []
    for i in range(-2, 95):
        ts = t0 + i * 20 * S
        in_run = ts > RUN[0] - 20 * S
        host = "esx02" if ts >= MOVED else "esx01"
        db2 = {"db2": "prod", "database": "PROD", "member": "0"}
        rows += [
            Sample("db2_database", db2, {"commits_per_s": 500.0 if in_run else 1000.0, "lock_wait_pct": 1.0,
                                         "log_disk_wait_pct": 40.0 if in_run else 5.0}, ts),
            Sample("db2_log", db2, {"log_write_ms": 4.0 if in_run else 0.8}, ts),
            Sample("db2_bufferpool", {**db2, "bufferpool": "IBMDEFAULTBP"}, {"hit_pct": 99.0}, ts),
            Sample("db2_bufferpool", {**db2, "bufferpool": "BP32K"}, {"hit_pct": 95.0}, ts),
            Sample("guest_cpu", {"guest": "db2prod01", "cpu": "total"}, {"busy_pct": 40.0}, ts),
            Sample("guest_cpu", {"guest": "db2prod01", "cpu": "0"}, {"busy_pct": 99.0}, ts),
            Sample("guest_disk", {"guest": "db2prod01", "device": "sdb", "type": "disk"},
                   {"write_bytes_per_s": 100e6, "write_await_ms": 5.0 if in_run else 1.0}, ts),
            Sample("guest_disk", {"guest": "db2prod01", "device": "sdc", "type": "disk"},
                   {"write_bytes_per_s": 50e6, "write_await_ms": 2.0}, ts),
            Sample("guest_disk", {"guest": "db2prod01", "device": "sdb1", "type": "partition"},
                   {"write_bytes_per_s": 100e6, "write_await_ms": 90.0}, ts),
            Sample("vsphere_vm", {"vcenter": "vc1", "vm": "db2prod01", "host": host},
                   {"cpu_ready_pct": 0.5, "cpu_usage_pct": 30.0, "vcpus": 8}, ts),
            Sample("vsphere_vm_disk", {"vcenter": "vc1", "vm": "db2prod01", "host": host, "instance": "scsi0:1",
                                       "datastore": "ds_data", "lun": LUN}, {"write_latency_ms": 4.5, "read_iops": 0.0,
                                                                         "write_iops": 300.0},
                   ts),
            # a batch VM beside it on its LUN, on its host at each moment: the queue's culprit
            Sample("vsphere_vm_disk", {"vcenter": "vc1", "vm": "etl01", "host": host, "instance": "scsi0:0",
                                       "datastore": "ds_data", "lun": LUN}, {"write_latency_ms": 4.5, "read_iops": 0.0,
                                                                     "write_iops": 2700.0},
                   ts),
            Sample("vsphere_vm", {"vcenter": "vc1", "vm": "other01", "host": "esx01"}, {"cpu_ready_pct": 9.0}, ts),
            Sample("vsphere_host_lun", {"vcenter": "vc1", "host": "esx01", "lun": LUN},
                   {"kernel_latency_ms": (2.0 if ts < MOVED else 77.0) if in_run else 0.0, "device_latency_ms": 0.7},
                   ts),
            Sample("vsphere_host_lun", {"vcenter": "vc1", "host": "esx02", "lun": LUN},
                   {"kernel_latency_ms": 3.0 if ts >= MOVED else 66.0, "device_latency_ms": 0.7}, ts),
            Sample("vsphere_host_lun", {"vcenter": "vc1", "host": "esx01", "lun": LUN2},
                   {"kernel_latency_ms": 40.0, "device_latency_ms": 30.0}, ts),
            Sample("storage_lun", {"storage": "netapp1", "kind": "ontap", "vserver": "svm1", "lun": "/vol/db/l0",
                                   "naa": LUN}, {"avg_latency_ms": 0.5, "total_iops": 2000.0}, ts),
            Sample("storage_lun", {"storage": "netapp1", "kind": "ontap", "vserver": "svm1", "lun": "/vol/x/l9",
                                   "naa": LUN2}, {"avg_latency_ms": 25.0, "total_iops": 9000.0}, ts),
        ]
    finding = Finding("guest-io-latency", "warning", {"layer": "guest", "guest": "db2prod01", "device": "sdb"},
                      "write await 5 ms", {"samples": 3}, "why", "fix", ["ref"], RUN[0] + 100 * S, RUN[0] + 300 * S)
    before = Finding("cpu-ready", "warning", {"layer": "vm", "vm": "other01"}, "ready 9 %", {}, "why", "fix", [],
                     BASE[0] - 30 * S, BASE[0] - 10 * S)
    with Store(path, writer=True) as w:
        w.write(rows, annotations=[edge_marker("run1", BEGIN, ts=BASE[0]), edge_marker("run1", END, ts=BASE[1]),
                                   edge_marker("run2", BEGIN, ts=RUN[0]),
                                   edge_marker("run2", END, tags={"exit_status": "0"}, ts=RUN[1]), *EVENTS],
                findings=[finding, before])


#: vCenter's events: the stack's vMotion at MOVED, and a neighbour's power-off on the host it was not on yet
EVENTS = [event_annotation(MOVED, "vc1", "migration", "VmMigratedEvent", "db2prod01 migrated from esx01 onto esx02",
                           {"vm": "db2prod01", "host": "esx02", "source_host": "esx01"}),
          event_annotation(RUN[0] + 60 * S, "vc1", "power", "VmPoweredOffEvent", "web01 powered off",
                           {"vm": "web01", "host": "esx02"})]


@pytest.fixture
def fleet(tmp_path: Path) -> tuple[Path, Path]:
    store, cfg = tmp_path / "fleet.db", tmp_path / "fleet.toml"
    _fleet(store)
    cfg.write_text(CONFIG)
    return store, cfg


def test_report_against_a_baseline_reads_only_the_stack_and_says_what_changed(fleet):
    store, cfg = fleet
    r = run_cli("report", "run2", "--baseline", "run1", "-c", str(cfg), "--store", str(store), "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc) >= {"run", "baseline", "delta", "findings", "verdicts"}
    run, base = doc["run"]["stacks"]["prod"], doc["baseline"]["stacks"]["prod"]
    assert (doc["run"]["name"], doc["run"]["exit_status"], doc["run"]["duration_s"]) == ("run2", 0, 600.0)
    # host: the VM's LUN only, on the host it ran on at each moment (vMotion at MOVED)
    kavg = run["host"]["vsphere_host_lun.kernel_latency_ms"]
    assert (kavg["max"], kavg["unit"], kavg["samples"]) == (3.0, "ms", 31)
    assert 2.0 <= kavg["p50"] <= 3.0 and base["host"]["vsphere_host_lun.kernel_latency_ms"]["max"] == 0.0
    assert doc["stacks"][0]["hosts"] == ["esx01", "esx02"] and doc["stacks"][0]["luns"] == [LUN]
    # guest: whole disks summed (not the partition), its CPU total; array: the VM's LUN only
    write = run["guest"]["guest_disk.write_bytes_per_s"]
    assert (write["mean"], write["unit"], write["series"]) == (150e6, "bytes/s", 2)
    assert run["guest"]["guest_disk.write_await_ms"]["max"] == 5.0
    assert run["guest"]["guest_cpu.busy_pct"]["max"] == 40.0
    assert run["storage"]["storage_lun.avg_latency_ms"]["max"] == 0.5
    assert run["db2"]["db2_bufferpool.hit_pct"]["mean"] == 97.0 and run["vm"]["vsphere_vm.cpu_ready_pct"]["max"] == 0.5
    delta = doc["delta"]["stacks"]["prod"]
    assert delta["db2"]["db2_database.commits_per_s"] == {"unit": "per second", "run": 500.0, "baseline": 1000.0,
                                                          "change_pct": -50.0, "p95_change_pct": -50.0}
    assert delta["host"]["vsphere_host_lun.kernel_latency_ms"]["change_pct"] is None  # from zero
    moved = doc["delta"]["moved"]
    assert [(m["stack"], m["layer"]) for m in moved][:2] == [("prod", "host"), ("prod", "db2")]
    assert moved[1]["figures"][0]["figure"] == "db2_database.log_disk_wait_pct"
    assert [(f["rule"], f["run"], f["stacks"]) for f in doc["findings"]] == [("guest-io-latency", "run2", ["prod"])]
    verdicts = {v["run"]: v for v in doc["verdicts"]}
    assert verdicts["run2"]["layer"] == "host" and verdicts["run1"]["layer"] is None
    # the run's verdict is its episodes (issue 28): the queue from the run's first whole bucket to its end, its
    # figures those of the VM's host at each moment (esx01's 2 ms, then esx02's 3 ms; never the 77 or 66 ms of
    # the host it was not on)
    v = verdicts["run2"]
    (episode,) = v["episodes"]
    start = datetime.fromisoformat(v["since"]).timestamp() * S
    # (its onset looked for before the run too: the bucket the run began in)
    assert RUN[0] - 20 * S <= start <= RUN[0] + 20 * S and episode["start"] == v["since"] and episode["end"] is None
    assert episode["layer"] == "host" and episode["figures"]["kavg_ms"]["peak"] == 3.0
    assert 2.0 < episode["figures"]["kavg_ms"]["mean"] < 3.0
    assert [(c["layer"], c["kind"]) for c in v["causes"]] == [("host", "hypervisor-queue")]
    # its culprits: who drives the LUN's queue on the host it ran on
    assert [(c["vm"], round(c["share_pct"])) for c in v["culprits"]][:2] == [("etl01", 90), ("db2prod01", 10)], v
    assert (verdicts["run1"]["since"], verdicts["run1"]["episodes"], verdicts["run1"]["causes"]) == (None, [], [])
    # vCenter's events of the stack in the run: its vMotion, not a neighbour's power-off on a host it was not on
    vmotion = {"time": "2023-11-14T22:38:20+00:00", "kind": "migration", "type": "VmMigratedEvent", "vcenter": "vc1",
               "vm": "db2prod01", "host": "esx02", "source_host": "esx01", "datastore": None,
               "summary": "db2prod01 migrated from esx01 onto esx02"}
    assert doc["events"] == [vmotion] and v["events"] == [vmotion] and verdicts["run1"]["events"] == []

    text = run_cli("report", "run2", "--baseline", "run1", "-c", str(cfg), "--store", str(store))
    assert text.returncode == 0, text.stderr
    assert "What changed\n\n- prod / ESXi host: KAVG new" in text.stdout
    assert "    write throughput  MB/s   150   150   150   150            150  +0.0 %\n" in text.stdout
    assert "    KAVG    ms    3.00  3.00  3.00  2.55              0     new\n" in text.stdout
    assert "⇒ queueing in the hypervisor: etl01 does 2,700 of 3,000 IOPS on the queue of naa.600a098038303053 on " \
           "esx02 (90 %) (blame: host since 22:33 UTC, 10m, confidence high" in text.stdout
    assert "\n    vCenter 2023-11-14T22:38:20+00:00: db2prod01 migrated from esx01 onto esx02\n" in text.stdout
    assert "web01" not in text.stdout
    md = run_cli("report", "run2", "-c", str(cfg), "--store", str(store), "--format", "markdown")
    assert "| commits (`db2_database.commits_per_s`) | /s | 500 | 500 | 500 | 500 |" in md.stdout
    assert "## Findings opened during the run\n\n- run2: WARNING guest-io-latency" in md.stdout


def test_a_report_lists_a_verdicts_newest_vcenter_events_and_counts_the_rest(fleet):
    """A busy host's alarms through the run: the text lists the newest EVENTS_LISTED, the JSON has them all."""
    store, cfg = fleet
    alarms = [event_annotation(MOVED + i * S, "vc1", "alarm", "AlarmStatusChangedEvent",
                               f"alarm 'Host CPU usage' on esx02: green → yellow #{i}", {"host": "esx02"})
              for i in range(1, 26)]
    with Store(store, writer=True) as w:
        w.write([], annotations=alarms)
    doc = json.loads(run_cli("report", "run2", "-c", str(cfg), "--store", str(store), "--format", "json").stdout)
    assert len(doc["events"]) == 26
    text = run_cli("report", "run2", "-c", str(cfg), "--store", str(store)).stdout
    listed = [line for line in text.splitlines() if line.startswith("    vCenter ")]
    assert len(listed) == EVENTS_LISTED and listed[-1].endswith("#25") and "#5\n" not in text
    assert "    (and 6 older vCenter events: --format json has them all)" in text


def test_report_errors_name_what_the_store_has(fleet):
    store, cfg = fleet
    r = run_cli("report", "nope", "-c", str(cfg), "--store", str(store))
    assert r.returncode == 1 and "no run named 'nope'; runs: run1, run2" in r.stderr
    r = run_cli("report", "run2", "--stack", "other", "-c", str(cfg), "--store", str(store))
    assert r.returncode == 1 and "no stack named other" in r.stderr
    r = run_cli("report", "run1", "--store", str(store.with_name("none.db")))
    assert r.returncode == 1 and "no store at" in r.stderr


def test_marks_by_hand_bound_a_run(store_path):
    with Store(store_path, writer=True):
        pass
    assert run_cli("mark", "tpc", "--begin", "--store", str(store_path)).returncode == 0
    now = time.time_ns()
    with Store(store_path, writer=True) as w:
        w.write([Sample("guest_cpu", {"guest": "g1", "cpu": "total"}, {"busy_pct": 10.0 * i}, now + i * S // 10)
                 for i in range(1, 6)])
    time.sleep(0.6)
    assert run_cli("mark", "tpc", "--end", "--text", "done", "--store", str(store_path)).returncode == 0
    with Store(store_path) as s:
        marks = s.annotations()
    assert [(a.name, a.tags) for a in marks] == [("tpc begin", {"by": "cli", "run": "tpc", "edge": "begin"}),
                                                 ("tpc end", {"by": "cli", "run": "tpc", "edge": "end"})]
    doc = json.loads(run_cli("report", "tpc", "--store", str(store_path), "--format", "json").stdout)
    assert doc["run"]["stacks"]["g1"]["guest"]["guest_cpu.busy_pct"]["max"] == 50.0
    pair = json.loads(run_cli("report", "tpc begin..tpc end", "--store", str(store_path), "--format", "json").stdout)
    assert pair["run"]["stacks"] == doc["run"]["stacks"]


# --- `db2vtop run` --------------------------------------------------------------------

def test_run_passes_stdio_and_the_exit_status_through(store_path):
    script = 'read l; echo "got $l"; echo oops >&2; exit 5'
    r = run_cli("run", "io", "--store", str(store_path), "--", "sh", "-c", script, input="hello\n")
    assert r.returncode == 5 and r.stdout == "got hello\n"
    assert "oops\n" in r.stderr and "no agent or watch is recording" in r.stderr
    with Store(store_path) as s:
        (begin, end) = s.annotations()
    assert begin.tags["command"] == end.tags["command"] == """sh -c 'read l; echo "got $l"; echo oops >&2; exit 5'"""
    assert (begin.name, end.name, end.tags["exit_status"]) == ("io begin", "io end", "5")
    killed = run_cli("run", "io", "--store", str(store_path), "--", "sh", "-c", "kill -TERM $$")
    assert killed.returncode == 128 + signal.SIGTERM
    missing = run_cli("run", "io", "--store", str(store_path), "--", "no-such-command-here")
    assert missing.returncode == 127 and "command not found: no-such-command-here" in missing.stderr
    usage = run_cli("run", "io", "--store", str(store_path))
    assert usage.returncode == 2 and "no command after --" in usage.stderr
    with Store(store_path) as s:  # the begin is marked before the command starts: a missing one ends the run 127
        assert [a.tags.get("exit_status") for a in s.annotations()] == [None, "5", None, "143", None, "127"]


@pytest.mark.slow
@pytest.mark.serial  # the idle run's disks must be idle: no other test writing beside it
def test_runs_while_an_agent_records_this_machine(tmp_path):
    """The issue's acceptance: an idle run and a 600 MB direct write to a real disk, the exit
    statuses passed through, and the write run's disk throughput far above the idle one's."""
    store = tmp_path / "m.db"
    cfg = tmp_path / "c.toml"
    cfg.write_text('[guest]\ninterval = "1s"\n')
    target = Path("/var/tmp") / f"db2vtop-run-test-{os.getpid()}.dat"
    agent = subprocess.Popen([sys.executable, "-m", "db2vtop.agent", "agent", "-c", str(cfg), "--store", str(store)],
                             cwd=ROOT, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if store.exists():
                with contextlib.suppress(StoreError), Store(store) as s:  # the agent may still be creating it
                    if s.latest("guest_disk"):
                        break
            time.sleep(0.2)
        idle = run_cli("run", "idle", "-c", str(cfg), "--store", str(store), "--", "sleep", "12")
        write = run_cli("run", "write", "-c", str(cfg), "--store", str(store), "--", "sh", "-c",
                        f"dd if=/dev/zero of={target} bs=1M count=600 oflag=direct status=none; rm -f {target}; "
                        "echo written; exit 3")
        report = run_cli("report", "write", "--baseline", "idle", "-c", str(cfg), "--store", str(store),
                         "--format", "json")
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=30)
        target.unlink(missing_ok=True)
    assert idle.returncode == 0, idle.stderr
    assert write.returncode == 3 and write.stdout == "written\n", write.stderr
    assert "no agent or watch" not in write.stderr
    assert "run write:" in write.stderr and "write throughput" in write.stderr
    assert report.returncode == 0, report.stderr
    doc = json.loads(report.stdout)
    (stack,) = doc["run"]["stacks"]
    ran = doc["run"]["stacks"][stack]["guest"]["guest_disk.write_bytes_per_s"]
    was = doc["baseline"]["stacks"][stack]["guest"]["guest_disk.write_bytes_per_s"]
    assert was["samples"] >= 10 and ran["samples"] >= 1
    assert ran["mean"] > 5 * was["mean"] and ran["max"] > 50e6, (ran, was)
    assert (doc["run"]["exit_status"], doc["baseline"]["exit_status"]) == (3, 0)
    assert doc["delta"]["stacks"][stack]["guest"]["guest_disk.write_bytes_per_s"]["change_pct"] > 400


# --- the HTML report in a real browser ------------------------------------------------

def test_html_report_renders_with_charts_in_headless_chromium(fleet, tmp_path):
    store, cfg = fleet
    out = tmp_path / "report.html"
    r = run_cli("report", "run2", "--baseline", "run1", "-c", str(cfg), "--store", str(store), "--format", "html",
                "-o", str(out))
    assert r.returncode == 0, r.stderr
    page = out.read_text()
    assert "<script" not in page and "<link" not in page and "src=" not in page
    assert page.count("http") == page.count('xmlns="http://www.w3.org/2000/svg"')  # nothing to fetch
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "chromium is missing: tests/infra/install-deps.sh installs it"
    shot = tmp_path / "shot.png"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--window-size=1100,900", f"--screenshot={shot}", out.as_uri()],
                   capture_output=True, timeout=60, check=True, env={**os.environ, "HOME": str(tmp_path)})
    width, height, rows = read_png(shot)
    assert (width, height) == (1100, 900)
    assert non_white(rows) > 20_000  # text, tables and charts, not a blank page
    assert count_colour(rows, (0xE6, 0x61, 0x00)) > 300  # the run's lines (orange)
    assert count_colour(rows, (0x5D, 0x3A, 0x9B)) > 150  # the baseline's (purple, dashed)
    assert "stroke-dasharray" in page and ".up{color:#c2185b}.down{color:#00796b}" in page  # up/down: another pair


def test_a_large_fleet_reported_by_several_processes_is_the_same_report(tmp_path):
    from bench.report import build, config
    from db2vtop.agent.benchmark import make_report
    from db2vtop.agent.config import load_config
    from db2vtop.checks.report import PARALLEL_MIN_STACKS

    store, cfg_path = tmp_path / "f.db", tmp_path / "f.toml"
    now = time.time_ns()
    build(store, PARALLEL_MIN_STACKS, 4, 300, 20, now - 400 * S)
    config(cfg_path, PARALLEL_MIN_STACKS)
    cfg = load_config(cfg_path)
    one = make_report(cfg, store, "second", "first", now_ns=now, workers=1).to_json()
    two = make_report(cfg, store, "second", "first", now_ns=now, workers=2).to_json()
    assert len(one["run"]["stacks"]) == PARALLEL_MIN_STACKS and len(one["verdicts"]) == 2 * PARALLEL_MIN_STACKS
    assert one == two
    kavg = one["run"]["stacks"]["s007"]["host"]["vsphere_host_lun.kernel_latency_ms"]
    assert kavg["series"] == 2  # its two LUNs on its host, of the 4 x 32 host-LUN series


def test_run_says_what_it_waits_for_after_the_command(store_path):
    """The wait for the samples that cover a run's end is said, not a silent pause (then given up)."""
    from db2vtop.agent.benchmark import settle

    end = time.time_ns()
    with Store(store_path, writer=True) as w:
        w.write([Sample("vsphere_vm", {"vcenter": "vc1", "vm": "db2prod01"}, {"cpu_ready_pct": 1.0}, end - 5 * S)])
    said: list[str] = []
    assert not settle(store_path, end, 0.6, said.append)
    assert said[0].startswith("waiting up to 0.6 s for the samples that cover the run's end (1 series")
    assert said[-1].startswith("1 series still had no sample after the end")
    with Store(store_path, writer=True) as w:
        w.write([Sample("vsphere_vm", {"vcenter": "vc1", "vm": "db2prod01"}, {"cpu_ready_pct": 1.0}, end + S)])
    said.clear()
    assert settle(store_path, end, 0.6, said.append) and not said  # nothing to wait for: nothing said
