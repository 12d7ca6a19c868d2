"""Who takes what a verdict says the VM lacks, against the vSphere scenario simulator: every contention a
verdict blames names its co-tenants ranked by their share, the first in the verdict's conclusion.

Five hosts of 32 cores at 2,600 MHz (83.2 GHz) and 256 GiB:
- esx-a: ora-db waited for CPUs (ready 15 % per vCPU) from 25 to 10 minutes ago while nightly-etl (32 vCPUs,
  its usage given in MHz: 59,904) ran; web-calm (4 vCPUs, ready 1 %) beside them is healthy;
- esx-b and esx-c share ds-shared: pay-db on esx-b sees VMDK latency 40 ms and DAVG 38 ms for the last 20
  minutes, while backup-srv on esx-c writes 4,000 IOPS and 200,000 KBps to the same datastore (files-srv
  idles there too); mild-db, alone on ds-mild beside pay-db, sees 15 ms on a device at 14 ms: slow enough for
  the verdict, below every rule's level;
- esx-d is overcommitted: crm-db (64 GiB, no reservation) is ballooned 4 GiB for the last 15 minutes while
  cache-big consumes 180 GiB; erp-db, reserved whole, is untouched;
- esx-e: report-db itself takes 90 % of its 16 vCPUs and waits for CPUs (ready 12 %) beside two small VMs.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli
from tests.infra.vsphere_sim import Simulator

SHARED, OWN, MILD = ("naa.6000c2900000000000000000000a0001", "naa.6000c2900000000000000000000a0002",
                     "naa.6000c2900000000000000000000a0003")


def _host(name: str, vms: list[dict], perf: dict | None = None, datastores: tuple[str, ...] = ("ds-own",)) -> dict:
    return {"name": name, "cluster": "prod", "cpu_sockets": 2, "cpu_cores": 32, "cpu_threads": 64, "cpu_mhz": 2600,
            "memory_mb": 262144, "numa_nodes": 2, "hyperthreading": True, "datastores": list(datastores),
            "perf": perf or {}, "vms": vms}


def _vm(name: str, vcpus: int = 4, memory_gib: int = 16, datastore: str = "ds-own", **more) -> dict:
    return {"name": name, "num_cpu": vcpus, "cores_per_socket": vcpus, "memory_mb": memory_gib * 1024,
            "nic": "vmxnet3", "scsi": "pvscsi", "tools": "guestToolsRunning",
            "disks": [{"datastore": datastore, "size_gb": 100}], **more}


def _ready(vcpus: int, pct: float) -> int:
    return round(pct / 100 * 20_000 * vcpus)


# the simulator's lists end at the sample it started in: 45 samples 25 to 10 minutes ago, then 30 clean ones
ENDED = 30
SCENARIO = {
    "datacenter": "DC1",
    "datastores": [{"name": "ds-shared", "type": "VMFS", "capacity_gb": 4096, "free_gb": 1024, "luns": [SHARED]},
                   {"name": "ds-own", "type": "VMFS", "capacity_gb": 4096, "free_gb": 1024, "luns": [OWN]},
                   {"name": "ds-mild", "type": "VMFS", "capacity_gb": 1024, "free_gb": 512, "luns": [MILD]}],
    "hosts": [
        _host("esx-a", [
            _vm("ora-db", 8, perf={"cpu.ready.summation": {
                "": [_ready(8, 0.5)] + [_ready(8, 15)] * 45 + [_ready(8, 0.5)] * ENDED}}),
            _vm("nightly-etl", 32, 128, perf={"cpu.usagemhz.average": [1300] + [59_904] * 45 + [1300] * ENDED}),
            _vm("web-calm", perf={"cpu.ready.summation": {"": _ready(4, 1)}})]),
        _host("esx-b", [
            _vm("pay-db", 8, 64, "ds-shared", perf={
                "virtualDisk.totalWriteLatency.average": {"scsi0:0": [1] + [40] * 60},
                "virtualDisk.totalReadLatency.average": {"scsi0:0": [2] + [40] * 60}}),
            _vm("mild-db", 4, 16, "ds-mild", perf={
                "virtualDisk.totalWriteLatency.average": {"scsi0:0": [1] + [15] * 60},
                "virtualDisk.totalReadLatency.average": {"scsi0:0": [2] + [15] * 60}})],
            {"disk.deviceLatency.average": {SHARED: [1] + [38] * 60, MILD: [1] + [14] * 60}},
            ("ds-shared", "ds-own", "ds-mild")),
        _host("esx-c", [
            _vm("backup-srv", 8, 32, "ds-shared", perf={
                "virtualDisk.numberWriteAveraged.average": {"scsi0:0": [100] + [4000] * 60},
                "virtualDisk.write.average": {"scsi0:0": [3200] + [200_000] * 60}}),
            _vm("files-srv", 4, 16, "ds-shared")], datastores=("ds-shared", "ds-own")),
        _host("esx-d", [
            _vm("crm-db", 8, 64, perf={"mem.vmmemctl.average": [0] * 16 + [4 * 2**20] * 45,
                                       "mem.vmmemctltarget.average": [0] * 16 + [4 * 2**20] * 45}),
            _vm("cache-big", 16, 192, perf={"mem.consumed.average": 180 * 2**20}),
            _vm("erp-db", 8, 16, memory_reservation_mb=16384)],
            {"mem.state.latest": [0] * 16 + [2] * 45}),
        _host("esx-e", [
            _vm("report-db", 16, 64, perf={"cpu.usage.average": 9000,
                                           "cpu.ready.summation": {"": [_ready(16, 1)] + [_ready(16, 12)] * 30}}),
            _vm("small-1"), _vm("small-2")]),
    ],
}


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    d = tmp_path_factory.mktemp("culprits-sim")
    with Simulator.of(SCENARIO, d) as s:
        yield s


@pytest.fixture(scope="module")
def config(sim, tmp_path_factory) -> str:
    return str(sim.vcenter_only(tmp_path_factory.mktemp("culprits-cfg")))


def triage(cfg: str, *args: str) -> tuple[int, dict, str]:
    r = run_cli("triage", "-c", cfg, "--lookback", "1h", *args, env={"VC1_PASSWORD": "secret"}, timeout=180)
    return r.returncode, (json.loads(r.stdout) if "--format" in args else {}), r.stdout + r.stderr


@pytest.fixture(scope="module")
def fleet(config) -> dict:
    _, doc, out = triage(config, "--format", "json")
    assert doc["sources"]["vsphere:vc1"].startswith("ok"), out
    return {v["vm"]: v for v in doc["verdicts"]}


def _first(v: dict) -> dict:
    assert v["culprits"], v
    return v["culprits"][0]


def test_a_cpu_hog_is_named_first_with_its_share_of_the_host(fleet):
    """The episode ended ten minutes ago: nothing is blamed now, the earlier episode names the hog."""
    v = fleet["ora-db"]
    assert v["layer"] is None and [e["layer"] for e in v["episodes"]] == ["host"]
    first = _first(v)
    assert (first["vm"], first["host"], first["resource"], first["unit"]) == ("nightly-etl", "esx-a", "CPU of esx-a",
                                                                             "MHz")
    assert first["share_pct"] == pytest.approx(72.0, abs=1.0) and first["value"] == pytest.approx(59_904, rel=0.02)
    assert [c["vm"] for c in v["culprits"]][:2] == ["nightly-etl", "ora-db"]  # its own share beside
    episode = v["episodes"][0]
    assert "nightly-etl uses 59.9 of 83.2 GHz (72 %)" in episode["summary"], episode["summary"]
    assert "(nightly-etl 72 %)" in v["summary"]  # "earlier: host CPU contention 10:05–10:20 UTC (nightly-etl 72 %)…"


def test_a_healthy_vm_beside_a_hog_is_not_blamed(fleet):
    """web-calm shares ora-db's host and its hog, files-srv pay-db's datastore and its hog; erp-db, reserved
    whole, shares crm-db's overcommitted host: the others are blamed, they are not."""
    assert {"ora-db", "pay-db", "crm-db"} <= set(fleet)
    assert "web-calm" not in fleet and "erp-db" not in fleet and "files-srv" not in fleet


def test_a_datastore_hog_on_another_host_is_named_first(fleet):
    v = fleet["pay-db"]
    assert v["layer"] == "storage"
    first = _first(v)
    assert (first["vm"], first["host"], first["resource"]) == ("backup-srv", "esx-c", "datastore ds-shared")
    # its share of the datastore's throughput (KBps: its 200,000 written and 6,400 read of the three VMs' 225,600)
    # is larger than its share of the IOPS (4,200 of 4,800): the larger one ranks it
    assert first["share_pct"] == pytest.approx(206_400 / 225_600 * 100, abs=0.1) and first["unit"] == "bytes/s"
    assert {c["vm"] for c in v["culprits"]} == {"backup-srv", "files-srv", "pay-db"}
    assert "the array is slow: backup-srv on esx-c moves 211.4 of 231.0 MB/s on the datastore ds-shared (91 %)" \
        in v["summary"], v["summary"]


def test_an_overcommitted_hosts_memory_names_who_consumes_it(fleet):
    """Ballooning alone (no guest or DB2 data) is a memory episode with its onset."""
    v = fleet["crm-db"]
    assert v["layer"] == "host" and v["causes"][0]["kind"] == "host-memory" and v["since"] is not None
    first = _first(v)
    assert (first["vm"], first["resource"], first["unit"]) == ("cache-big", "memory of esx-d", "bytes")
    assert first["share_pct"] == pytest.approx(180 / 256 * 100, abs=0.5)
    assert "cache-big consumes 180.0GiB of 256.0GiB (70 %)" in v["summary"], v["summary"]


def test_a_db_vm_that_is_itself_the_hog_is_told_so(fleet):
    v = fleet["report-db"]
    assert v["layer"] == "host"
    first = _first(v)
    assert first["vm"] == "report-db" and first["share_pct"] == pytest.approx(16 * 2600 * 0.9 / 83_200 * 100, abs=1)
    assert "report-db itself uses 37.4 of 83.2 GHz (45 %), more than any other VM there" in v["summary"], v["summary"]


def test_triage_of_one_vm_reads_its_co_tenants_on_other_hosts(config):
    """`--vm pay-db` reads only its own hour, then the VMs on its slow datastore, wherever they run."""
    _, doc, out = triage(config, "--vm", "pay-db", "--format", "json")
    (v,) = doc["verdicts"]
    assert _first(v)["vm"] == "backup-srv" and "co-tenants: ok" in doc["sources"]["vsphere:vc1"], out
    _, doc, out = triage(config, "--vm", "crm-db", "--format", "json")
    assert _first(doc["verdicts"][0])["vm"] == "cache-big", out


def test_a_vm_at_vmdk_40_ms_and_davg_38_ms_has_findings_and_heads_triage(config):
    status, doc, _ = triage(config, "--vm", "pay-db", "--format", "json")
    aspects = {(f["subject"].get("aspect"), f["severity"]) for f in doc["findings"]
               if f["rule"] == "disk-queue-saturation"}
    assert aspects == {("vmdk", "warning"), ("device", "warning")} and status == 1
    status, _, text = triage(config, "--vm", "pay-db")
    first = text.splitlines()[0]
    assert first.startswith("db2vtop triage: WARNING: 0 critical, 2 warning open; stack pay-db: storage since "), first
    assert "backup-srv 91 % of the datastore ds-shared" in first, first
    assert "[WARNING] disk-queue-saturation (vm: vcenter=vc1 vm=pay-db instance=scsi0:0 aspect=vmdk): " \
           "pay-db scsi0:0: VMDK latency 40.0 ms at 300 IOPS" in text, text
    assert "  culprits: backup-srv (esx-c) 91.5 % of the datastore ds-shared, 211.4 MB/s; files-srv (esx-c) 6.2 % " \
           "of the datastore ds-shared, 300 IOPS; pay-db (esx-b) 6.2 %" in text, text


def test_a_stack_blamed_below_every_rules_level_is_a_finding(config):
    """mild-db's storage is blamed (its device at 14 ms, the verdict's level 10 ms) while no rule's level is
    reached (25 ms): the blame is a finding of its own, so triage's first line and exit status tell it."""
    status, doc, _ = triage(config, "--vm", "mild-db", "--format", "json")
    assert doc["verdicts"][0]["layer"] == "storage", doc["verdicts"]
    assert [(f["rule"], f["severity"], f["subject"]) for f in doc["findings"]] == [
        ("stack-verdict", "warning", {"layer": "stack", "stack": "mild-db", "vm": "mild-db", "vcenter": "vc1"})]
    assert status == 1
    status, _, text = triage(config, "--vm", "mild-db")
    first = text.splitlines()[0]
    assert first.startswith("db2vtop triage: WARNING: 0 critical, 1 warning open; stack mild-db: storage since "), \
        first


# --- the same from a recording: where the VM was, and a LUN's queue -------------------------------------------

T0 = 1_700_000_000 * 10**9
STEP = 20 * 10**9
LUN_A, LUN_B, LUN_C = "naa.60000000000000000000000000000a0a", "naa.60000000000000000000000000000b0b", \
    "naa.60000000000000000000000000000c0c"


def _recorded(tmp_path, samples: list, facts: list, vm: str):
    from db2vtop.agent.core.config import StackConfig
    from db2vtop.agent.core.store import Store
    from db2vtop.checks.verdict import stack_verdict

    path = tmp_path / "recorded.db"
    with Store(path, writer=True) as w:
        w.write(samples, facts=facts)
    with Store(path) as r:
        return stack_verdict(r, StackConfig(name=vm, vm=vm, vcenter="vc1"), T0, T0 + 30 * STEP)


def _host_fact(host: str, luns: dict[str, tuple[str, ...]] = {}):  # noqa: B006 - read only
    from db2vtop.agent.core.model import Fact

    return Fact("vsphere_host", {"vcenter": "vc1", "host": host},
                {"cpu_mhz": 2000, "cpu_cores": 20, "memory_bytes": 128 * 2**30,
                 "luns": [{"lun": lun, "paths": [{"name": p, "state": "active"} for p in paths]}
                          for lun, paths in luns.items()]}, T0)


def test_the_culprits_of_an_episode_are_those_of_the_host_the_vm_ran_on_then(tmp_path):
    """mover waited for CPUs on esx01 for ten minutes, then moved to esx02: its co-tenants on esx01 then are
    the culprits, not the busier VM of the host it runs on now."""
    from db2vtop.agent.core.model import Sample

    rows = []
    for i in range(30):
        ts, moved = T0 + i * STEP, i >= 15
        host = "esx02" if moved else "esx01"
        rows.append(Sample("vsphere_vm", {"vcenter": "vc1", "vm": "mover", "host": host},
                           {"cpu_ready_pct": 0.5 if moved else 15.0, "cpu_usage_pct": 50.0, "vcpus": 4}, ts))
        rows.append(Sample("vsphere_vm", {"vcenter": "vc1", "vm": "hog-one", "host": "esx01"},
                           {"cpu_ready_pct": 0.5, "cpu_usage_pct": 80.0, "vcpus": 16}, ts))
        rows.append(Sample("vsphere_vm", {"vcenter": "vc1", "vm": "hog-two", "host": "esx02"},
                           {"cpu_ready_pct": 0.5, "cpu_usage_pct": 90.0, "vcpus": 20}, ts))
    v = _recorded(tmp_path, rows, [_host_fact("esx01"), _host_fact("esx02")], "mover")
    assert v.layer is None and [e.layer for e in v.episodes] == ["host"]
    assert [(c.vm, c.resource, round(c.share_pct)) for c in v.culprits] == [
        ("hog-one", "CPU of esx01", 80 * 16 // 20), ("mover", "CPU of esx01", 50 * 4 // 20)]
    assert "hog-one uses 25.6 of 40.0 GHz (64 %)" in v.episodes[0].summary


def test_a_queued_lun_names_its_vms_on_that_host_and_the_adapters_other_luns(tmp_path):
    """qdb's LUN queues on esx01 (KAVG 9 ms): q-near drives it from the same host; q-far on esx02 uses the
    same datastore but not that host's queue; LUN B shares the adapter vmhba1 with it, LUN C does not."""
    from db2vtop.agent.core.model import Sample

    rows = []
    for i in range(30):
        ts = T0 + i * STEP
        for vm, host, iops in (("qdb", "esx01", 300), ("q-near", "esx01", 3000), ("q-far", "esx02", 9000)):
            rows.append(Sample("vsphere_vm", {"vcenter": "vc1", "vm": vm, "host": host},
                               {"cpu_ready_pct": 0.5, "cpu_usage_pct": 10.0, "vcpus": 4}, ts))
            rows.append(Sample("vsphere_vm_disk", {"vcenter": "vc1", "vm": vm, "host": host, "instance": "scsi0:0",
                                                   "datastore": "ds-a", "lun": LUN_A},
                               {"read_iops": iops / 2, "write_iops": iops / 2, "read_bytes_per_s": 1e6,
                                "write_bytes_per_s": 1e6, "read_latency_ms": 10.0, "write_latency_ms": 10.0}, ts))
        for lun, kavg, iops in ((LUN_A, 9.0, 3300), (LUN_B, 0.1, 5000), (LUN_C, 0.1, 20_000)):
            rows.append(Sample("vsphere_host_lun", {"vcenter": "vc1", "host": "esx01", "lun": lun},
                               {"kernel_latency_ms": kavg, "queue_latency_ms": kavg, "device_latency_ms": 1.0,
                                "read_iops": iops / 2, "write_iops": iops / 2}, ts))
    paths = {LUN_A: ("vmhba1:C0:T0:L1", "vmhba2:C0:T0:L1"), LUN_B: ("vmhba1:C0:T0:L2",), LUN_C: ("vmhba3:C0:T0:L3",)}
    v = _recorded(tmp_path, rows, [_host_fact("esx01", paths)], "qdb")
    assert v.layer == "host" and v.causes[0].kind == "hypervisor-queue"
    got = [(c.vm or c.lun, c.resource, round(c.share_pct)) for c in v.culprits]
    assert got == [("q-near", f"queue of {LUN_A} on esx01", 91), ("qdb", f"queue of {LUN_A} on esx01", 9),
                   (LUN_B, "adapter vmhba1/vmhba2 of esx01", 60), (LUN_A, "adapter vmhba1/vmhba2 of esx01", 40)]
    assert "q-near does 3,000 of 3,300 IOPS on the queue of" in v.summary, v.summary


def test_a_slow_path_between_host_and_array_names_the_hosts_io(tmp_path):
    """fab-db's LUN is slow on esx01 (DAVG 12 ms) while the array answers it in 1 ms: the path between them is
    to blame, and who drives esx01's storage path (fab-heavy, on another datastore) is its culprit."""
    from db2vtop.agent.core.model import Sample

    rows = []
    for i in range(30):
        ts = T0 + i * STEP
        for vm, host, store, lun, mb in (("fab-db", "esx01", "ds-f", LUN_A, 5),
                                         ("fab-heavy", "esx01", "ds-g", LUN_B, 300),
                                         ("fab-far", "esx02", "ds-g", LUN_B, 900)):
            rows.append(Sample("vsphere_vm", {"vcenter": "vc1", "vm": vm, "host": host},
                               {"cpu_ready_pct": 0.5, "cpu_usage_pct": 10.0, "vcpus": 4}, ts))
            rows.append(Sample("vsphere_vm_disk", {"vcenter": "vc1", "vm": vm, "host": host, "instance": "scsi0:0",
                                                   "datastore": store, "lun": lun},
                               {"read_iops": 100, "write_iops": 100, "read_bytes_per_s": mb * 1e6 / 2,
                                "write_bytes_per_s": mb * 1e6 / 2, "read_latency_ms": 13.0, "write_latency_ms": 13.0},
                               ts))
        rows.append(Sample("vsphere_host_lun", {"vcenter": "vc1", "host": "esx01", "lun": LUN_A},
                           {"kernel_latency_ms": 0.1, "queue_latency_ms": 0.0, "device_latency_ms": 12.0,
                            "read_iops": 100, "write_iops": 100}, ts))
        rows.append(Sample("storage_lun", {"storage": "array1", "kind": "ontap", "lun": "/vol/f/l0", "naa": LUN_A},
                           {"avg_latency_ms": 1.0, "total_iops": 200.0}, ts))
    v = _recorded(tmp_path, rows, [_host_fact("esx01")], "fab-db")
    assert v.layer == "storage-network" and v.causes[0].kind == "fabric"
    got = [(c.vm, c.resource, c.figure, round(c.share_pct)) for c in v.culprits]
    assert got == [("fab-heavy", "storage path of esx01", "throughput", 98), ("fab-db", "storage path of esx01",
                                                                               "iops", 50)], got
    assert "fab-heavy moves 300.0 of 305.0 MB/s on the storage path of esx01 (98 %)" in v.summary, v.summary
