"""checks/topology.py on its own: how a LUN is named, where a VM was, which entities a stack resolves to from the
facts and samples alone (in memory, no peer), and which stacks the facts infer."""

from __future__ import annotations

from pathlib import Path

import pytest

from db2vtop.agent.config import Config, load_config
from db2vtop.agent.core.config import StackConfig
from db2vtop.agent.core.model import Fact, Sample
from db2vtop.agent.core.source import MemorySource
from db2vtop.checks.topology import Placement, infer_stacks, lun_name, pick, placement, resolve, short_name

S = 10**9
T0 = 1_700_000_000 * S


@pytest.mark.parametrize("raw, name", [
    ("naa.600a0b80001234", "naa.600a0b80001234"),  # ESXi's own canonical name
    ("NAA.600A0B80001234", "naa.600a0b80001234"),  # the prefix and the hex in upper case
    ("600A0B80001234", "naa.600a0b80001234"),  # an array's bare NAA id
    ("  600a0b80001234\n", "naa.600a0b80001234"),  # with the blanks of a parsed answer
    ("eui.00A0B8FFFE123456", "eui.00a0b8fffe123456"),  # an EUI-64 id (NVMe) in lower case
    ("EUI.00a0b8fffe123456", "eui.00a0b8fffe123456"),
    ("t10.ATA_____Samsung_SSD_860", "t10.ATA_____Samsung_SSD_860"),  # a T10 vendor id: as it is
    ("T10.ATA_____Samsung_SSD_860", "T10.ATA_____Samsung_SSD_860"),
    ("mpx.vmhba32:C0:T0:L0", "mpx.vmhba32:C0:T0:L0"),  # a path-named device: as it is, never naa.
    ("vml.0200000000600a0b80", "vml.0200000000600a0b80"),
    ("", ""),
    ("   ", ""),  # nothing named is no LUN, not "naa."
])
def test_lun_name_is_esxis_canonical_name(raw, name):
    assert lun_name(raw) == name


def test_lun_name_is_idempotent():
    for raw in ("600A0B80001234", "EUI.ABC", "mpx.vmhba0:C0:T0:L0", "t10.X"):
        assert lun_name(lun_name(raw)) == lun_name(raw)


def test_short_name_is_the_first_label_in_lower_case():
    assert [short_name(n) for n in ("DB01.corp.example", "db01", "Esx01.lab", "")] == ["db01", "db01", "esx01", ""]


def test_placement_is_the_host_of_the_newest_sample_before_each_moment():
    p = Placement("db01", [T0, T0 + 60 * S, T0 + 120 * S], ["esx01", "esx02", "esx01"])
    assert p.host_at(T0 - S) == "esx01"  # before the first sample: the first host
    assert p.host_at(T0 + 59 * S) == "esx01"
    assert p.host_at(T0 + 60 * S) == "esx02"
    assert p.host_at(T0 + 10**6 * S) == "esx01"
    assert p.hosts_between(T0 + 70 * S, T0 + 80 * S) == {"esx02"}  # the one it was on when the window opened
    assert p.hosts_between(T0 + 30 * S, T0 + 130 * S) == {"esx01", "esx02"}
    assert Placement(None).host_at(T0) is None and Placement(None).hosts_between(T0, T0 + S) == set()


def _vm(vm: str, host: str, ts: int, vcenter: str = "vc1") -> Sample:
    return Sample("vsphere_vm", {"vcenter": vcenter, "vm": vm, "host": host}, {"cpu_ready_pct": 1.0}, ts)


def test_placement_follows_the_vms_samples_of_its_own_vcenter():
    rows = [_vm("db01", "esx01", T0), _vm("db01", "esx02", T0 + 60 * S),
            _vm("db01", "esx-dr", T0 + 30 * S, vcenter="vc-dr")]  # the same name elsewhere is another VM
    p = placement(MemorySource(rows), "db01", T0, T0 + 120 * S, "vc1")
    assert (p.times, p.hosts) == ([T0, T0 + 60 * S], ["esx01", "esx02"])
    assert placement(MemorySource(rows), "db01", T0 + 120 * S, T0 + 120 * S, "vc1").host_at(T0 + 120 * S) == "esx02"


def _vm_fact(vm: str = "db01", **data) -> Fact:
    return Fact("vsphere_vm", {"vcenter": "vc1", "vm": vm}, data, T0)


DISKS = [{"instance": "scsi0:0", "datastore": "ds-data", "luns": ["600A0B80AAAA", "naa.600a0b80bbbb"]},
         {"instance": "scsi0:1", "datastore": "ds-log", "luns": ["NAA.600A0B80CCCC"]}]


def test_a_stack_resolves_from_its_vms_fact_alone():
    """No sample in reach: the host is where vCenter last said, the LUNs are the fact's disks' (one name each),
    the arrays those whose volumes carry those LUNs, and the stack's own arrays first."""
    facts = [_vm_fact(host="esx07", disks=DISKS)]
    rows = [Sample("storage_lun", {"storage": "netapp1", "naa": "600A0B80AAAA"}, {"avg_latency_ms": 1.0}, T0),
            Sample("storage_lun", {"storage": "other", "naa": "600a0b80ffff"}, {"avg_latency_ms": 1.0}, T0)]
    e = resolve(MemorySource(rows, facts), StackConfig(name="s", vm="db01", storage=["pure1"]), T0, T0 + 60 * S)
    assert e.vcenter == "vc1"  # the only vCenter with a VM of that name
    assert e.hosts == ("esx07",) and e.host == "esx07"
    assert e.luns == {"naa.600a0b80aaaa": "ds-data", "naa.600a0b80bbbb": "ds-data", "naa.600a0b80cccc": "ds-log"}
    assert [(d.name, d.datastore, d.luns) for d in e.disks] == [
        ("scsi0:0", "ds-data", ("naa.600a0b80aaaa", "naa.600a0b80bbbb")), ("scsi0:1", "ds-log", ("naa.600a0b80cccc",))]
    assert e.arrays == ("pure1", "netapp1")
    assert [s.tags["storage"] for s in e.select("volume", "storage_lun")] == ["netapp1"]  # by NAA, not "other"
    assert e.owns({"layer": "lun", "vcenter": "vc1", "host": "esx07", "lun": "NAA.600A0B80CCCC"})
    assert not e.owns({"layer": "lun", "vcenter": "vc1", "host": "esx07", "lun": "naa.600a0b80ffff"})
    assert not e.owns({"layer": "vm", "vcenter": "vc-dr", "vm": "db01"})
    assert e.collectors() == {"vsphere:vc1", "esxtop:esx07", "storage:pure1", "storage:netapp1"}


def test_a_stacks_guest_is_found_by_the_vms_name_or_the_host_name_it_reports():
    facts = [_vm_fact(host="esx07"), Fact("guest", {"guest": "lnx-17"}, {"hostname": "DB01.corp.example"}, T0)]
    e = resolve(MemorySource((), facts), StackConfig(name="s", vm="db01"), T0, T0 + S)
    assert e.guest == "lnx-17"
    rows = [Sample("guest_cpu", {"guest": "db01.corp.example"}, {"user_pct": 1.0}, T0)]
    assert resolve(MemorySource(rows, [_vm_fact()]), StackConfig(name="s", vm="db01"), T0, T0 + S).guest \
        == "db01.corp.example"


def test_a_host_target_takes_every_lun_its_series_name():
    rows = [Sample("vsphere_host_lun", {"vcenter": "vc1", "host": "esx01", "lun": "NAA.600A0B80AAAA",
                                        "datastore": "ds1"}, {"kernel_latency_ms": 1.0}, T0),
            Sample("esxtop_device", {"host": "esx01", "device": "mpx.vmhba32:C0:T0:L0"}, {"davg_ms": 1.0}, T0),
            Sample("esxtop_device", {"host": "esx01", "device": "vmhba32"}, {"davg_ms": 1.0}, T0)]  # not a LUN
    e = resolve(MemorySource(rows), StackConfig(name="esx01"), T0, T0 + S, host="esx01")
    assert e.hosts == ("esx01",) and e.host_at(T0 - 10**6 * S) == "esx01"
    assert e.luns == {"naa.600a0b80aaaa": "ds1", "mpx.vmhba32:C0:T0:L0": ""}


def test_select_refuses_an_entity_it_does_not_know():
    e = resolve(MemorySource(), StackConfig(name="s", vm="db01"), T0, T0 + S)
    with pytest.raises(ValueError, match="no such entity"):
        e.select("cluster", "vsphere_vm")


CONFIG = """
[[ssh]]
name = "db2prod01"
host = "db2prod01.example.com"
user = "db2mon"

[[ssh]]
name = "byip"
host = "10.0.0.9"
user = "db2mon"

[[db2]]
name = "prod01"
database = "PROD"
ssh = "db2prod01"
"""


def _config(tmp_path: Path) -> Config:
    path = tmp_path / "db2vtop.toml"
    path.write_text(CONFIG)
    return load_config(path)


def test_infer_stacks_matches_a_vms_guest_db2_and_arrays_from_the_facts(tmp_path):
    facts = [_vm_fact("db01", guest_hostname="DB2PROD01.example.com", disks=DISKS),
             _vm_fact("app07", ip_addresses=["10.0.0.9"]),
             _vm_fact("web03"),
             Fact("storage_lun", {"storage": "netapp1", "naa": "600A0B80CCCC"}, {}, T0)]
    found = {i.stack.name: i for i in infer_stacks(_config(tmp_path), MemorySource((), facts))}
    db01 = found["db01"]
    assert (db01.rule, db01.stack.vcenter, db01.stack.guest, db01.stack.db2, db01.stack.storage) == \
        ("vcenter", "vc1", "db2prod01", "prod01", ["netapp1"])
    assert set(db01.matched) == {"vm", "guest", "db2", "storage"} and not db01.unmatched
    app07 = found["app07"]
    assert app07.stack.guest == "byip" and "IP address" in app07.matched["guest"]
    assert app07.unmatched == {"db2": "no [[db2]] runs on [[ssh]] byip",
                               "storage": "the VM's disks have no LUN (NFS or not reported)"}
    assert found["web03"].stack.guest is None and "no guest host name" in found["web03"].unmatched["guest"]


def test_infer_stacks_says_no_array_is_configured_rather_than_that_none_reports_the_luns(tmp_path):
    """F20: with no [[storage]] section `db2vtop stacks` said "no array reports the LUNs behind the VM's disks", as
    if an array had been asked; an array configured (or its LUNs in the store) keeps that wording."""
    facts = [_vm_fact("db01", disks=DISKS)]
    found = infer_stacks(Config(), MemorySource((), facts))[0]
    assert found.unmatched["storage"] == "no [[storage]] array configured to match the LUNs behind the VM's disks"
    other = Fact("storage_lun", {"storage": "netapp1", "naa": "600A0B80FFFF"}, {}, T0)
    found = infer_stacks(Config(), MemorySource((), [*facts, other]))[0]
    assert found.unmatched["storage"] == "no array reports the LUNs behind the VM's disks"


def test_infer_stacks_names_a_vm_of_two_vcenters_by_its_vcenter_and_keeps_configured_stacks_first():
    facts = [Fact("vsphere_vm", {"vcenter": vc, "vm": "db01"}, {}, T0) for vc in ("vc1", "vc-dr")]
    cfg = Config(stack=[StackConfig(name="mine", vm="other")])
    found = infer_stacks(cfg, MemorySource((), facts))
    assert [(i.stack.name, i.rule) for i in found] == [("mine", "config"), ("vc-dr/db01", "vcenter"),
                                                        ("vc1/db01", "vcenter")]
    chosen, missing = pick(found, ["db01"], ["nope"])
    assert [i.stack.name for i in chosen] == ["vc-dr/db01", "vc1/db01"] and missing == ["nope"]
    assert pick(found, ["vc1/db01"], [])[0][0].stack.name == "vc1/db01"
    assert pick(found, [], []) == (found, [])


def test_infer_stacks_gives_a_lone_db2_and_a_lone_guest_their_own_stacks():
    rows = [Sample("db2_database", {"db2": "PAY"}, {"connections": 3.0}, T0),
            Sample("guest_cpu", {"guest": "pay-host"}, {"user_pct": 1.0}, T0),
            Sample("guest_cpu", {"guest": "batch9"}, {"user_pct": 1.0}, T0)]
    found = {i.stack.name: i for i in infer_stacks(Config(), MemorySource(rows))}
    assert found["PAY"].rule == "db2" and found["PAY"].stack.guest is None  # two free guests: neither is taken
    assert {n for n, i in found.items() if i.rule == "guest"} == {"pay-host", "batch9"}
