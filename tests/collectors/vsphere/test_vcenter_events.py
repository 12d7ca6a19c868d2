"""vCenter's event log end to end against the vSphere scenario simulator (its events posted through govmomi's
EventManager): what triage, the verdict, the store and a restarted agent make of a DRS migration, an HA restart,
a reconfiguration, a snapshot and a device-latency event, a log of 100,000 events, and a VM whose history is
judged on the host it ran on then.

Scenario (names and numbers of its own): db01 was given 8 vCPUs two hours ago, was restarted by HA on esx12 50
minutes ago (it ran on esx11), given a 64 GiB memory reservation 40 minutes ago, snapshotted 30 minutes ago;
esx12 reported the LUN behind db01's datastore slow 20 minutes ago (1.2 ms -> 38 ms); 10 minutes ago DRS moved
etl-7, a 32-vCPU batch VM, from esx11 onto esx12, and for the last 9 minutes db01 waits 7 % per vCPU for a
physical CPU.
"""

from __future__ import annotations

import asyncio
import json
import signal
import ssl
import time
import urllib.request
from pathlib import Path

import pytest

from db2vtop.agent.core.config import StackConfig
from db2vtop.agent.core.events import EVENT, identity
from db2vtop.agent.core.model import Annotation
from db2vtop.agent.core.store import Store
from db2vtop.checks.verdict import stack_verdict
from db2vtop.collectors.vsphere.collector import VSphereCollector
from db2vtop.collectors.vsphere.config import VCenterConfig
from db2vtop.collectors.vsphere.events import CYCLE_PAGES, PAGE
from tests.conftest import ROOT, run_cli
from tests.infra.influxd import InfluxServer
from tests.infra.vsphere_sim import Simulator

LUN = "naa.600a098038303054"
HOUR = 180  # vCenter's realtime hour, in 20 s samples
READY_LOW, READY_HIGH = 800, 11200  # ms of ready per 20 s over 8 vCPUs: 0.5 % and 7 % per vCPU
CONTRACT = {"time", "kind", "type", "vcenter", "vm", "host", "source_host", "datastore", "summary"}
ENV = {"VC1_PASSWORD": "secret"}
DASHBOARD = ROOT / "contrib" / "grafana" / "db2vtop-dashboard.json"


def _host(name: str, vms: list[dict], perf: dict | None = None) -> dict:
    return {"name": name, "cluster": "prod", "cpu_sockets": 2, "cpu_cores": 16, "cpu_threads": 32, "cpu_mhz": 2600,
            "memory_mb": 262144, "numa_nodes": 2, "perf": perf or {}, "vms": vms}


def _vm(name: str, vcpus: int, perf: dict | None = None) -> dict:
    return {"name": name, "num_cpu": vcpus, "cores_per_socket": vcpus, "memory_mb": 65536,
            "memory_reservation_mb": 65536, "disks": [{"datastore": "ds_db", "size_gb": 200}],
            "quickstats": {"balloonedMemory": 0, "swappedMemory": 0}, "perf": perf or {}}


SCENARIO = {
    "datacenter": "DC1",
    "datastores": [{"name": "ds_db", "type": "VMFS", "capacity_gb": 2048, "free_gb": 1024, "luns": [LUN]}],
    "hosts": [
        _host("esx11", [_vm("web-3", 4)]),
        _host("esx12", [_vm("db01", 8, {"cpu.ready.summation": {"": [READY_LOW] * (HOUR - 27) + [READY_HIGH] * 27},
                                        "mem.vmmemctl.average": 0}),
                        _vm("etl-7", 32)]),
    ],
    "events": [
        # before vCenter's realtime hour: a look back of three hours reads it, an agent's first start does not
        {"type": "VmReconfiguredEvent", "ago_s": 7200, "vm": "db01", "config": {"num_cpus": 8}},
        {"type": "VmRestartedOnAlternateHostEvent", "ago_s": 3000, "vm": "db01", "host": "esx12",
         "source_host": "esx11"},
        {"type": "VmReconfiguredEvent", "ago_s": 2400, "vm": "db01", "user": "VSPHERE.LOCAL\\jdoe",
         "config": {"memory_reservation_mb": 65536, "disks": [{"label": "Hard disk 1", "size_gb": 200}]}},
        {"type": "TaskEvent", "ago_s": 1800, "vm": "db01", "task": "VirtualMachine.createSnapshot",
         "user": "svc-backup"},
        {"type": "EventEx", "id": "esx.problem.scsi.device.io.latency.high", "ago_s": 1200, "host": "esx12",
         "severity": "warning", "arguments": {"1": LUN, "2": "1200", "3": "38000"},
         "message": f"Device {LUN} performance has deteriorated. I/O latency increased from average value of "
                    "1200 microseconds to 38000 microseconds."},
        {"type": "DrsVmMigratedEvent", "ago_s": 600, "vm": "etl-7", "host": "esx12", "source_host": "esx11"},
    ],
}
SUMMARIES = {
    "ha": "HA restarted db01 on esx12 (it ran on esx11)",
    "reconfigure": "db01 reconfigured: memory reservation 65536 MB, Hard disk 1 resized to 200 GB "
                   "(by VSPHERE.LOCAL\\jdoe)",
    "snapshot": "a snapshot of db01 started (by svc-backup)",
    "storage": f"esx12: device {LUN} I/O latency rose from 1.2 ms to 38.0 ms",
    "migration": "DRS moved etl-7 from esx11 onto esx12",
}


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    with Simulator.of(SCENARIO, tmp_path_factory.mktemp("events-sim")) as s:
        yield s


def config(tmp_path: Path, sim: Simulator) -> str:
    return str(sim.vcenter_only(tmp_path, '[[stack]]\nname = "db01"\nvm = "db01"\nvcenter = "vc1"\n'))


def test_the_five_events_are_in_triage_the_verdict_and_its_text(sim, tmp_path):
    cfg = config(tmp_path, sim)
    r = run_cli("triage", "-c", cfg, "--vm", "db01", "--format", "json", "--lookback", "1h", env=ENV, timeout=180)
    doc = json.loads(r.stdout)
    assert doc["sources"]["vsphere:vc1"].startswith("ok"), r.stderr
    assert [(e["kind"], e["summary"]) for e in doc["events"]] == list(SUMMARIES.items())
    assert all(set(e) == CONTRACT and e["vcenter"] == "vc1" for e in doc["events"])
    drs = doc["events"][-1]
    assert (drs["type"], drs["vm"], drs["host"], drs["source_host"]) == \
        ("DrsVmMigratedEvent", "etl-7", "esx12", "esx11")
    assert doc["events"][3]["datastore"] == "ds_db"  # the LUN's datastore, from the host's view of it
    verdict = next(v for v in doc["verdicts"] if v["stack"] == "db01")
    assert [e["summary"] for e in verdict["events"]] == list(SUMMARIES.values())
    assert verdict["layer"] == "host" and "CPU contention on the host" in verdict["summary"]
    assert "after DRS moved etl-7 from esx11 onto esx12" in verdict["summary"], verdict["summary"]
    assert verdict["episodes"][-1]["event"]["type"] == "DrsVmMigratedEvent"

    text = run_cli("triage", "-c", cfg, "--vm", "db01", "--lookback", "3h", env=ENV, timeout=180).stdout
    section = text.split("Verdict for stack db01", 1)[1].split("\n\n\n", 1)[0]
    for summary in ["db01 reconfigured: 8 vCPUs", *SUMMARIES.values()]:  # vCenter's log beyond its realtime hour
        assert summary in section, text


#: etl-7 takes 59,904 MHz of esx12's 83,200 since DRS moved it there; 30 s later vCenter's host CPU alarm turned
#: yellow, 30 s before db01's wait began: the alarm is the newest event before the onset, the move what changed
ALARMED = {**SCENARIO, "hosts": [
    _host("esx11", [_vm("web-3", 4)]),
    _host("esx12", [SCENARIO["hosts"][1]["vms"][0],
                    _vm("etl-7", 32, {"cpu.usagemhz.average": [1300] * (HOUR - 30) + [59904] * 30})]),
], "events": [
    {"type": "DrsVmMigratedEvent", "ago_s": 600, "vm": "etl-7", "host": "esx12", "source_host": "esx11"},
    {"type": "AlarmStatusChangedEvent", "ago_s": 570, "host": "esx12", "alarm": "Host CPU usage",
     "from": "green", "to": "yellow"},
]}


def test_the_verdict_names_the_event_of_its_culprit_not_a_later_alarm(tmp_path):
    with Simulator.of(ALARMED, tmp_path) as s:
        r = run_cli("triage", "-c", config(tmp_path, s), "--vm", "db01", "--format", "json", "--lookback", "1h",
                    env=ENV, timeout=180)
    verdict = next(v for v in json.loads(r.stdout)["verdicts"] if v["stack"] == "db01")
    assert [e["type"] for e in verdict["events"]] == ["DrsVmMigratedEvent", "AlarmStatusChangedEvent"]
    episode = verdict["episodes"][-1]
    assert episode["culprits"][0]["vm"] == "etl-7", episode["culprits"]
    assert episode["event"]["type"] == "DrsVmMigratedEvent", episode["event"]
    assert "after DRS moved etl-7 from esx11 onto esx12" in verdict["summary"], verdict["summary"]
    assert "alarm" not in verdict["summary"]


def _between(lo_min: float, hi_min: float, high: int, low: int) -> list[int]:
    """An hour of samples, `high` from `lo_min` to `hi_min` minutes ago, `low` otherwise (oldest first)."""
    return [high if hi_min * 60 <= (HOUR - 1 - i) * 20 <= lo_min * 60 else low for i in range(HOUR)]


MOVED = {
    "datacenter": "DC1",
    "datastores": [{"name": "ds_db", "type": "VMFS", "capacity_gb": 2048, "free_gb": 1024, "luns": [LUN]}],
    "hosts": [
        # the host db01 left 20 minutes ago: its queue to db01's LUN filled from 35 to 22 minutes ago
        _host("esx11", [_vm("web-3", 4)], {"disk.kernelLatency.average": {LUN: _between(35, 22, 9, 0)},
                                           "disk.queueLatency.average": {LUN: _between(35, 22, 8, 0)},
                                           "disk.deviceLatency.average": {LUN: 1}}),
        _host("esx12", [_vm("db01", 8)], {"disk.kernelLatency.average": {LUN: 0},
                                          "disk.deviceLatency.average": {LUN: 1}}),
    ],
    "events": [{"type": "DrsVmMigratedEvent", "ago_s": 1200, "vm": "db01", "host": "esx12", "source_host": "esx11"}],
}


def test_a_vm_migrated_20_minutes_ago_is_judged_on_the_host_it_ran_on_then(tmp_path):
    """vCenter tags no sample with where it was taken: only its migrations say db01 was on esx11 until 20 minutes
    ago, so esx11's queueing then is db01's episode (and esx11's samples are read at all)."""
    with Simulator.of(MOVED, tmp_path) as s:
        r = run_cli("triage", "-c", config(tmp_path, s), "--vm", "db01", "--format", "json", "--lookback", "45m",
                    env=ENV, timeout=180)
    doc = json.loads(r.stdout)
    verdict = next(v for v in doc["verdicts"] if v["stack"] == "db01")
    queued = [e for e in verdict["episodes"] if e["causes"][0]["kind"] == "hypervisor-queue"]
    assert len(queued) == 1, verdict
    episode = queued[0]
    assert episode["layer"] == "host" and episode["end"] is not None
    assert any("host esx11 KAVG 9.0 ms" in link for link in episode["chain"]), episode["chain"]
    assert verdict["layer"] is None  # on esx12 since: nothing to blame now
    assert "earlier: queueing in the hypervisor" in verdict["summary"]


def _post_events(sim: Simulator, events: list[dict]) -> None:
    """Events that happen now, posted through the simulator's EventManager."""
    req = urllib.request.Request(sim.url.replace("/sdk", "/sim/events"), json.dumps(events).encode(), method="POST")
    with urllib.request.urlopen(req, context=ssl._create_unverified_context(), timeout=30) as answer:
        assert json.loads(answer.read()) == {"posted": len(events)}


def _stored_events(store: Path) -> list[Annotation]:
    with Store(store) as s:
        return [a for a in s.annotations() if a.event == EVENT]


#: an event whose message (anyone's text: posted through the API, or naming a VM or an alarm) carries a C1 control
#: sequence introducer, a right-to-left override and a line break; XML 1.0 can carry these (ESC it cannot)
HOSTILE = {"type": "EventEx", "id": "com.vmware.vc.sdrs.StorageDrsStorageMigrationEvent", "vm": "db01",
           "message": "Storage DRS moved db01\u009b2J to ds_db\u202eexe.\ndb2vtop: all clear"}
#: as it is stored (and so shown everywhere): escaped by the one sanitizer of terminal text, on one line
HOSTILE_SAID = "Storage DRS moved db01\\x9b2J to ds_db\\u202eexe. db2vtop: all clear"


def test_an_agent_restarted_reads_no_event_twice_and_misses_none(tmp_path):
    """A second run reads on after the first's newest stored event; an event's text from vCenter is stored escaped
    (the TUI, triage and the report show a summary as it is stored)."""
    with Simulator.of(SCENARIO, tmp_path) as s:
        cfg = config(tmp_path, s)
        store = tmp_path / "none.db"
        first = run_cli("agent", "-c", cfg, "--once", env=ENV, timeout=180)
        assert first.returncode == 0, first.stderr
        assert [a.text for a in _stored_events(store)] == list(SUMMARIES.values())
        # the Stack screen's few minutes: the onset is found before them, and the event before it with it
        with Store(store) as st:
            now = time.time_ns()
            shown = stack_verdict(st, StackConfig("db01", vm="db01", vcenter="vc1"), now - 120 * 10**9, now)
        assert shown.events == [] and "after DRS moved etl-7 from esx11 onto esx12" in shown.summary, shown.summary
        _post_events(s, [{"type": "VmPoweredOffEvent", "vm": "web-3"},
                         {"type": "EnteredMaintenanceModeEvent", "host": "esx11"}, HOSTILE])
        second = run_cli("agent", "-c", cfg, "--once", env=ENV, timeout=180)
        assert second.returncode == 0, second.stderr
        stored = _stored_events(store)
        assert [a.text for a in stored] == [*SUMMARIES.values(), "web-3 powered off", "esx11 entered maintenance mode",
                                            HOSTILE_SAID]
        assert len({identity(a) for a in stored}) == len(stored)


LONG_LOG = 100_000


def _collector(sim: Simulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> VSphereCollector:
    """The collector in this process, as an agent runs it (its first start reaches back an hour)."""
    monkeypatch.setenv("VC1_PASSWORD", "secret")
    cfg = VCenterConfig(name="vc1", url=sim.url, user="monitor", password_env="VC1_PASSWORD",
                        ca_file=Path(sim.vcenter_only(tmp_path)).parent / "sim-ca.pem")
    collector = VSphereCollector(cfg)
    collector.history_samples = 2
    return collector


def test_a_new_session_goes_on_where_the_last_one_stopped(tmp_path, monkeypatch):
    """vCenter ends every session (as a restart of it would): the collector logs in again, makes a new event
    collector from its position, and hands on only what came since, once."""
    with Simulator.of(SCENARIO, tmp_path) as s:
        collector = _collector(s, tmp_path, monkeypatch)

        async def cycles() -> list[list[str]]:
            out = []
            try:
                out.append([r.text for r in await collector.collect() if isinstance(r, Annotation)])
                _post_events(s, [{"type": "ExitMaintenanceModeEvent", "host": "esx11"}])
                s.signal(signal.SIGUSR1)
                out.append([r.text for r in await collector.collect() if isinstance(r, Annotation)])
            finally:
                await collector.close()
            return out

        first, second = asyncio.run(cycles())
        calls = s.stats()["methods"]
    assert first == list(SUMMARIES.values())
    assert second == ["esx11 exited maintenance mode"]
    assert calls["CreateCollectorForEvents"] == 2 and calls["Login"] == 2


@pytest.mark.slow
def test_a_log_of_100000_events_is_read_in_bounded_pages(tmp_path, monkeypatch):
    """A first start with an hour of 100,000 events behind it: every one is read once, PAGE at a time, at most
    CYCLE_PAGES pages a cycle (the backlog goes on over the next cycles)."""
    scenario = {**MOVED, "events": [], "generate": {"events": LONG_LOG}}
    with Simulator.of(scenario, tmp_path, start_timeout=300) as s:
        collector = _collector(s, tmp_path, monkeypatch)

        async def cycles() -> list[list[Annotation]]:
            out = []
            try:
                for _ in range(LONG_LOG // (PAGE * CYCLE_PAGES) + 2):
                    out.append([r for r in await collector.collect() if isinstance(r, Annotation)])
            finally:
                await collector.close()
            return out

        per_cycle = asyncio.run(cycles())
        calls = s.stats()["methods"]
    assert [len(c) for c in per_cycle] == [PAGE * CYCLE_PAGES] * 10 + [0, 0]
    events = [a for c in per_cycle for a in c]
    assert len({identity(a) for a in events}) == LONG_LOG
    assert [a.ts for a in events] == sorted(a.ts for a in events)
    assert calls["CreateCollectorForEvents"] == 1
    # 200 full pages, then one short answer per cycle that finds nothing new
    assert calls["ReadNextEvents"] == LONG_LOG // PAGE + 2


@pytest.mark.slow
def test_the_events_reach_influxdb_as_annotations_grafana_shows(tmp_path):
    """A real influxd: each event a `db2vtop_annotation` point of kind vcenter_event, which the dashboard's
    "vCenter events" annotation query finds (and its "Markers" and "Events" queries leave to it)."""
    influx = InfluxServer(tmp_path / "influxd")
    influx.start()
    try:
        bucket = influx.create_db("events")
        with Simulator.of(SCENARIO, tmp_path) as s:
            cfg = s.vcenter_only(tmp_path, f'[influxdb]\nurl = "{influx.url}"\nbucket = "{bucket}"\n'
                                           f'spool_dir = "{tmp_path / "spool"}"\nflush_interval = "200ms"\n')
            r = run_cli("agent", "-c", str(cfg), "--once", env=ENV, timeout=180)
            assert r.returncode == 0, r.stderr
        points = [(tags, fields) for _, tags, fields in influx.points("events", "db2vtop_annotation")
                  if tags.get("kind") == EVENT]
        assert sorted(fields["text"] for _, fields in points) == sorted(SUMMARIES.values())
        drs = next(tags for tags, fields in points if tags["name"] == "DrsVmMigratedEvent")
        assert (drs["category"], drs["vm"], drs["host"], drs["source_host"], drs["vcenter"]) == \
            ("migration", "etl-7", "esx12", "esx11", "vc1")
        notes = {a["name"]: a for a in json.loads(DASHBOARD.read_text())["annotations"]["list"]}
        shown = influx.query(notes["vCenter events"]["query"].replace("$timeFilter", "time > now() - 2h"), "events")
        assert sum(len(x["values"]) for x in shown[0]["series"]) == len(SUMMARIES)
        for other in ("Markers", "Events"):
            found = influx.query(notes[other]["query"].replace("$timeFilter", "time > now() - 2h"), "events")
            assert not any(EVENT in json.dumps(x) for x in found[0].get("series", [])), other
    finally:
        influx.stop()
