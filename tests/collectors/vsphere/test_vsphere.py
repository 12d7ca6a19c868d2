"""The vSphere collector against the Go scenario simulator (tests/infra/vsphere-sim, govmomi).

Each condition of the scenario below is collected and compared with values worked out by
hand from the scenario's raw vCenter units (KB, ms per 20 s sample, hundredths of a %).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import zlib

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from db2vtop.agent.core.model import SELF_MEASUREMENT, Annotation, Fact, Sample, canonical_tags
from db2vtop.agent.runtime import Runtime
from db2vtop.collectors.base import BaseCollector, CollectorError
from db2vtop.collectors.vsphere import inventory as inv_mod
from db2vtop.collectors.vsphere.collector import VSphereCollector
from db2vtop.collectors.vsphere.config import VCenterConfig
from db2vtop.collectors.vsphere.connection import (
    BYTES_PER_ELEMENT,
    MAX_RESPONSE_BYTES,
    SMALL_MAX_BYTES,
    _parse_stream,
    spoken_version,
)
from db2vtop.collectors.vsphere.counters import MEASUREMENT_OF as BY_GROUP
from db2vtop.collectors.vsphere.counters import VM_COUNTERS
from db2vtop.collectors.vsphere.facts import TagMaps
from db2vtop.collectors.vsphere.inventory import parse_objects
from db2vtop.collectors.vsphere.perf import RETURNVAL, CounterIds, Spec, chunk, entity_result
from db2vtop.collectors.vsphere.soapxml import Ref
from tests.conftest import ROOT, run_cli
from tests.infra.vsphere_sim import Answer, Simulator, soap_body

GiB, MiB = 2**30, 2**20
REALTIME = frozenset(BY_GROUP.values())  # QueryPerf's measurements (not quickStats', nor vCenter's clock)
LUN_DATA = "naa.600a098038303053000000000000a001"
LUN_LOG = "naa.600a098038303053000000000000a002"

SCENARIO = {
    "datacenter": "DC1",
    "datastores": [{"name": "ds_data", "capacity_gb": 2048, "free_gb": 512, "luns": [LUN_DATA]},
                   {"name": "ds_log", "capacity_gb": 256, "free_gb": 200, "luns": [LUN_LOG]}],
    "hosts": [{
        "name": "esx01", "cluster": "prod", "cpu_sockets": 2, "cpu_cores": 8, "cpu_threads": 16, "cpu_mhz": 2600,
        "memory_mb": 131072, "numa_nodes": 2, "hyperthreading": True,
        "quickstats": {"overallCpuUsage": 20000, "overallMemoryUsage": 120000},
        "luns": [{"name": LUN_LOG, "policy": "VMW_PSP_MRU", "satp": "VMW_SATP_ALUA", "paths": 2, "dead_paths": 1,
                  "queue_depth": 32}],
        "perf": {
            "mem.state.latest": 2,
            "mem.swapused.average": 524288,                # KB -> 512 MiB
            "mem.swapinRate.average": 1024,                # KBps -> 1 MiB/s
            "disk.kernelLatency.average": {LUN_DATA: [1, 1, 8, 12, 15]},
            "disk.queueLatency.average": {LUN_DATA: 9},
            "disk.deviceLatency.average": {LUN_DATA: 4},
            "datastore.totalWriteLatency.average": {"5f000001-1a2b0001-beef-005056000001": 7},
        },
        "vms": [
            {"name": "db2prod01", "num_cpu": 12, "cores_per_socket": 12, "memory_mb": 98304,
             "memory_reservation_mb": 0, "cpu_limit_mhz": 8000, "nic": "vmxnet3", "scsi": "pvscsi",
             "tools": "guestToolsRunning", "guest_hostname": "db2prod01.example.com", "ips": ["10.0.0.11"],
             "disks": [{"datastore": "ds_data", "size_gb": 500, "backing": "eager_zeroed"},
                       {"datastore": "ds_log", "size_gb": 50, "backing": "thin"}],
             "quickstats": {"balloonedMemory": 2048, "swappedMemory": 1024},
             "perf": {
                 "cpu.usage.average": 8765,                    # 87.65 %
                 "cpu.ready.summation": {"": 24000, "0": 4000},  # 24000/20000/12 = 10 %; vCPU 0: 20 %
                 "cpu.costop.summation": {"": 7200, "3": 1200},  # 3 %; vCPU 3: 6 %
                 "cpu.maxlimited.summation": 2400,             # 1 %
                 "cpu.swapwait.summation": 600,                # 0.25 %
                 "mem.vmmemctl.average": 2097152,              # KB -> 2 GiB
                 "mem.swapped.average": 1048576,               # KB -> 1 GiB
                 "mem.swapinRate.average": 0,
                 "virtualDisk.totalWriteLatency.average": {"scsi0:1": 25},
             }},
            {"name": "app01", "num_cpu": 8, "memory_mb": 16384, "nic": "e1000", "scsi": "lsilogic",
             "tools": "guestToolsNotRunning"},
            {"name": "off01", "num_cpu": 4, "power_state": "poweredOff"},
        ]}],
}


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    with Simulator.of(SCENARIO, tmp_path_factory.mktemp("sim")) as s:
        yield s


@pytest.fixture(scope="module", autouse=True)
def vc_password():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VC_TEST_PASSWORD", "anything")
        yield


def vcenter(url: str, **kw) -> VCenterConfig:
    kw.setdefault("verify_tls", False)
    return VCenterConfig(name="vc1", url=url, user="monitor", password_env="VC_TEST_PASSWORD", **kw)


def run(coro):
    return asyncio.run(coro)


async def using(url: str, body, **kw):
    """`await body(collector)` with a fresh collector, closed afterwards."""
    c = VSphereCollector(vcenter(url, **kw))
    try:
        return await body(c)
    finally:
        await c.close()


async def one_cycle(c: VSphereCollector):
    try:
        facts = await c.describe()
        records = await c.collect()
    finally:
        await c.close()
    return facts, [r for r in records if isinstance(r, Sample)]


@pytest.fixture(scope="module")
def collected(sim):
    return run(one_cycle(VSphereCollector(vcenter(sim.url))))


def pick(samples, measurement, **tags):
    return [s for s in samples if isinstance(s, Sample) and s.measurement == measurement
            and all(s.tags.get(k) == v for k, v in tags.items())]


def newest(samples, measurement, **tags) -> dict:
    rows = pick(samples, measurement, **tags)
    assert rows, f"no {measurement} {tags}"
    return max(rows, key=lambda s: s.ts).fields


def fact(facts, kind, **tags) -> dict:
    (f,) = [f for f in facts if f.kind == kind and all(f.tags.get(k) == v for k, v in tags.items())]
    return f.data


def test_ballooning(collected):
    _, samples = collected
    vm = newest(samples, "vsphere_vm", vm="db2prod01", host="esx01", cluster="prod", vcenter="vc1")
    assert vm["mem_balloon_bytes"] == 2 * GiB
    assert newest(samples, "vsphere_vm_quickstats", vm="db2prod01")["balloon_bytes"] == 2 * GiB


def test_host_swap(collected):
    _, samples = collected
    host = newest(samples, "vsphere_host", host="esx01", cluster="prod")
    assert host["mem_swap_used_bytes"] == 512 * MiB
    assert host["mem_swapin_bytes_per_s"] == 1 * MiB
    assert host["mem_state"] == 2
    vm = newest(samples, "vsphere_vm", vm="db2prod01")
    assert vm["mem_swapped_bytes"] == GiB and vm["mem_swapin_bytes_per_s"] == 0
    assert newest(samples, "vsphere_vm_quickstats", vm="db2prod01")["swapped_bytes"] == 1024 * MiB


def test_cpu_ready_and_costop_per_vcpu(collected):
    _, samples = collected
    vm = newest(samples, "vsphere_vm", vm="db2prod01")
    assert vm["vcpus"] == 12
    assert vm["cpu_ready_pct"] == pytest.approx(10.0)
    assert vm["cpu_costop_pct"] == pytest.approx(3.0)
    assert vm["cpu_usage_pct"] == pytest.approx(87.65)
    assert vm["cpu_swapwait_pct"] == pytest.approx(0.25)
    # asked for the VM as a whole: one row per sample, not one per vCPU
    assert len(pick(samples, "vsphere_vm", vm="db2prod01")) == len({s.ts for s in pick(samples, "vsphere_vm")})


def test_cpu_limit(collected):
    facts, samples = collected
    assert newest(samples, "vsphere_vm", vm="db2prod01")["cpu_maxlimited_pct"] == pytest.approx(1.0)
    assert fact(facts, "vsphere_vm", vm="db2prod01")["cpu_limit_mhz"] == 8000
    assert fact(facts, "vsphere_vm", vm="app01")["cpu_limit_mhz"] == -1


def test_per_lun_kavg_and_queue_latency(collected):
    _, samples = collected
    lun = newest(samples, "vsphere_host_lun", host="esx01", lun=LUN_DATA, datastore="ds_data")
    assert lun["kernel_latency_ms"] == 15 and lun["queue_latency_ms"] == 9 and lun["device_latency_ms"] == 4
    other = newest(samples, "vsphere_host_lun", host="esx01", lun=LUN_LOG, datastore="ds_log")
    assert other["kernel_latency_ms"] == 0
    disk = newest(samples, "vsphere_vm_disk", vm="db2prod01", instance="scsi0:1")
    assert disk["write_latency_ms"] == 25
    assert pick(samples, "vsphere_vm_disk", vm="db2prod01", instance="scsi0:1")[0].tags["lun"] == LUN_LOG
    assert newest(samples, "vsphere_datastore", host="esx01", datastore="ds_log")["write_latency_ms"] == 7


def test_vm_wider_than_a_numa_node(collected):
    facts, _ = collected
    vm, host = fact(facts, "vsphere_vm", vm="db2prod01"), fact(facts, "vsphere_host", host="esx01")
    assert host["numa_nodes"] == 2
    assert host["numa"] == [{"node": n, "cpus": 8, "memory_bytes": 64 * GiB} for n in (0, 1)]
    assert vm["num_cpu"] == 12 > host["numa"][0]["cpus"]
    assert vm["memory_mb"] * MiB == 96 * GiB > host["numa"][0]["memory_bytes"]
    assert (vm["cores_per_socket"], vm["sockets"]) == (12, 1)


def test_total_vcpus_above_host_threads(collected):
    facts, _ = collected
    host = fact(facts, "vsphere_host", host="esx01")
    assert (host["cpu_sockets"], host["cpu_cores"], host["cpu_threads"]) == (2, 8, 16)
    assert host["hyperthreading_available"] and host["hyperthreading_active"]
    assert host["vms_powered_on"] == 2 and host["vcpus_powered_on"] == 20 > host["cpu_threads"]
    assert host["vm_memory_mb_powered_on"] == 98304 + 16384


def test_vm_and_host_facts(collected):
    facts, _ = collected
    db2, app = fact(facts, "vsphere_vm", vm="db2prod01"), fact(facts, "vsphere_vm", vm="app01")
    assert [n["type"] for n in db2["nics"]] == ["vmxnet3"] and [n["type"] for n in app["nics"]] == ["e1000"]
    assert [c["type"] for c in db2["scsi_controllers"]] == ["pvscsi"]
    assert [c["type"] for c in app["scsi_controllers"]] == ["lsilogic"]
    assert (db2["tools_running_status"], app["tools_running_status"]) == ("guestToolsRunning", "guestToolsNotRunning")
    disks = [(d["instance"], d["backing"], d["datastore"], d["luns"], d["capacity_bytes"]) for d in db2["disks"]]
    assert disks == [("scsi0:0", "eager_zeroed", "ds_data", [LUN_DATA], 500 * GiB),
                     ("scsi0:1", "thin", "ds_log", [LUN_LOG], 50 * GiB)]
    assert db2["guest_hostname"] == "db2prod01.example.com" and db2["ip_addresses"] == ["10.0.0.11"]
    assert (db2["host"], db2["cluster"], db2["power_state"]) == ("esx01", "prod", "poweredOn")
    assert db2["mem_reservation_mb"] == 0 and db2["mem_reservation_locked_to_max"] is False
    assert fact(facts, "vsphere_vm", vm="off01")["power_state"] == "poweredOff"
    host = fact(facts, "vsphere_host", host="esx01")
    luns = {lun["lun"]: lun for lun in host["luns"]}
    assert luns[LUN_DATA]["policy"] == "VMW_PSP_RR" and luns[LUN_DATA]["paths_active"] == 4
    log_lun = luns[LUN_LOG]
    assert (log_lun["policy"], log_lun["queue_depth"], log_lun["paths_active"]) == ("VMW_PSP_MRU", 32, 1)
    assert luns[LUN_DATA]["datastore"] == "ds_data" and host["vswitches"] == [{"name": "vSwitch0", "mtu": 9000}]
    assert host["power_policy"] == "static" and host["memory_bytes"] == 128 * GiB
    ds = fact(facts, "vsphere_datastore", datastore="ds_data")
    assert (ds["type"], ds["capacity_bytes"], ds["free_bytes"]) == ("VMFS", 2048 * GiB, 512 * GiB)
    assert ds["luns"] == [LUN_DATA]


def test_samples_keep_their_own_20s_timestamps(collected):
    _, samples = collected
    perf = [s for s in samples if s.measurement in REALTIME]
    assert perf and all(s.ts % (20 * 10**9) == 0 for s in perf)
    assert not pick(samples, "vsphere_vm", vm="off01")  # powered off: no realtime stats


def test_lookback_returns_the_recent_hour_oldest_first(sim):
    async def go(c):
        return await c.lookback(600), await c.lookback(60, vms=["app01"])
    everything, one_vm = run(using(sim.url, go))
    assert [s.tags for s in one_vm if s.measurement == "vsphere_vcenter"] == [{"vcenter": "vc1"}]  # its clock
    one_vm = [s for s in one_vm if s.measurement in REALTIME]
    assert {s.tags.get("vm") for s in one_vm} == {"app01", None}  # the VM and its host only
    assert {s.tags["host"] for s in one_vm} == {"esx01"}
    rows = sorted(pick(everything, "vsphere_host_lun", lun=LUN_DATA), key=lambda s: s.ts)
    stamps = [s.ts for s in rows]
    assert len(rows) >= 30 and all(b - a == 20 * 10**9 for a, b in itertools.pairwise(stamps))
    kavg = [s.fields["kernel_latency_ms"] for s in rows]
    i = kavg.index(8)  # the scenario's list ends at the simulator's start: 1, 1, 8, 12, 15, then 15 on
    assert set(kavg[:i]) == {1} and kavg[i:i + 3] == [8, 12, 15] and set(kavg[i + 2:]) == {15}


def test_tls_is_verified_by_default(sim, tmp_path):
    with pytest.raises(CollectorError, match="not trusted"):
        run(one_cycle(VSphereCollector(vcenter(sim.url, verify_tls=True))))
    ca = tmp_path / "sim-ca.pem"
    ca.write_text(ssl.get_server_certificate(("127.0.0.1", sim.port)))
    _, samples = run(one_cycle(VSphereCollector(vcenter(sim.url, verify_tls=True, ca_file=ca))))
    assert pick(samples, "vsphere_vm", vm="db2prod01")


def test_a_refused_login_says_so_and_never_shows_the_password(tmp_path, monkeypatch):
    scenario = {"login": {"user": "monitor", "password": "the-right-one"},
                "hosts": [{"name": "h1", "vms": [{"name": "vm1"}]}]}
    with Simulator.of(scenario, tmp_path) as s:
        monkeypatch.setenv("VC_TEST_PASSWORD", "a-wrong-secret")
        with pytest.raises(CollectorError, match="vcenter vc1: login refused for user 'monitor'") as e:
            run(one_cycle(VSphereCollector(vcenter(s.url))))
        assert "a-wrong-secret" not in str(e.value)
        monkeypatch.setenv("VC_TEST_PASSWORD", "the-right-one")
        _, samples = run(one_cycle(VSphereCollector(vcenter(s.url))))
    assert pick(samples, "vsphere_host", host="h1")


#: a SAML 2.0 bearer assertion as vCenter's single sign-on issues one (here unsigned: the simulator reads only its
#: subject, where vCenter also checks the signature and validity of what its own STS signed)
SAML_TOKEN = ('<saml2:Assertion xmlns:saml2="urn:oasis:names:tc:SAML:2.0:assertion" ID="_a1" IssueInstant='
              '"2026-01-01T00:00:00Z" Version="2.0"><saml2:Issuer>https://vc1.example.com/websso/SAML2/Metadata/'
              'vsphere.local</saml2:Issuer><saml2:Subject><saml2:NameID Format="http://schemas.xmlsoap.org/claims/'
              'UPN">monitor@vsphere.local</saml2:NameID></saml2:Subject></saml2:Assertion>')


def test_a_saml_token_logs_in_by_token_and_is_never_shown(sim, tmp_path):
    token = tmp_path / "vc1.token"
    token.write_text(SAML_TOKEN + "\n")
    token.chmod(0o600)
    before = sim.stats()["methods"]
    c = VSphereCollector(VCenterConfig(name="vc1", url=sim.url, token_file=token, verify_tls=False))
    _, samples = run(one_cycle(c))
    after = sim.stats()["methods"]
    assert pick(samples, "vsphere_vm", vm="db2prod01")
    assert after.get("LoginByToken", 0) - before.get("LoginByToken", 0) == 1
    assert after.get("Login", 0) == before.get("Login", 0)
    token.write_text("<saml2:Assertion xmlns:saml2='urn:oasis:names:tc:SAML:2.0:assertion'/>")  # no subject
    with pytest.raises(CollectorError, match=r"^vcenter vc1: login by token refused$"):
        run(one_cycle(VSphereCollector(VCenterConfig(name="vc1", url=sim.url, token_file=token, verify_tls=False))))


def test_the_session_speaks_the_newest_api_version_both_sides_know(sim):
    """vimServiceVersions.xml, as every vSphere client reads it: the simulator offers 6.5 and older; a server
    newer than this code is spoken to in the newest version the collector's type tables know."""
    c = VSphereCollector(vcenter(sim.url))
    try:
        session = c.connector.connect()
        assert session.stub.versionId == '"urn:vim25/6.5"'
        session.close()
    finally:
        run(c.close())
    assert spoken_version(["9.1.0.0", "8.0.3.0", "8.0.2.0", "7.0"]) == "8.0.3.0"
    assert spoken_version(["6.7.3", "6.7", "6.5"]) == "6.7.3"
    assert spoken_version(["next"]) is None


def test_batches_respect_vcenter_max_query_metrics(tmp_path):
    """vCenter's config.vpxd.stats.maxQueryMetrics = 64: the simulator refuses bigger calls."""
    scenario = {"max_query_metrics": 64, "hosts": [{"name": f"h{i}", "vms": [{"name": f"vm{i}{j}"} for j in range(3)]}
                                                   for i in range(2)]}
    with Simulator.of(scenario, tmp_path) as s:
        c = VSphereCollector(vcenter(s.url))
        before = s.stats()["methods"].get("QueryPerf", 0)
        _, samples = run(one_cycle(c))
        calls = s.stats()["methods"]["QueryPerf"] - before
    assert {x.tags["vm"] for x in pick(samples, "vsphere_vm")} == {f"vm{i}{j}" for i in range(2) for j in range(3)}
    assert {x.tags["host"] for x in pick(samples, "vsphere_host")} == {"h0", "h1"}
    # 6 VMs x 27 metric ids + 2 hosts x 24 = 210 ids, at most 64 a call
    assert calls == 4


def test_a_vanished_vm_costs_only_its_own_samples(sim, caplog):
    """A VM deleted between the inventory read and QueryPerf faults the whole call in vCenter."""
    async def go(c):
        await c.describe()
        c._inventory_at = time.monotonic() + 3600  # keep the doctored inventory for this cycle
        app = next(v for v in c.inventory.vms.values() if v.name == "app01")
        ghost = dataclasses.replace(app, moid="vm-999999", name="ghost")
        c.inventory.vms[ghost.moid] = ghost
        return await c.collect()
    records = run(using(sim.url, go))
    assert {s.tags["vm"] for s in pick(records, "vsphere_vm")} == {"db2prod01", "app01"}
    assert "vm-999999" in caplog.text


def test_a_vm_vanished_during_the_facts_pass_costs_only_its_own_row(sim, monkeypatch):
    """The full rows are read by reference; a VM deleted after its reference was read faults the
    whole page in vCenter, so the page is halved until only that VM is left out."""
    from db2vtop.collectors.vsphere import inventory
    listed = inventory.vm_refs
    monkeypatch.setattr(inventory, "vm_refs", lambda s, view: [*listed(s, view), Ref("VirtualMachine", "vm-999999")])
    records = run(using(sim.url, lambda c: c.collect()))
    vms = sorted(f.tags["vm"] for f in records if isinstance(f, Fact) and f.kind == "vsphere_vm")
    assert vms == sorted(f.tags["vm"] for f in collected_facts(sim) if f.kind == "vsphere_vm")
    assert {s.tags["vm"] for s in pick(records, "vsphere_vm")} == {"db2prod01", "app01"}


def collected_facts(sim) -> list[Fact]:
    return run(using(sim.url, lambda c: c.describe()))


def test_an_outage_longer_than_vcenters_hour_is_annotated(sim):
    async def go(c):
        await c.describe()
        await c.collect()
        for moid in c.perf_state.entity_start:  # as if the last cycle had run two hours ago
            c.perf_state.entity_start[moid] -= 7200
        return await c.collect()
    records = run(using(sim.url, go))
    (gap,) = [r for r in records if isinstance(r, Annotation)]
    assert gap.event == "gap" and gap.tags == {"vcenter": "vc1"} and "expired" in gap.text
    stamps = sorted({r.ts for r in pick(records, "vsphere_vm", vm="db2prod01")})
    assert len(stamps) >= 178 and stamps[-1] - stamps[0] >= 3540 * 10**9  # the hour vCenter still had


def test_simulator_perf_contract(sim):
    """What other tools rely on: oldest first, zeros kept aligned (normal format too),
    "*" = the instances QueryAvailablePerfMetric lists, startTime exclusive."""
    from pyVim.connect import Disconnect, SmartConnect
    from pyVmomi import vim

    si = SmartConnect(host="127.0.0.1", port=sim.port, user="u", pwd="p", disableSslCertValidation=True)
    try:
        content = si.RetrieveContent()
        pm = content.perfManager
        key = {f"{c.groupInfo.key}.{c.nameInfo.key}.{c.rollupType}": c.key for c in pm.perfCounter}
        view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
        vm = next(v for v in view.view if v.name == "db2prod01")
        mid = vim.PerformanceManager.MetricId
        spec = vim.PerformanceManager.QuerySpec(entity=vm, intervalId=20, maxSample=4, metricId=[
            mid(counterId=key["cpu.costop.summation"], instance="*"), mid(counterId=key["mem.swapinRate.average"])])
        (res,) = pm.QueryPerf([spec])
        stamps = [s.timestamp for s in res.sampleInfo]
        assert len(stamps) == 4 and stamps == sorted(stamps)
        values = {(v.id.counterId, v.id.instance): list(v.value) for v in res.value}
        assert values[(key["mem.swapinRate.average"], "")] == [0, 0, 0, 0]
        assert values[(key["cpu.costop.summation"], "3")] == [1200] * 4
        available = {(m.counterId, m.instance) for m in pm.QueryAvailablePerfMetric(entity=vm, intervalId=20)
                     if m.counterId == key["cpu.costop.summation"]}
        assert available == {k for k in values if k[0] == key["cpu.costop.summation"]}
        spec.startTime, spec.maxSample = stamps[1], None
        (later,) = pm.QueryPerf([spec])
        assert [s.timestamp for s in later.sampleInfo][:2] == stamps[2:]  # (a newer one may have come)
    finally:
        Disconnect(si)


def test_chunking_splits_by_entities_and_metrics():
    ids = tuple((k, "") for k in range(10))
    specs = [Spec("vm", f"vm-{i}", None, ids) for i in range(7)]
    calls = chunk(specs, max_metrics=25, max_entities=3)
    assert all(sum(len(s.metric_ids) for s in c) <= 25 and len(c) <= 3 for c in calls)
    got = sorted((s.moid, k) for c in calls for s in c for k, _ in s.metric_ids)
    assert got == sorted((f"vm-{i}", k) for i in range(7) for k in range(10))  # nothing lost, nothing twice
    assert len(chunk(specs, 0, 250)) == 1


def test_a_steady_cycle_asks_a_vm_with_one_vnic_for_it_by_name_and_any_other_for_every_instance():
    """With "*" vCenter adds the aggregate of a VM's vNICs, a series of each net counter nothing reads; a VM
    whose facts show one vNIC asks for that instance (the rows stay the vNIC's: see the consecutive-cycles
    test), one with none, several or a vNIC without a key keeps "*"; nothing else changes."""
    ids = CounterIds({c.name: i for i, c in enumerate(VM_COUNTERS)})
    net = {i for i, c in enumerate(VM_COUNTERS) if c.name.startswith("net.")}
    maps = TagMaps()
    for moid, nics in (("one", [{"key": 4000}]), ("none", []), ("two", [{"key": 4000}, {"key": 4001}]),
                       ("nokey", [{"key": None}])):
        maps.set_vm(moid, {}, nics)
    assert maps.vm_nic == {"one": "4000"}
    one = ids.steady_for("vm", maps.vm_nic.get("one"))
    assert [(k, i) for k, i in one if k in net] == [(k, "4000") for k in sorted(net)]
    assert [(k, i) for k, i in one if k not in net] == [(k, i) for k, i in ids.steady["vm"] if k not in net]
    for other in ("none", "two", "nokey"):
        assert ids.steady_for("vm", maps.vm_nic.get(other)) == ids.steady["vm"]
    assert all(i == "*" for k, i in ids.steady["vm"] if k in net)
    maps.set_vm("one", {}, [{"key": 4000}, {"key": 4001}])  # a vNIC added: "*" again
    maps.forget_vm("two")
    assert maps.vm_nic == {} and set(maps.vm_disks) == {"one", "none", "nokey"}


def test_esx_standalone_host(tmp_path):
    lun = "naa.600a098038303099"
    scenario = {"hosts": [{"name": "esx-solo", "perf": {"cpu.usage.average": 1234},
                           "vms": [{"name": "db2solo", "num_cpu": 4, "perf": {"cpu.ready.summation": 1600}}]}],
                "events": [{"type": "EventEx", "id": "esx.problem.scsi.device.io.latency.high", "ago_s": 120,
                            "host": "esx-solo", "arguments": {"1": lun, "2": "900", "3": "31000"}}]}

    async def look_back(c: VSphereCollector) -> list:
        try:
            await c.describe()
            return await c.lookback(600)
        finally:
            await c.close()

    with Simulator.of(scenario, tmp_path, esx=True) as s:
        facts, samples = run(one_cycle(VSphereCollector(vcenter(s.url))))
        records = run(look_back(VSphereCollector(vcenter(s.url))))
    assert newest(samples, "vsphere_host", host="esx-solo")["cpu_usage_pct"] == pytest.approx(12.34)
    assert newest(samples, "vsphere_vm", vm="db2solo")["cpu_ready_pct"] == pytest.approx(2.0)  # 1600/20000/4
    assert fact(facts, "vsphere_vm", vm="db2solo")["host"] == "esx-solo"
    # the host's own event log (its EventManager, ha-eventmgr)
    assert [(a.name, a.text) for a in records if isinstance(a, Annotation)] == [
        ("esx.problem.scsi.device.io.latency.high", f"esx-solo: device {lun} I/O latency rose from 0.9 ms to 31.0 ms")]


def test_session_invalidated_relogin_within_one_cycle(sim):
    async def go(c):
        await c.describe()
        await c.collect()
        logins = sim.stats()["methods"]["Login"]
        sim.signal(signal.SIGUSR1)
        time.sleep(0.5)
        records = await c.collect()  # the very next cycle succeeds
        return records, c.logins, sim.stats()["methods"]["Login"] - logins
    records, logins, new_logins = run(using(sim.url, go))
    assert (logins, new_logins) == (2, 1)
    assert pick(records, "vsphere_vm_quickstats", vm="db2prod01")


class Ticker(BaseCollector):
    async def collect(self):
        return [Sample("tick", {}, {"v": 1})]


class Capture:
    def __init__(self):
        self.samples: list[Sample] = []

    def submit(self, samples=(), facts=(), annotations=()):
        self.samples += samples

    def status(self, name: str) -> list[str]:
        return [s.fields["status"] for s in self.samples
                if s.measurement == SELF_MEASUREMENT and s.tags["collector"] == name]


class Batches:
    """Every submit as it came: (samples, facts)."""

    def __init__(self):
        self.batches: list[tuple[list[Sample], list[Fact]]] = []

    def submit(self, samples=(), facts=(), annotations=()):
        self.batches.append((list(samples), list(facts)))


def test_a_cycle_hands_its_records_on_in_parts_each_vm_fact_before_its_samples(sim, monkeypatch):
    """A large vCenter's cycle need not hold all its samples until its end: past HANDOFF records it hands
    them on while it runs. Nothing is lost or repeated, and live rules find a VM's fact before its samples."""
    from db2vtop.collectors.vsphere import collector as collector_mod

    whole = Batches()
    c = VSphereCollector(vcenter(sim.url))
    assert c.cycle_timeout() > c.timeout  # the first cycle is the whole facts pass: it may take longer
    run(Runtime([c], [whole])._cycle(c))
    assert c.cycle_timeout() == c.timeout
    run(c.close())
    (only,) = whole.batches

    monkeypatch.setattr(collector_mod, "HANDOFF", 3)
    monkeypatch.setattr(collector_mod, "HANDOFF_FIRST", 3)
    parts = Batches()
    c = VSphereCollector(vcenter(sim.url))
    run(Runtime([c], [parts])._cycle(c))
    run(c.close())
    assert len(parts.batches) > 3
    first_fact, first_sample = {}, {}
    for i, (samples, facts) in enumerate(parts.batches):
        for f in facts:
            first_fact.setdefault(f.tags.get("vm"), i)
        for x in samples:
            first_sample.setdefault(x.tags.get("vm"), i)
    assert {"db2prod01", "app01"} <= set(first_sample)
    assert all(first_fact[vm] <= i for vm, i in first_sample.items() if vm)

    def keys(batches):  # a first cycle takes each series' newest sample: one each
        return sorted((x.measurement, canonical_tags(x.tags)) for samples, _ in batches for x in samples
                      if x.measurement != SELF_MEASUREMENT)
    assert keys(parts.batches) == keys([only])  # the same series, none twice
    (me,) = [x for samples, _ in parts.batches for x in samples if x.measurement == SELF_MEASUREMENT]
    assert me.fields["samples"] == len(keys([only])) and me.fields["status"] == "ok"


def test_a_first_cycle_hands_on_in_smaller_parts_than_a_steady_one(sim, monkeypatch):
    """A first cycle (the facts pass, every entity's history) hands its records on in parts of HANDOFF_FIRST,
    so the store and checks work while vCenter is still answering; a steady cycle keeps HANDOFF (one store
    transaction for a cycle below it). The parts hold the same series as one batch would, none twice."""
    from db2vtop.collectors.vsphere import collector as collector_mod

    monkeypatch.setattr(collector_mod, "HANDOFF", 1_000_000)
    monkeypatch.setattr(collector_mod, "HANDOFF_FIRST", 5)
    out = Batches()
    c = VSphereCollector(vcenter(sim.url))
    c.history_samples, c.history_fields = 10, {"vsphere_vm": frozenset({"cpu_ready_pct"})}
    rt = Runtime([c], [out])
    run(rt._cycle(c))
    first = len(out.batches)
    assert first > 2
    series = [(x.measurement, canonical_tags(x.tags), x.ts) for samples, _ in out.batches for x in samples]
    assert len(series) == len(set(series))
    out.batches.clear()
    time.sleep(0.1)
    run(rt._cycle(c))   # steady: one batch, whatever it holds
    run(c.close())
    assert len(out.batches) == 1


def test_a_first_cycle_reaches_back_only_for_the_counters_the_live_rules_read(sim):
    """An entity's first cycle asks vCenter for the history of what the live rules read (here CPU ready), the
    newest sample of everything else: a tenth of the samples a full reach-back would hand on at 10,000 VMs.
    Each series has one sample a time, the newest with every field."""
    out = Batches()
    c = VSphereCollector(vcenter(sim.url))
    c.history_samples, c.history_fields = 10, {"vsphere_vm": frozenset({"cpu_ready_pct"})}
    run(Runtime([c], [out])._cycle(c))
    run(c.close())
    samples = [x for batch, _ in out.batches for x in batch if x.measurement != SELF_MEASUREMENT]
    by_series: dict[tuple[str, str], list[Sample]] = {}
    for x in samples:
        by_series.setdefault((x.measurement, canonical_tags(x.tags)), []).append(x)
    for key, xs in by_series.items():
        assert len({x.ts for x in xs}) == len(xs), f"{key}: a time twice"
        assert [x.ts for x in xs] == sorted(x.ts for x in xs), f"{key}: out of time order"
    vm = by_series[("vsphere_vm", canonical_tags({"vcenter": "vc1", "vm": "db2prod01", "host": "esx01",
                                                  "cluster": "prod"}))]
    assert len(vm) > 3, "no history of the counters a live rule reads"
    *older, newest = vm
    assert all(set(x.fields) == {"cpu_ready_pct", "vcpus"} for x in older)
    assert {"cpu_ready_pct", "cpu_usage_pct", "mem_balloon_bytes"} <= set(newest.fields)
    assert all(len(xs) == 1 for (m, _), xs in by_series.items() if m in ("vsphere_vm_disk", "vsphere_host",
                                                                          "vsphere_host_lun"))
    assert c.perf_state.entity_start  # the marks moved to the newest: the next cycle asks for what is new


def test_a_restart_resumes_after_the_samples_the_store_holds_and_fills_the_gap(sim):
    """Given where each entity's stored samples end (a restart: Pipeline reads it from the store), the first cycle
    asks vCenter for nothing older: no history the store holds comes again (the engine reads that from the
    store), a VM one of whose series stopped a minute earlier gets every sample since with every counter, and
    an entity the store never saw still reaches back for its history."""
    history = {"vsphere_vm": frozenset({"cpu_ready_pct"}), "vsphere_host": None}

    def first_cycle(marks):
        out = Batches()
        c = VSphereCollector(vcenter(sim.url))
        c.history_samples, c.history_fields = 10, history
        if marks is not None:
            assert c.resume_marks(lambda m: [(tags, ts) for mm, tags, ts in marks if mm == m])
        run(Runtime([c], [out])._cycle(c))
        run(c.close())
        return [x for samples, _ in out.batches for x in samples if x.measurement != SELF_MEASUREMENT]

    stored = first_cycle(None)
    vm_rows = pick(stored, "vsphere_vm")
    newest_ts = max(x.ts for x in vm_rows)
    assert len({x.ts for x in vm_rows}) >= 4 and len(pick(stored, "vsphere_host")) >= 4  # history to resume after
    marks = {}
    for x in vm_rows + pick(stored, "vsphere_host"):
        key = (x.measurement, tuple(sorted(x.tags.items())))
        marks[key] = max(marks.get(key, 0), x.ts)
    gap = 3 * 20 * 10**9
    series = [(m, dict(tags), ts) for (m, tags), ts in marks.items() if dict(tags).get("vm") != "app01"]
    # app01: never stored; db2prod01 also has a series of the host it left, which ends a minute earlier (the
    # oldest of a VM's series counts: a VM moved meanwhile, or two VMs of one name, skip nothing)
    series.append(("vsphere_vm", {"vcenter": "vc1", "vm": "db2prod01", "host": "esx-before"}, newest_ts - gap))
    again = first_cycle(series)
    for x in again:
        if x.tags.get("vm") in ("db2prod01", "app01"):
            continue
        assert x.ts > newest_ts - 20 * 10**9, x  # nothing the store holds (a new sample may have come)
    filled = sorted(x.ts for x in pick(again, "vsphere_vm", vm="db2prod01"))
    assert filled[:3] == [newest_ts - gap + k * 20 * 10**9 for k in (1, 2, 3)]
    full = set(newest(stored, "vsphere_vm", vm="db2prod01"))
    assert all(set(x.fields) == full for x in pick(again, "vsphere_vm", vm="db2prod01"))
    assert len(pick(again, "vsphere_vm", vm="app01")) == len(pick(stored, "vsphere_vm", vm="app01")) >= 4


def test_a_restart_asks_for_samples_while_the_inventory_is_read_and_tags_them_from_it(sim, monkeypatch):
    """A restart on stored facts asks vCenter for the samples of the VMs powered on in them while the light
    inventory (a hundred round trips at 10,000 VMs) is still read; they are made samples from that inventory
    once it is in, after the cycle's facts: every VM and host once, nothing twice, nothing the store holds."""
    from db2vtop.collectors.vsphere import collector as collector_mod
    from db2vtop.collectors.vsphere.watch import InventoryWatch

    history = {"vsphere_vm": frozenset({"cpu_ready_pct"})}
    out = Batches()
    c = VSphereCollector(vcenter(sim.url))
    c.history_samples, c.history_fields = 10, history
    run(Runtime([c], [out])._cycle(c))
    run(c.close())
    stored = [x for samples, _ in out.batches for x in samples if x.measurement != SELF_MEASUREMENT]
    facts = [f for _, fs in out.batches for f in fs]
    newest_ts = max(x.ts for x in pick(stored, "vsphere_vm"))

    events: list[str] = []
    poll, query = InventoryWatch.poll, collector_mod.perf_query

    def watched_poll(self):
        try:
            return poll(self)
        finally:
            events.append("inventory read")

    def watched_query(session, pm, specs, window=None):
        events.append("perf " + ",".join(sorted({x.kind for x in specs})))
        return query(session, pm, specs, window)
    monkeypatch.setattr(InventoryWatch, "poll", watched_poll)
    monkeypatch.setattr(collector_mod, "perf_query", watched_query)

    time.sleep((time.time() // 20 + 1) * 20 + 1 - time.time())  # a new 20 s sample: what the restart must get
    again = VSphereCollector(vcenter(sim.url))
    again.history_samples, again.history_fields = 10, history
    again.resume([f for f in facts if f.kind in again.resumes])
    ends: dict[tuple, int] = {}  # each series' newest, as the store answers
    for x in stored:
        key = (x.measurement, tuple(sorted(x.tags.items())))
        ends[key] = max(ends.get(key, 0), x.ts)
    assert again.resume_marks(lambda m: [(dict(tags), ts) for (mm, tags), ts in ends.items() if mm == m])
    out = Batches()
    run(Runtime([again], [out])._cycle(again))
    run(again.close())
    assert events.index("perf vm") < events.index("inventory read")
    samples = [x for b, _ in out.batches for x in b if x.measurement in REALTIME]
    keys = [(x.measurement, canonical_tags(x.tags), x.ts) for x in samples]
    assert len(keys) == len(set(keys))
    assert all(x.ts > newest_ts - 20 * 10**9 for x in samples)
    assert {x.tags.get("host") for x in samples} == {"esx01"} and all(x.tags.get("cluster") == "prod" for x in samples)
    assert sorted(x.tags["vm"] for x in pick(samples, "vsphere_vm")) == ["app01", "db2prod01"]
    assert len(pick(samples, "vsphere_host")) == 1


def test_an_entity_asked_in_two_specs_stays_in_one_call():
    ids = tuple((k, "") for k in range(8))
    specs = [Spec("vm", f"vm-{i}", s, ids[:k]) for i in range(5) for s, k in ((1.0, 3), (None, 5))]
    for calls in (chunk(specs, 16, 250), chunk(specs, 0, 3), chunk(specs, 9, 4)):
        for call in calls:
            assert all(sum(1 for s in call if s.moid == moid) == 2 for moid in {s.moid for s in call})
        assert [s for call in calls for s in call] == specs


@pytest.mark.slow
def test_vcenter_down_is_recorded_others_continue_and_it_recovers_without_gaps(tmp_path):
    sim = Simulator.of({"hosts": [{"name": "h1", "vms": [{"name": "vm1"}]}]}, tmp_path).start()
    try:
        vc = VSphereCollector(vcenter(sim.url, interval=1.0, timeout=5.0))
        vc.connector.max_backoff_s = 2.0  # retry soon after the restart; the doubling itself is unchanged
        tick = Ticker("tick", 0.2)
        out = Capture()
        runtime = Runtime([vc, tick], [out])

        async def until(cond, limit: float):
            deadline = time.monotonic() + limit
            while not cond():
                assert time.monotonic() < deadline, "condition not reached in time"
                await asyncio.sleep(0.1)

        async def scenario_run():
            task = asyncio.create_task(runtime.run())
            try:
                await until(lambda: "ok" in out.status(vc.name), 30)
                sim.kill()
                killed = len(out.status(vc.name))
                ticks_before = len(out.status("tick"))
                await until(lambda: out.status(vc.name)[killed:].count("error") >= 2, 30)
                assert len(out.status("tick")) > ticks_before + 5  # the other collector is unaffected
                outage_end = (time.time() // 20 + 1) * 20 + 1  # let the outage span a new 20 s sample
                await asyncio.sleep(max(0.0, outage_end - time.time()))
                sim.listen = f"127.0.0.1:{sim.port}"
                sim.start()
                await until(lambda: out.status(vc.name)[-1:] == ["ok"], 60)
            finally:
                runtime.stop()
                await task
        run(scenario_run())
    finally:
        sim.stop()
    errors = [s.fields["last_error"] for s in out.samples
              if s.measurement == SELF_MEASUREMENT and s.tags["collector"] == vc.name and s.fields["status"] == "error"]
    assert errors and "vc1" in errors[-1]
    stamps = sorted(s.ts for s in out.samples if s.measurement == "vsphere_vm" and s.tags["vm"] == "vm1")
    assert len(stamps) >= 2, "samples before and after the outage"
    assert all(b - a == 20 * 10**9 for a, b in itertools.pairwise(stamps)), "a lost or repeated sample"


@pytest.mark.slow
def test_consecutive_cycles_neither_lose_nor_repeat_a_sample(sim):
    async def go(c):
        rows = []
        await c.describe()
        rows += await c.collect()
        await asyncio.sleep((time.time() // 20 + 1) * 20 + 1 - time.time())  # a new sample
        rows += await c.collect()
        rows += await c.collect()  # nothing new yet: nothing repeated
        return rows
    rows = [r for r in run(using(sim.url, go)) if r.measurement in REALTIME]
    series: dict[tuple, list[int]] = {}
    for r in rows:
        series.setdefault((r.measurement, tuple(sorted(r.tags.items()))), []).append(r.ts)
    assert {m for m, _ in series} == {"vsphere_vm", "vsphere_vm_disk", "vsphere_vm_net", "vsphere_host",
                                      "vsphere_host_lun", "vsphere_datastore"}
    for key, stamps in series.items():
        assert len(stamps) >= 2, key
        assert sorted(stamps) == list(range(min(stamps), max(stamps) + 1, 20 * 10**9)), key


def test_a_steady_cycle_takes_balloon_and_swapped_from_quickstats_and_a_reach_back_from_the_counters(tmp_path):
    """The light inventory reads every VM's quickStats each cycle; a steady cycle does not ask vCenter's counters
    for the same levels (two metric ids a VM in every call). Here the counters and quickStats disagree, so each
    value says where it came from: a first cycle and a lookback reach back and keep the counters' own, a steady
    cycle's newest sample has quickStats' (a level quickStats leave out is 0 there, as in vsphere_vm_quickstats)."""
    scenario = {"hosts": [{"name": "esx01", "vms": [
        {"name": "db2a", "quickstats": {"balloonedMemory": 3072, "swappedMemory": 512},
         "perf": {"mem.vmmemctl.average": 1048576, "mem.swapped.average": 2048}},
        {"name": "db2b", "perf": {"mem.vmmemctl.average": 1048576}}]}]}

    async def go(c):
        await c.describe()
        first = await c.collect()
        await asyncio.sleep((time.time() // 20 + 1) * 20 + 1 - time.time())  # a new sample
        steady = await c.collect()
        return first, steady, await c.lookback(120)

    with Simulator.of(scenario, tmp_path) as s:
        first, steady, back = run(using(s.url, go))
    assert newest(first, "vsphere_vm", vm="db2a")["mem_balloon_bytes"] == GiB
    assert newest(first, "vsphere_vm", vm="db2a")["mem_swapped_bytes"] == 2 * MiB
    (a,) = pick(steady, "vsphere_vm", vm="db2a")
    assert (a.fields["mem_balloon_bytes"], a.fields["mem_swapped_bytes"]) == (3 * GiB, 512 * MiB)
    assert a.fields["cpu_usage_pct"] is not None  # the rest of the sample still from the counters
    (b,) = pick(steady, "vsphere_vm", vm="db2b")
    assert (b.fields["mem_balloon_bytes"], b.fields["mem_swapped_bytes"]) == (0, 0)
    assert newest(steady, "vsphere_vm_quickstats", vm="db2b")["balloon_bytes"] == 0
    assert {x.fields["mem_balloon_bytes"] for x in pick(back, "vsphere_vm", vm="db2a")} == {GiB}


def test_agent_once_fills_the_store(sim, tmp_path):
    from db2vtop.agent.core.store import Store

    ca = tmp_path / "ca.pem"
    ca.write_text(ssl.get_server_certificate(("127.0.0.1", sim.port)))
    cfg = tmp_path / "db2vtop.toml"
    store = tmp_path / "m.db"
    cfg.write_text(f'[store]\npath = "{store}"\n[guest]\nenabled = false\n[[vcenter]]\nname = "vc1"\n'
                   f'url = "{sim.url}"\nuser = "monitor"\npassword_env = "VC_TEST_PASSWORD"\nca_file = "{ca}"\n')
    logins, logouts = (sim.stats()["methods"].get(m, 0) for m in ("Login", "Logout"))
    done = run_cli("agent", "--once", "-c", str(cfg), env={"VC_TEST_PASSWORD": "x"})
    assert done.returncode == 0, done.stderr
    methods = sim.stats()["methods"]
    assert (methods["Login"] - logins, methods.get("Logout", 0) - logouts) == (1, 1)  # one session, ended at exit
    with Store(store) as s:
        measurements = set(s.measurements())
        assert {"vsphere_vm", "vsphere_vm_disk", "vsphere_vm_net", "vsphere_host",
                "vsphere_host_lun", "vsphere_datastore", "vsphere_vm_quickstats"} <= measurements
        assert {f.tags["vm"] for f in s.facts("vsphere_vm")} == {"db2prod01", "app01", "off01"}
        assert [f.tags["host"] for f in s.facts("vsphere_host")] == ["esx01"]
        (row,) = [r for r in s.latest("vsphere_vm") if r.tags["vm"] == "db2prod01"]
        assert row.fields["mem_balloon_bytes"] == 2 * GiB


#: what an agent watching a vCenter has no use for: the TUI (textual, rich, pyte), SSH (paramiko), the InfluxDB client,
#: pyVim (pyvmomi's connect helpers and SSO client: the session is pyVmomi's stub alone), pyvmomi's type tables of
#: the APIs other than vim (pbm, sms, eam, vslm, vSAN health) and the test tools. Each costs every agent memory for
#: the process's life (textual with rich alone is ~15 MB): imported only where used.
NOT_FOR_A_VCENTER_AGENT = ("textual", "rich", "pyte", "paramiko", "influxdb_client", "pyVim", "hypothesis", "pytest",
                           *(f"pyVmomi._typeinfo_{api}" for api in ("eam", "pbm", "sms", "vslm", "vsanhealth")))


def test_an_agent_watching_a_vcenter_imports_no_tui_ssh_or_influxdb_client(sim, tmp_path):
    """The whole `agent --once` of a vCenter (config, store, checks, the vSphere collector, shutdown), in a
    process of its own: the modules it ended with."""
    cfg = tmp_path / "db2vtop.toml"
    cfg.write_text(f'[store]\npath = "{tmp_path / "m.db"}"\n[guest]\nenabled = false\n[[vcenter]]\nname = "vc1"\n'
                   f'url = "{sim.url}"\nuser = "monitor"\npassword_env = "VC_TEST_PASSWORD"\nverify_tls = false\n')
    cfg.chmod(0o600)
    seen = tmp_path / "modules.json"
    code = ("import atexit, json, runpy, sys\n"
            f"atexit.register(lambda: open({str(seen)!r}, 'w').write(json.dumps(\n"
            "    sorted(k for k, m in sys.modules.items() if m is not None))))\n"  # (None: marked absent)
            f"sys.argv = ['db2vtop', 'agent', '--once', '-c', {str(cfg)!r}]\n"
            "runpy.run_module('db2vtop.agent', run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "VC_TEST_PASSWORD": "x"})
    assert done.returncode == 0, done.stderr
    modules = json.loads(seen.read_text())
    assert "db2vtop.collectors.vsphere.collector" in modules   # it did watch the vCenter
    assert "pyVmomi.SoapAdapter" in modules   # its session is pyvmomi's
    assert not [m for m in modules if m.split(".")[0] in NOT_FOR_A_VCENTER_AGENT or m in NOT_FOR_A_VCENTER_AGENT]


_XML_TEXT = st.text(alphabet=st.sampled_from(list("<>/=\"' abcxyz:0123456789,-TZ.\n")) , max_size=300)
_ENVELOPE = ('<?xml version="1.0"?><s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/" '
             'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"><s:Body><R xmlns="urn:vim25">{}</R>'
             '</s:Body></s:Envelope>')
_PIECES = st.sampled_from([
    "<returnval>", "</returnval>", '<entity type="VirtualMachine">vm-1</entity>', "<sampleInfoCSV>", "</sampleInfoCSV>",
    "20,2026-11-22T02:56:20Z", "20,bad", ",", "<value>", "</value>", "<id>", "</id>", "<counterId>12</counterId>",
    "<counterId>x</counterId>", "<instance>0</instance>", "1,2,-1", "999999999999999999999999", "<objects>",
    "</objects>", '<obj type="HostSystem">host-1</obj>', "<obj>h</obj>", "<propSet>", "</propSet>", "<name>name</name>",
    '<val xsi:type="xsd:int">x</val>', "<val>a</val>", "<token>t</token>", "<missingSet/>"])


@settings(max_examples=300, deadline=None)
@given(st.one_of(_XML_TEXT, st.lists(_PIECES, max_size=30).map(lambda p: _ENVELOPE.format("".join(p)))))
@example(_ENVELOPE.format("<returnval><sampleInfoCSV>20,bad</sampleInfoCSV></returnval>"))
@example(_ENVELOPE.format("<returnval><sampleInfoCSV>20,2026-11-22T02:56:20Z</sampleInfoCSV><value><id>"
                          "<counterId>x</counterId></id><value>1</value></value></returnval>"))
def test_fuzzed_responses_raise_only_collector_errors(text):
    with contextlib.suppress(CollectorError):
        parse_objects(soap_body(text.encode()))
    with contextlib.suppress(CollectorError):  # QueryPerf answers are parsed as they stream in
        _parse_stream(Answer(text.encode()), RETURNVAL, entity_result)


def gzip_bomb(mib: int, inside: bytes = b"A") -> bytes:
    """A gzip'd SOAP answer that inflates to `mib` MiB (its text in one element), made in small steps."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [z.compress(_ENVELOPE.split("{}")[0].encode() + b"<returnval><x>")]
    block = inside * (2**20 // len(inside))
    parts += [z.compress(block) for _ in range(mib)]
    parts.append(z.compress(b"</x></returnval>" + _ENVELOPE.split("{}")[1].encode()) + z.flush())
    return b"".join(parts)


def test_a_gzip_bomb_stops_at_the_answer_bound_not_in_memory():
    """0.5 MB on the wire inflated to 512 MiB in post() (1.5 GB RSS): now the inflating stops one byte past
    max_response_bytes (64 MiB here), whatever the parser would have held."""
    import tracemalloc

    bomb = gzip_bomb(512)
    assert len(bomb) < 2**20
    tracemalloc.start()
    try:
        with pytest.raises(CollectorError, match="InvalidResponse: answer larger than 67108864 bytes"):
            _parse_stream(Answer(bomb, "gzip"), RETURNVAL, entity_result)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * 64 * 2**20, peak
    many = _ENVELOPE.format("<a/>" * (MAX_RESPONSE_BYTES // BYTES_PER_ELEMENT + 1)).encode()  # empty elements cost
    # far more than their text
    with pytest.raises(CollectorError, match="elements"):
        _parse_stream(Answer(many), None, None)


def test_a_whole_answer_is_held_to_its_element_bound_counting_start_tags_only():
    """A whole answer (no per-element events) is bounded by its start tags, counted in the bytes before they are
    parsed: end tags do not count, so an answer of paired elements up to the bound parses, one more is refused."""
    limit = BYTES_PER_ELEMENT * 1000   # max_response_bytes: 1,000 elements
    paired = _ENVELOPE.format("<a>1</a>" * 990).encode()
    assert len(paired) <= limit
    root = _parse_stream(Answer(paired), None, None, limit)
    assert len(root.findall(".//{urn:vim25}a")) == 990
    with pytest.raises(CollectorError, match="answer of more than 1000 elements"):
        _parse_stream(Answer(_ENVELOPE.format("<a/>" * 1001).encode()), None, None, limit)
    with pytest.raises(CollectorError, match="answer of more than 1000 elements"):  # the same bound, streamed
        _parse_stream(Answer(_ENVELOPE.format("<a/>" * 1001).encode()), RETURNVAL, entity_result, limit)


ENTITIES = ('<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;">]>'
            '<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/"><s:Body><R>&lol2;</R></s:Body>'
            '</s:Envelope>')


def test_a_doctype_is_refused_in_every_answer_we_parse():
    with pytest.raises(CollectorError, match="InvalidResponse: refused XML: DTDForbidden"):
        soap_body(ENTITIES.encode())
    with pytest.raises(CollectorError, match="DTDForbidden"):
        _parse_stream(Answer(ENTITIES.encode()), RETURNVAL, entity_result)
    with pytest.raises(CollectorError, match="DTDForbidden"):  # the small calls' answers (login, service content)
        _parse_stream(Answer(ENTITIES.encode()), None, None, SMALL_MAX_BYTES)


def test_samples_dated_outside_the_clock_skew_are_left_out_not_taken():
    """A QueryPerf answer dated 9999 became the entity's high-water mark: no later sample was ever taken."""
    now = time.time()
    ok = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 20))
    answer = _ENVELOPE.format(f'<returnval><entity type="VirtualMachine">vm-1</entity><sampleInfoCSV>20,{ok},'
                              f'20,9999-12-31T23:59:40Z</sampleInfoCSV><value><id><counterId>2</counterId>'
                              f'<instance></instance></id><value>5,7</value></value></returnval>')
    (r,) = [entity_result(rv, (now - 86400, now + 86400)) for rv in soap_body(answer.encode()).iter(RETURNVAL)]
    assert r.rejected == 1 and len(r.stamps) == 1 and r.series == [(2, "", [5])]


def test_a_series_with_a_gap_keeps_it_aligned_and_one_without_is_all_numbers():
    """vCenter's CSV leaves a missing sample empty: None in its place, the values after it on their own times;
    a series without a gap is taken whole; anything else in a value is a malformed answer."""
    def series(values: str) -> list:
        answer = _ENVELOPE.format('<returnval><entity type="VirtualMachine">vm-1</entity><sampleInfoCSV>'
                                  '20,2026-11-22T02:56:00Z,20,2026-11-22T02:56:20Z,20,2026-11-22T02:56:40Z'
                                  f'</sampleInfoCSV><value><id><counterId>2</counterId><instance></instance></id>'
                                  f'<value>{values}</value></value></returnval>')
        (r,) = [entity_result(rv) for rv in soap_body(answer.encode()).iter(RETURNVAL)]
        return r.series[0][2]
    assert series("5,,-1") == [5, None, -1]
    assert series(",7,8") == [None, 7, 8]
    assert series("5,6,7") == [5, 6, 7]
    with pytest.raises(CollectorError, match="malformed QueryPerf"):
        series("5,x,7")


def test_facts_of_named_vms_are_those_of_the_full_read(sim, collected):
    """triage --vm reads only the VM, its host and the datastores: the same facts as the full pass
    (the host's share of powered-on VMs included, from every VM's light row)."""
    full = {(f.kind, tuple(sorted(f.tags.items()))): f.data for f in collected[0]}
    vm = next(f for f in collected[0] if f.kind == "vsphere_vm" and f.data.get("power_state") == "poweredOn")
    narrow = run(using(sim.url, lambda c: c.describe_vms([vm.tags["vm"]])))
    kinds = sorted({f.kind for f in narrow})
    assert kinds == ["vsphere_datastore", "vsphere_host", "vsphere_vm"]
    assert [f.tags["vm"] for f in narrow if f.kind == "vsphere_vm"] == [vm.tags["vm"]]
    assert [f.tags["host"] for f in narrow if f.kind == "vsphere_host"] == [vm.data["host"]]
    for f in narrow:
        assert f.data == full[(f.kind, tuple(sorted(f.tags.items())))], f.kind


@contextlib.contextmanager
def operator(sim: Simulator):
    """A vSphere client of the test's own (pyvmomi), changing the inventory as an administrator would."""
    from pyVim.connect import Disconnect, SmartConnect
    si = SmartConnect(host="127.0.0.1", port=sim.port, user="admin", pwd="x", disableSslCertValidation=True)
    try:
        yield si._stub
    finally:
        Disconnect(si)


def _wait_task(task, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while task.info.state not in ("success", "error") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert task.info.state == "success"


def test_inventory_watch_reads_everything_once_then_only_changes(tmp_path):
    """The light inventory is a PropertyCollector filter: the first poll is the full read (truncated
    update sets followed to the end: 120 VMs is more than a page), later ones bring only changes."""
    from pyVmomi import vim
    with Simulator.of({"generate": {"hosts": 3, "vms_per_host": 40}}, tmp_path) as s:
        async def go(c):
            cold = await c.collect()             # the first cycle is the facts pass, perf asked page by page
            base = s.stats()["methods"]
            c._inventory_at = 0.0
            await c.collect()                    # the watch's first poll: everything
            first = s.stats()["methods"]
            vms = dict(c.inventory.vms)
            updates = c._conn.watch.updates
            c._inventory_at = 0.0
            await c.collect()
            second = s.stats()["methods"]
            quiet = c._conn.watch.updates - updates
            moid = next(m for m, v in vms.items() if v.name == "gen-esx001-vm07")
            with operator(s) as stub:
                _wait_task(vim.VirtualMachine(moid, stub).PowerOffVM_Task())
            c._inventory_at = 0.0
            records = await c.collect()
            return cold, base, first, second, vms, quiet, c.inventory.vms[moid], records
        cold, base, first, second, vms, quiet, off, records = run(using(s.url, go))
    assert len(vms) == 120 and all(v.powered_on for v in vms.values())
    assert len([f for f in cold if isinstance(f, Fact) and f.kind == "vsphere_vm"]) == 120
    disks = pick(cold, "vsphere_vm_disk")
    assert {d.tags["vm"] for d in disks} == {v.name for v in vms.values()} and all(d.tags["datastore"] for d in disks)
    assert base["QueryPerf"] >= 3                                 # the hosts, then each page of VMs
    assert "WaitForUpdatesEx" not in base
    assert first.get("WaitForUpdatesEx", 0) >= 2              # truncated, followed
    assert first["RetrievePropertiesEx"] == base["RetrievePropertiesEx"]  # no separate inventory read
    assert quiet == 0 and second["WaitForUpdatesEx"] == first["WaitForUpdatesEx"] + 1
    assert second["RetrievePropertiesEx"] == base["RetrievePropertiesEx"]
    assert not off.powered_on
    assert "gen-esx001-vm07" not in {x.tags["vm"] for x in pick(records, "vsphere_vm_quickstats")}


def test_a_lost_inventory_watch_is_read_again_in_full(sim):
    async def go(c):
        await c.collect()                        # the facts pass
        c._inventory_at = 0.0
        await c.collect()                        # the watch
        before = sim.stats()["methods"]
        c._conn.watch.pc = "session[gone]propertyCollector"  # as after a vCenter restart
        c._inventory_at = 0.0
        records = await c.collect()
        return before, sim.stats()["methods"], records
    before, after, records = run(using(sim.url, go))
    assert after["CreatePropertyCollector"] == before["CreatePropertyCollector"] + 1
    assert {x.tags["vm"] for x in pick(records, "vsphere_vm_quickstats")} >= {"db2prod01", "app01"}


def _reserve_and_move(sim: Simulator, c: VSphereCollector, vm: str, reservation_mhz: int, moved: str,
                      to_host: str) -> None:
    """A CPU reservation on `vm` (ReconfigVM), `moved` to `to_host` (RelocateVM, a vMotion); the moids are
    those the collector knows."""
    from pyVmomi import vim
    vms = {v.name: m for m, v in c.inventory.vms.items()}
    hosts = {h.name: m for m, h in c.inventory.hosts.items()}
    with operator(sim) as stub:
        spec = vim.vm.ConfigSpec(cpuAllocation=vim.ResourceAllocationInfo(reservation=reservation_mhz))
        _wait_task(vim.VirtualMachine(vms[vm], stub).ReconfigVM_Task(spec))
        move = vim.vm.RelocateSpec(host=vim.HostSystem(hosts[to_host], stub))
        _wait_task(vim.VirtualMachine(vms[moved], stub).RelocateVM_Task(move))


def test_reconfigured_and_moved_vms_have_new_facts_within_a_cycle(tmp_path):
    """After the first facts pass a VM's fact follows its own changes: a reservation change (vCenter's
    config.changeVersion moves) and a vMotion are read again, by reference, in the next cycle, with
    both hosts' totals; nothing else is read again."""
    with Simulator.of({"generate": {"hosts": 3, "vms_per_host": 4}}, tmp_path) as s:
        async def go(c):
            first = await c.describe()
            await c.collect()
            c._inventory_at = 0.0
            quiet = await c.collect()            # the watch's first read: nothing differs from the facts
            _reserve_and_move(s, c, "gen-esx000-vm01", 1234, "gen-esx000-vm02", "gen-esx002")
            before = s.stats()["methods"]
            c._inventory_at = 0.0
            changed = await c.collect()
            return first, quiet, changed, before, s.stats()["methods"]
        first, quiet, changed, before, after = run(using(s.url, go))
    assert not [r for r in quiet if isinstance(r, Fact)]
    facts = [r for r in changed if isinstance(r, Fact)]
    assert sorted(f.tags["vm"] for f in facts if f.kind == "vsphere_vm") == ["gen-esx000-vm01", "gen-esx000-vm02"]
    assert fact(first, "vsphere_vm", vm="gen-esx000-vm01")["cpu_reservation_mhz"] != 1234
    assert fact(facts, "vsphere_vm", vm="gen-esx000-vm01")["cpu_reservation_mhz"] == 1234
    assert fact(facts, "vsphere_vm", vm="gen-esx000-vm02")["host"] == "gen-esx002"
    assert sorted(f.tags["host"] for f in facts if f.kind == "vsphere_host") == ["gen-esx000", "gen-esx002"]
    assert fact(facts, "vsphere_host", host="gen-esx000")["vms_powered_on"] == 3
    assert fact(facts, "vsphere_host", host="gen-esx002")["vms_powered_on"] == 5
    assert {s.tags["host"] for s in pick(changed, "vsphere_vm_quickstats", vm="gen-esx000-vm02")} == {"gen-esx002"}
    assert after["RetrievePropertiesEx"] - before.get("RetrievePropertiesEx", 0) == 3  # VMs, hosts, datastores


def test_a_restart_resumed_from_stored_facts_reads_again_only_what_changed_meanwhile(tmp_path):
    """A new collector handed the last run's VM facts (as the pipeline hands it the store's) makes facts
    only for the VMs reconfigured or moved while it was down, keeps every other VM's disk tags, and lets a
    fact whose digest no longer matches (an older db2vtop's) be read again."""
    with Simulator.of({"generate": {"hosts": 3, "vms_per_host": 4}}, tmp_path) as s:
        async def go(first):
            before = await first.collect()         # the cold start: every VM's full row
            _reserve_and_move(s, first, "gen-esx001-vm03", 2345, "gen-esx002-vm01", "gen-esx000")
            await first.close()                    # the changes above happen while no collector runs
            stored = [f for f in before if isinstance(f, Fact)]
            old = next(f for f in stored if f.tags.get("vm") == "gen-esx000-vm00")
            old.data = {**old.data, "identity": "built-by-an-older-db2vtop"}
            again = VSphereCollector(vcenter(s.url))
            try:
                again.resume(stored)
                assert again.facts_due()            # the runtime's first cycle: describe(), then collect()
                facts = await again.describe()
                return before, facts, await again.collect()
            finally:
                await again.close()
        before, facts, samples = run(using(s.url, go))
    assert len([f for f in before if isinstance(f, Fact) and f.kind == "vsphere_vm"]) == 12
    assert sorted(f.tags["vm"] for f in facts if f.kind == "vsphere_vm") == [
        "gen-esx000-vm00", "gen-esx001-vm03", "gen-esx002-vm01"]
    assert fact(facts, "vsphere_vm", vm="gen-esx001-vm03")["cpu_reservation_mhz"] == 2345
    assert fact(facts, "vsphere_vm", vm="gen-esx002-vm01")["host"] == "gen-esx000"
    host_facts = [f for f in facts if f.kind == "vsphere_host"]
    assert {f.tags["host"] for f in host_facts} == {"gen-esx000", "gen-esx001", "gen-esx002"}
    assert {f.data["vms_powered_on"] for f in host_facts if f.tags["host"] == "gen-esx000"} == {5}
    assert not [r for r in samples if isinstance(r, Fact)]
    disks = pick(samples, "vsphere_vm_disk")
    assert {d.tags["vm"] for d in disks} == {f.tags["vm"] for f in before if isinstance(f, Fact)
                                              and f.kind == "vsphere_vm" and f.data["power_state"] == "poweredOn"}
    assert all(d.tags.get("datastore") for d in disks)


def test_agent_restarted_on_its_store_reads_again_only_the_vms_changed_meanwhile(tmp_path):
    """The pipeline hands the collector the store's VM facts: a second `agent --once` on the same store
    reads only the VM reconfigured between the two runs, and the store gets its new fact."""
    from pyVmomi import vim

    from db2vtop.agent.core.store import Store
    with Simulator.of({"generate": {"hosts": 2, "vms_per_host": 3}}, tmp_path) as s:
        cfg, store = tmp_path / "db2vtop.toml", tmp_path / "m.db"
        cfg.write_text(f'[store]\npath = "{store}"\n[guest]\nenabled = false\n[[vcenter]]\nname = "vc1"\n'
                       f'url = "{s.url}"\nuser = "monitor"\npassword_env = "VC_TEST_PASSWORD"\nverify_tls = false\n')
        cfg.chmod(0o600)
        first = run_cli("agent", "--once", "-c", str(cfg), env={"VC_TEST_PASSWORD": "x"})
        assert first.returncode == 0, first.stderr

        async def reconfigure(c):
            await c.collect()
            vm = next(m for m, v in c.inventory.vms.items() if v.name == "gen-esx001-vm02")
            spec = vim.vm.ConfigSpec(memoryAllocation=vim.ResourceAllocationInfo(reservation=4096))
            with operator(s) as stub:
                _wait_task(vim.VirtualMachine(vm, stub).ReconfigVM_Task(spec))
        run(using(s.url, reconfigure))
        second = run_cli("agent", "--once", "-c", str(cfg), env={"VC_TEST_PASSWORD": "x"})
        assert second.returncode == 0, second.stderr
    assert "changed VM" not in first.stderr
    assert "vcenter vc1: facts of 1 changed VM(s) read again" in second.stderr
    with Store(store) as st:
        assert len(st.facts("vsphere_vm")) == 6
        history = st.fact_history("vsphere_vm", {"vcenter": "vc1", "vm": "gen-esx001-vm02"})
        assert [h.data["mem_reservation_mb"] for h in history][-1] == 4096
        assert len(st.fact_history("vsphere_vm", {"vcenter": "vc1", "vm": "gen-esx000-vm00"})) == 1


def test_deleted_and_renamed_vms_and_a_host_gone_meanwhile_get_removals(tmp_path):
    """A VM deleted or renamed is followed within a cycle by a removal of the fact it had (so its findings
    resolve); a restart on stored facts gives removals for what went while it was down, hosts included."""
    from pyVmomi import vim
    with Simulator.of({"generate": {"hosts": 2, "vms_per_host": 3}}, tmp_path) as s:
        async def go(c):
            before = await c.collect()
            with operator(s) as stub:
                vms = {v.name: vim.VirtualMachine(m, stub) for m, v in c.inventory.vms.items()}
                _wait_task(vms["gen-esx000-vm01"].PowerOffVM_Task())
                _wait_task(vms["gen-esx000-vm01"].Destroy_Task())
                _wait_task(vms["gen-esx001-vm02"].Rename_Task("db2prod-renamed"))
            c._inventory_at = 0.0
            after = await c.collect()
            stored = [f for f in before if isinstance(f, Fact)]
            stored.append(Fact("vsphere_host", {"vcenter": "vc1", "host": "esx-decommissioned"}, {"moid": "host-x"}))
            again = VSphereCollector(vcenter(s.url))
            try:
                again.resume(stored)
                return after, await again.describe()
            finally:
                await again.close()
        after, restarted = run(using(s.url, go))
    facts = [r for r in after if isinstance(r, Fact)]
    assert sorted((f.tags["vm"], f.removed) for f in facts if f.kind == "vsphere_vm") == [
        ("db2prod-renamed", False), ("gen-esx000-vm01", True), ("gen-esx001-vm02", True)]
    removed = sorted((f.kind, f.tags.get("vm") or f.tags.get("host")) for f in restarted if f.removed)
    assert removed == [("vsphere_host", "esx-decommissioned"), ("vsphere_vm", "gen-esx000-vm01"),
                       ("vsphere_vm", "gen-esx001-vm02")]
    assert [f.tags["vm"] for f in restarted if f.kind == "vsphere_vm" and not f.removed] == ["db2prod-renamed"]
    assert all(f.tags["vcenter"] == "vc1" for f in restarted)


def test_the_simulators_controllers_list_their_own_vms_devices_only(sim):
    """govmomi's simulator shares its default PCI/PS2/SIO/IDE controllers between VMs; ours gives each
    VM its own, as vCenter does (a shared one lists every VM's devices: a device read many times too big)."""
    from db2vtop.collectors.vsphere.soapxml import Node, as_list, to_int

    async def go(c):
        conn = await c._connection()
        return inv_mod.full_vm_rows(conn.session, inv_mod.vm_refs(conn.session, conn.view))
    rows = run(using(sim.url, go))
    assert len(rows) >= 2
    checked = 0
    for _, p in rows:
        devices = [d for d in as_list(p.get("config.hardware.device")) if isinstance(d, Node)]
        for ctrl in (d for d in devices if d.type in ("VirtualPCIController", "VirtualPS2Controller",
                                                      "VirtualSIOController", "VirtualIDEController")):
            key = to_int(ctrl.get("key"))
            listed = sorted(to_int(k) for k in as_list(ctrl.get("device")))
            assert listed == sorted(to_int(d.get("key")) for d in devices if to_int(d.get("controllerKey")) == key)
            checked += 1
    assert checked >= 4 * len(rows)
