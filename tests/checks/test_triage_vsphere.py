"""`db2vtop triage` end to end against the vSphere scenario simulator: exactly the designed findings.

One host (2 NUMA nodes of 8 cores, 32 threads) runs the DB VM, designed with four departures,
and a twin VM with none:
- db2prod01: 12 vCPUs (wider than a node's 8 cores), a 2 GiB balloon (3 % of its 64 GiB),
  CPU ready 7 % per vCPU; its LUN shows KAVG 9 ms and QAVG 8 ms on the host.
- db2test01: 8 vCPUs, no balloon, ready 1 % — the near miss of every rule above.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli
from tests.infra.vsphere_sim import Simulator

LUN = "naa.600a098038303053"
SCENARIO = {
    "datacenter": "DC1",
    "datastores": [{"name": "ds_data", "type": "VMFS", "capacity_gb": 2048, "free_gb": 1024, "luns": [LUN]}],
    "hosts": [{
        "name": "esx01", "cluster": "prod", "cpu_sockets": 2, "cpu_cores": 16, "cpu_threads": 32, "cpu_mhz": 2600,
        "memory_mb": 262144, "numa_nodes": 2, "hyperthreading": True,
        "perf": {"cpu.usage.average": 4500,
                 "disk.kernelLatency.average": {LUN: 9}, "disk.queueLatency.average": {LUN: 8},
                 "disk.deviceLatency.average": {LUN: 1}},
        "vms": [
            {"name": "db2prod01", "num_cpu": 12, "cores_per_socket": 12, "memory_mb": 65536, "nic": "vmxnet3",
             "scsi": "pvscsi", "tools": "guestToolsRunning", "disks": [{"datastore": "ds_data", "size_gb": 500}],
             "quickstats": {"balloonedMemory": 2048, "swappedMemory": 0},
             "perf": {"mem.vmmemctl.average": 2097152, "cpu.ready.summation": {"": 16800}}},
            {"name": "db2test01", "num_cpu": 8, "cores_per_socket": 8, "memory_mb": 65536, "nic": "vmxnet3",
             "scsi": "pvscsi", "tools": "guestToolsRunning", "disks": [{"datastore": "ds_data", "size_gb": 100}],
             "quickstats": {"balloonedMemory": 0, "swappedMemory": 0},
             "perf": {"mem.vmmemctl.average": 0, "cpu.ready.summation": {"": 1600}}},
        ]}],
}


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    d = tmp_path_factory.mktemp("triage-sim")
    with Simulator.of(SCENARIO, d) as s:
        yield s


def config(tmp_path, sim, vms=("db2prod01", "db2test01")) -> str:
    stacks = "".join(f'[[stack]]\nname = "{vm}"\nvm = "{vm}"\nvcenter = "vc1"\n' for vm in vms)
    return str(sim.vcenter_only(tmp_path, stacks))


def test_triage_reports_exactly_the_designed_findings(sim, tmp_path):
    r = run_cli("triage", "-c", config(tmp_path, sim), "--format", "json",
                "--lookback", "10m", env={"VC1_PASSWORD": "secret"}, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr  # warnings, no critical
    doc = json.loads(r.stdout)
    assert doc["sources"]["vsphere:vc1"].startswith("ok")
    got = sorted((f["rule"], f["severity"], f["subject"].get("vm") or f["subject"].get("lun"))
                 for f in doc["findings"] if f["severity"] != "info")
    assert got == [
        ("balloon-zero", "warning", "db2prod01"),
        ("cpu-ready", "warning", "db2prod01"),
        ("disk-queue-saturation", "warning", LUN),  # KAVG
        ("disk-queue-saturation", "warning", LUN),  # QAVG
        ("vm-fits-numa-node", "warning", "db2prod01"),
    ]
    for f in doc["findings"]:
        assert f["references"] and f["why"] and f["fix"] and f["evidence"]
    ready = next(f for f in doc["findings"] if f["rule"] == "cpu-ready")
    assert ready["evidence"]["values"]["cpu_ready_pct"] == pytest.approx(7.0, abs=0.01)
    assert ready["evidence"]["samples"] >= 3
    assert ready["references"][0].startswith("NetApp WP-7109") and "§5.3" in ready["references"][0]
    verdicts = {v["stack"]: v for v in doc["verdicts"]}
    # the balloon is a cause of its own (the host reclaims the VM's memory), memory first; the LUN's queue beside it
    v = verdicts["db2prod01"]
    assert v["layer"] == "host" and [c["kind"] for c in v["causes"]][:2] == ["host-memory", "hypervisor-queue"]
    assert "queueing in the hypervisor" in v["causes"][1]["summary"]
    assert verdicts["db2prod01"]["confidence"] in ("medium", "high")
    # a vCenter whose event log has nothing of the hour: no events, and none is made up
    assert doc["events"] == [] and all(v["events"] == [] for v in doc["verdicts"])


def test_a_down_vcenter_makes_triage_unable_to_run(tmp_path):
    cfg = tmp_path / "down.toml"
    cfg.write_text('[guest]\nenabled = false\n[[vcenter]]\nname = "vc1"\nurl = "https://127.0.0.1:1/sdk"\n'
                   'user = "monitor"\npassword_env = "VC1_PASSWORD"\n')
    r = run_cli("triage", "-c", str(cfg), "--store", str(tmp_path / "none.db"), env={"VC1_PASSWORD": "x"})
    assert r.returncode == 3 and "vsphere:vc1: error" in r.stderr


HEALTHY = {
    "datacenter": "DC1",
    "hosts": [{"name": "esx02", "cluster": "prod", "cpu_sockets": 2, "cpu_cores": 16, "cpu_threads": 32,
               "cpu_mhz": 2600, "memory_mb": 262144, "numa_nodes": 2, "hyperthreading": True,
               "vms": [{"name": f"db2ok{i}", "num_cpu": 8, "cores_per_socket": 8, "memory_mb": 65536,
                        "memory_reservation_mb": 65536, "nic": "vmxnet3", "scsi": "pvscsi",
                        "tools": "guestToolsRunning", "quickstats": {"balloonedMemory": 0, "swappedMemory": 0},
                        "perf": {"mem.vmmemctl.average": 0, "cpu.ready.summation": {"": 1600}}} for i in range(3)]}],
}


def test_a_healthy_scenario_has_no_warning_or_critical_finding(tmp_path):
    (tmp_path / "healthy.json").write_text(json.dumps(HEALTHY))
    with Simulator(tmp_path / "healthy.json") as s:
        r = run_cli("triage", "-c", config(tmp_path, s, vms=("db2ok0",)), "--format", "json", "--lookback", "10m",
                    env={"VC1_PASSWORD": "secret"}, timeout=120)
    doc = json.loads(r.stdout)
    assert [f["rule"] for f in doc["findings"] if f["severity"] != "info"] == []
    assert r.returncode == 0 and doc["verdicts"][0]["layer"] is None
