"""vSphere rules on samples and facts shaped as the vSphere collector writes them: trips and near misses."""

from __future__ import annotations

from dataclasses import replace

import pytest

from db2vtop.agent.config import Config
from db2vtop.agent.core.config import StackConfig, VSphereConfig
from db2vtop.agent.core.model import Fact, Sample
from db2vtop.checks.topology import db2_vm_selector
from db2vtop.collectors.db2.config import DB2Config
from db2vtop.collectors.ssh.config import SSHConfig
from tests.checks.test_checks_rules import judged, live

T0 = 1_700_000_000 * 10**9
MIB = 2**20
VM = {"vcenter": "vc1", "vm": "db2prod01", "host": "esx01", "cluster": "prod"}
HOST = {"vcenter": "vc1", "host": "esx01", "cluster": "prod"}


def vm_fact(**data) -> Fact:
    base = {"host": "esx01", "power_state": "poweredOn", "num_cpu": 8, "memory_mb": 65536, "cpu_limit_mhz": -1,
            "mem_reservation_mb": 0, "nics": [{"type": "vmxnet3"}], "scsi_controllers": [{"type": "pvscsi"}],
            "tools_running_status": "guestToolsRunning", "tools_version_status": "guestToolsCurrent",
            "disks": [{"instance": "scsi0:1", "backing": "eager_zeroed"}]}
    return Fact("vsphere_vm", {"vcenter": "vc1", "vm": "db2prod01"}, {**base, **data}, T0)


def host_fact(**data) -> Fact:
    base = {"cpu_sockets": 2, "cpu_cores": 32, "cpu_threads": 64, "memory_bytes": 256 * 2**30, "numa_nodes": 2,
            "numa": [{"node": 0, "cpus": 32, "memory_bytes": 128 * 2**30}, {"node": 1, "cpus": 32,
                                                                             "memory_bytes": 128 * 2**30}],
            "hyperthreading_available": True, "hyperthreading_active": True, "power_policy": "static",
            "vcpus_powered_on": 40, "vm_memory_mb_powered_on": 131072,
            "luns": [{"lun": "naa.600a0980", "policy": "VMW_PSP_RR", "satp": "VMW_SATP_ALUA", "queue_depth": 64,
                      "paths_active": 4, "paths_total": 4}],
            "vmknics": [{"device": "vmk1", "portgroup": "iSCSI-A", "mtu": 9000}]}
    return Fact("vsphere_host", {"vcenter": "vc1", "host": "esx01"}, {**base, **data}, T0)


LIVE = [
    ("balloon-zero", "vsphere_vm", VM, {"mem_balloon_bytes": 512 * MIB}, {"mem_balloon_bytes": 0}, "warning"),
    ("balloon-zero", "vsphere_vm", VM, {"mem_balloon_bytes": 4096 * MIB}, {"mem_balloon_bytes": 0}, "critical"),
    ("balloon-zero", "vsphere_vm_quickstats", VM, {"balloon_bytes": 2048 * MIB}, {"balloon_bytes": 0}, "warning"),
    ("host-swap-zero", "vsphere_vm", VM, {"mem_swapped_bytes": 128 * MIB}, {"mem_swapped_bytes": 0}, "critical"),
    ("host-swap-zero", "vsphere_vm", VM, {"mem_swapin_bytes_per_s": 4096.0}, {"mem_swapin_bytes_per_s": 0.0},
     "critical"),
    ("host-swap-zero", "vsphere_host", HOST, {"mem_swapin_bytes_per_s": 1.0}, {"mem_swapin_bytes_per_s": 0.0},
     "critical"),
    ("cpu-ready", "vsphere_vm", VM, {"cpu_ready_pct": 6.0, "vcpus": 8}, {"cpu_ready_pct": 4.9, "vcpus": 8},
     "warning"),
    ("cpu-ready", "vsphere_vm", VM, {"cpu_ready_pct": 11.0, "vcpus": 8}, {"cpu_ready_pct": 1.0, "vcpus": 8},
     "critical"),
    ("vcpu-no-excess", "vsphere_vm", VM, {"cpu_costop_pct": 4.0, "vcpus": 8}, {"cpu_costop_pct": 2.0, "vcpus": 8},
     "warning"),
    ("cpu-limit-none", "vsphere_vm", VM, {"cpu_maxlimited_pct": 2.0, "vcpus": 8}, {"cpu_maxlimited_pct": 0.0,
                                                                                  "vcpus": 8}, "warning"),
    ("host-cpu-ceiling", "vsphere_host", HOST, {"cpu_usage_pct": 85.0}, {"cpu_usage_pct": 79.0}, "warning"),
    ("host-cpu-ceiling", "vsphere_host", HOST, {"cpu_usage_pct": 93.0}, {"cpu_usage_pct": 50.0}, "critical"),
    ("host-mem-state", "vsphere_host", HOST, {"mem_state": 2}, {"mem_state": 0}, "critical"),
    ("disk-queue-saturation", "vsphere_host_lun", {**HOST, "lun": "naa.600a0980"}, {"kernel_latency_ms": 9.0},
     {"kernel_latency_ms": 1.0}, "warning"),
    ("disk-queue-saturation", "vsphere_host_lun", {**HOST, "lun": "naa.600a0980"}, {"queue_latency_ms": 12.0},
     {"queue_latency_ms": 0.0}, "critical"),
]


@pytest.mark.parametrize("rule, measurement, tags, bad, good, severity", LIVE)
def test_live_vsphere_rules(rule, measurement, tags, bad, good, severity):
    facts = [vm_fact()]
    found = judged(live(measurement, tags, bad), facts)
    assert rule in found and {f.severity for f in found[rule]} == {severity}
    assert rule not in judged(live(measurement, tags, good), facts)


def test_a_growing_balloon_is_critical():
    rows = [Sample("vsphere_vm", VM, {"mem_balloon_bytes": (100 + 50 * i) * MIB}, T0 + i * 20 * 10**9)
            for i in range(5)]
    (f,) = judged(rows, [vm_fact()])["balloon-zero"]
    assert f.severity == "critical" and "growing" in f.summary


STATIC = [
    ("vm-fits-numa-node", [vm_fact(num_cpu=24), host_fact()], [vm_fact(num_cpu=16), host_fact()]),
    ("vm-fits-numa-node", [vm_fact(memory_mb=196608), host_fact()], [vm_fact(memory_mb=131072), host_fact()]),
    ("vcpu-le-threads", [host_fact(vcpus_powered_on=96)], [host_fact(vcpus_powered_on=64)]),
    ("cpu-limit-none", [vm_fact(cpu_limit_mhz=4000)], [vm_fact(cpu_limit_mhz=-1)]),
    ("host-mem-headroom-10pct", [host_fact(vm_memory_mb_powered_on=240000)],
     [host_fact(vm_memory_mb_powered_on=230000)]),
    ("nic-vmxnet3", [vm_fact(nics=[{"type": "e1000"}])], [vm_fact()]),
    ("scsi-pvscsi", [vm_fact(scsi_controllers=[{"type": "lsilogic"}])], [vm_fact()]),
    ("vmtools-running", [vm_fact(tools_running_status="guestToolsNotRunning")], [vm_fact()]),
    ("vmdk-eager-zeroed", [vm_fact(disks=[{"instance": "scsi0:1", "backing": "thin"}])], [vm_fact()]),
    ("mpio-rr-alua", [host_fact(luns=[{"lun": "naa.1", "policy": "VMW_PSP_MRU"}])], [host_fact()]),
    ("mpio-redundant-paths", [host_fact(luns=[{"lun": "naa.1", "paths_active": 1, "paths_total": 2}])], [host_fact()]),
    ("hba-queue-depth", [host_fact(luns=[{"lun": "naa.1", "queue_depth": 32}])], [host_fact()]),
    ("ht-enabled", [host_fact(hyperthreading_active=False)], [host_fact()]),
    ("numa-enabled", [host_fact(numa_nodes=1)], [host_fact()]),
    ("host-power-policy", [host_fact(power_policy="dynamic")], [host_fact()]),
    ("jumbo-frames", [host_fact(vmknics=[{"device": "vmk1", "portgroup": "NFS", "mtu": 1500}])], [host_fact()]),
]


@pytest.mark.parametrize("rule, bad, good", STATIC)
def test_static_vsphere_rules(rule, bad, good):
    assert rule in judged(facts=bad), f"{rule} did not trip"
    assert rule not in judged(facts=good), f"{rule} tripped on the near miss"


@pytest.mark.parametrize("local", [{"local": True}, {"satp": "VMW_SATP_LOCAL"}])
def test_a_hosts_own_disk_at_an_ahci_queue_depth_is_no_hba_finding(local):
    """A local SATA boot disk reports 31 or 32 (AHCI's queue): no FC driver setting changes it."""
    assert "hba-queue-depth" not in judged(facts=[host_fact(luns=[{"lun": "t10.ATA_boot", "queue_depth": 31,
                                                                    **local}])])


def test_a_vm_wider_than_its_node_is_found_when_its_host_comes_after_it_and_resolved_when_narrowed():
    """A first facts pass hands VMs on in parts before their hosts: nothing is judged without the host, the VM is
    judged (with its text and values) once the host comes, and a VM-only feed later resolves it."""
    from db2vtop.checks.engine import Engine
    from db2vtop.checks.rules import all_rules

    e = Engine(all_rules(), {})
    e.feed(facts=[vm_fact(num_cpu=24, memory_mb=196608)])
    assert not [f for f in e.open_findings() if f.rule == "vm-fits-numa-node"]
    e.feed(facts=[host_fact()])
    (f,) = [f for f in e.open_findings() if f.rule == "vm-fits-numa-node"]
    assert f.summary == "db2prod01 is wider than a NUMA node of esx01: 24 vCPUs > 16 cores per node; 192.0GiB > " \
                        "128.0GiB per node", f.summary
    assert f.evidence["values"] == {"vcpus": 24, "memory_bytes": 196608 * MIB, "numa_nodes": 2, "cores_per_node": 16,
                                    "node_memory_bytes": 128 * 2**30}
    e.feed(facts=[vm_fact(num_cpu=16)])
    assert not [f for f in e.open_findings() if f.rule == "vm-fits-numa-node"]


def test_vcpu_overallocation_states_the_seed_penalty_within_what_it_measured():
    (f,) = judged(facts=[host_fact(vcpus_powered_on=96)])["vcpu-le-threads"]
    assert f.evidence["values"]["ratio"] == 1.5 and "~6.5% lower peak" in f.summary
    (far,) = judged(facts=[host_fact(vcpus_powered_on=320)])["vcpu-le-threads"]
    assert "beyond the 1.5:1" in far.summary and far.evidence["values"]["expected_loss_pct"] is None


def test_vm_rules_judge_every_vm_unless_db2_vms_narrows_them():
    web = Fact("vsphere_vm", {"vcenter": "vc1", "vm": "web17"},
               {**vm_fact().data, "nics": [{"type": "e1000"}], "guest_hostname": "web17.lab.example"}, T0)
    stacks = [StackConfig(name="p", vm="db2prod01")]
    assert "nic-vmxnet3" in judged(facts=[web], stacks=stacks)  # default: every VM is a DB2 VM
    narrow = Config(stack=stacks, vsphere=VSphereConfig(db2_vms=["db2*"]))
    assert "nic-vmxnet3" not in judged(facts=[web, vm_fact()], stacks=stacks, db2_vm=db2_vm_selector(narrow))
    runs_db2 = replace(narrow, ssh=[SSHConfig(name="w", host="web17", user="db2inst1", password_env="PW")],
                       db2=[DB2Config(name="d", database="D", ssh="w")])  # a [[db2]] runs on web17's guest
    assert "nic-vmxnet3" in judged(facts=[web], stacks=stacks, db2_vm=db2_vm_selector(runs_db2))


def test_memory_reservation_against_db2_committed_memory():
    stacks = [StackConfig(name="p", vm="db2prod01", db2="prod")]
    mem = [Sample("db2_memory", {"db2": "prod", "database": "PROD", "member": "0", "set": s},
                  {"committed_bytes": b}, T0 + i * 20 * 10**9)
           for i in range(5) for s, b in (("DATABASE", 20 * 2**30), ("DBMS", 2 * 2**30))]
    (f,) = judged(mem, [vm_fact(mem_reservation_mb=8192)], stacks=stacks)["mem-reservation-db2-shm"]
    assert f.evidence["values"]["db2_committed_bytes"] == 22 * 2**30
    assert "mem-reservation-db2-shm" not in judged(mem, [vm_fact(mem_reservation_mb=24576)], stacks=stacks)


def test_the_static_and_live_findings_of_a_removed_vm_resolve():
    from db2vtop.checks.engine import Engine
    from db2vtop.checks.rules import all_rules
    engine = Engine(all_rules())
    bad = vm_fact(nics=[{"type": "e1000"}])
    other = {"vcenter": "vc1", "vm": "other"}
    engine.feed(facts=[bad, replace(vm_fact(), tags=other)])
    balloon = {"mem_balloon_bytes": 100 * MIB}
    engine.feed(live("vsphere_vm", VM, balloon) + live("vsphere_vm", {**VM, **other}, balloon))
    opened = {f.rule for f in engine.changes() if f.resolved_at is None and f.subject.get("vm") == "db2prod01"}
    assert {"nic-vmxnet3", "balloon-zero"} <= opened
    gone_at = T0 + 600 * 10**9
    engine.feed(facts=[Fact.removal("vsphere_vm", bad.tags, gone_at)])
    resolved = [f for f in engine.changes() if f.subject.get("vm") == "db2prod01"]
    assert {f.rule for f in resolved} >= {"nic-vmxnet3", "balloon-zero"}
    assert all(f.resolved_at for f in resolved)
    assert next(f for f in resolved if f.rule == "balloon-zero").resolved_at == gone_at
    assert not [f for f in engine.open_findings() if f.subject.get("vm") == "db2prod01"]
    assert [f.rule for f in engine.open_findings() if f.subject.get("vm") == "other"] == ["balloon-zero"]
    assert engine.facts.find("vsphere_vm", vm="other") is not None
