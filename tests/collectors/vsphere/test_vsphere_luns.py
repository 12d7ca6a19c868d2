"""A LUN is named as the host names it: scsiLun's canonical name (naa./eui./mpx.), joined to multipathInfo's logical
unit by `lun == key`; the logical unit's id (the SCSI UUID on every real host, and in tests/infra/vsphere-sim as in
govmomi's captured ESX data) is only an attribute. Facts, perf tags, RDMs, the MPIO and queue-depth rules and the
stack resolver all use the canonical name. What the host says is read here with pyvmomi, not with db2vtop's parser."""

from __future__ import annotations

import asyncio
import re
import ssl

import pytest
from pyVim.connect import Disconnect, SmartConnect
from pyVmomi import vim, vmodl

from db2vtop.agent.core.config import StackConfig
from db2vtop.agent.core.model import Sample
from db2vtop.agent.core.source import MemorySource
from db2vtop.checks.rule import FactIndex
from db2vtop.checks.rules.vsphere import HbaQueueDepth, MultipathRoundRobin, RedundantPaths
from db2vtop.checks.topology import lun_name, resolve
from db2vtop.collectors.vsphere.collector import VSphereCollector
from db2vtop.collectors.vsphere.config import VCenterConfig
from db2vtop.collectors.vsphere.facts import host_luns
from db2vtop.collectors.vsphere.inventory import parse_objects
from tests.infra.vsphere_sim import Simulator, soap_body

NMP_RR = "naa.600a098038303053000000000000b001"     # datastore ds_a, mounted by both hosts
NMP_FIXED = "naa.600a098038303053000000000000b002"  # datastore ds_b, mounted by esx01 only
RDM = "naa.600a098038303053000000000000b003"        # an RDM of db2rdm01
HPP_RR = "eui.0025384b91b0a7e2000000000000c001"     # NVMe-oF under the HPP, LB-RR (its default)
HPP_FIXED = "eui.0025384b91b0a7e2000000000000c002"  # under the HPP, FIXED on two paths

SCENARIO = {
    "datacenter": "DC1", "version": "8.0.3",  # the HPP's policy type is API 7.0's
    "datastores": [{"name": "ds_a", "capacity_gb": 1024, "free_gb": 512, "luns": [NMP_RR]},
                   {"name": "ds_b", "capacity_gb": 512, "free_gb": 256, "luns": [NMP_FIXED]},
                   {"name": "ds_nvme", "capacity_gb": 512, "free_gb": 256, "luns": [HPP_RR]}],
    "hosts": [
        {"name": "esx01", "cluster": "prod", "cpu_sockets": 2, "cpu_cores": 8, "cpu_threads": 16, "cpu_mhz": 2600,
         "memory_mb": 131072, "numa_nodes": 2, "hyperthreading": True, "datastores": ["ds_a", "ds_b", "ds_nvme"],
         "luns": [{"name": NMP_FIXED, "policy": "VMW_PSP_FIXED", "satp": "VMW_SATP_ALUA", "paths": 2,
                   "queue_depth": 32},
                  {"name": HPP_RR, "plugin": "HPP", "paths": 4, "queue_depth": 128},
                  {"name": HPP_FIXED, "plugin": "HPP", "policy": "FIXED", "paths": 2, "queue_depth": 128}],
         "perf": {"disk.deviceLatency.average": {NMP_RR: 3, HPP_RR: 1}},
         "vms": [{"name": "db2rdm01", "num_cpu": 4, "memory_mb": 16384,
                  "disks": [{"datastore": "ds_a", "size_gb": 40, "backing": "eager_zeroed"},
                            {"datastore": "ds_a", "size_gb": 100, "backing": "rdm", "lun": RDM}]}]},
        {"name": "esx02", "cluster": "prod", "cpu_sockets": 2, "cpu_cores": 8, "cpu_threads": 16, "cpu_mhz": 2600,
         "memory_mb": 131072, "numa_nodes": 2, "hyperthreading": True, "datastores": ["ds_a"],
         "perf": {"disk.deviceLatency.average": {NMP_RR: 5, NMP_FIXED: 6}},
         "luns": [{"name": NMP_FIXED, "paths": 2}],
         "vms": [{"name": "app02", "num_cpu": 2, "memory_mb": 4096}]},
    ],
}


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    with Simulator.of(SCENARIO, tmp_path_factory.mktemp("sim")) as s:
        yield s


@pytest.fixture(scope="module")
def collected(sim):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VC_TEST_PASSWORD", "anything")
        c = VSphereCollector(VCenterConfig(name="vc1", url=sim.url, user="monitor", password_env="VC_TEST_PASSWORD",
                                           verify_tls=False))

        async def cycle():
            try:
                return await c.describe(), await c.collect()
            finally:
                await c.close()
        facts, records = asyncio.run(cycle())
    return facts, [r for r in records if isinstance(r, Sample)]


def as_the_api_says(url: str) -> dict[str, dict[str, dict]]:
    """host -> canonical name -> what pyvmomi reads of the device: scsiLun joined to multipathInfo by key."""
    host, port = re.match(r"https://([^:/]+):(\d+)/", url).groups()
    si = SmartConnect(host=host, port=int(port), user="monitor", pwd="x", sslContext=ssl._create_unverified_context())
    try:
        content = si.RetrieveContent()
        view = content.viewManager.CreateContainerView(content.rootFolder, [vim.HostSystem], True)
        pc = vmodl.query.PropertyCollector
        spec = pc.FilterSpec(objectSet=[pc.ObjectSpec(obj=h) for h in view.view],
                             propSet=[pc.PropertySpec(type=vim.HostSystem, pathSet=["name", "config.storageDevice"])])
        out = {}
        for o in content.propertyCollector.RetrieveContents([spec]):
            p = {x.name: x.val for x in o.propSet}
            devices = {d.key: d for d in p["config.storageDevice"].scsiLun}
            out[p["name"]] = {
                devices[u.lun].canonicalName: {
                    "uuid": u.id, "device_uuid": devices[u.lun].uuid, "queue_depth": devices[u.lun].queueDepth,
                    "policy": u.policy.policy, "hpp": isinstance(u.policy, vim.host.MultipathInfo.HppLogicalUnitPolicy),
                    "satp": u.storageArrayTypePolicy.policy if u.storageArrayTypePolicy else None,
                    "paths": [(x.name, x.pathState) for x in u.path]}
                for u in p["config.storageDevice"].multipathInfo.lun}
        return out
    finally:
        Disconnect(si)


def host_fact(facts, host: str) -> dict:
    (f,) = [f for f in facts if f.kind == "vsphere_host" and f.tags["host"] == host]
    return f.data


def test_the_simulator_names_devices_as_real_hosts_do(sim):
    """tests/infra/vsphere-sim is no friendlier than VMware's data: the logical unit's id is the SCSI UUID, never the
    canonical name."""
    api = as_the_api_says(sim.url)
    for luns in api.values():
        for name, lun in luns.items():
            assert lun["uuid"] == lun["device_uuid"] and lun["uuid"] != name and not lun["uuid"].startswith("naa.")
    # as ESXi forms it: 0200, the LUN number, 0000, the NAA id, the model's first six bytes ("LUN C-")
    assert re.fullmatch("0200[0-9a-f]{2}0000" + NMP_RR[4:] + "4c554e20432d", api["esx01"][NMP_RR]["uuid"])
    assert api["esx01"][HPP_RR]["uuid"] == "06" + HPP_RR[4:]  # an NVMe namespace's: 06 and its EUI-64 id


def test_host_lun_facts_are_the_devices_as_the_host_names_them(sim, collected):
    facts, _ = collected
    api = as_the_api_says(sim.url)
    for host in ("esx01", "esx02"):
        luns = {x["lun"]: x for x in host_fact(facts, host)["luns"]}
        assert set(luns) == set(api[host])
        for name, want in api[host].items():
            got = luns[name]
            assert got["uuid"] == want["uuid"] and got["queue_depth"] == want["queue_depth"]
            assert (got["policy"], got["satp"], got["plugin"]) == (want["policy"], want["satp"],
                                                                  "HPP" if want["hpp"] else "NMP")
            assert [(x["name"], x["state"]) for x in got["paths"]] == want["paths"]
            assert got["paths_active"] == sum(s == "active" for _, s in want["paths"])
    one = {x["lun"]: x for x in host_fact(facts, "esx01")["luns"]}
    assert (one[NMP_RR]["datastore"], one[NMP_FIXED]["datastore"], one[HPP_RR]["datastore"]) == ("ds_a", "ds_b",
                                                                                                 "ds_nvme")
    assert (one[NMP_FIXED]["queue_depth"], one[HPP_RR]["satp"], one[HPP_RR]["policy"]) == (32, None, "LB-RR")
    # esx02 sees NMP_FIXED but does not mount ds_b: no datastore of its own on it
    assert {x["lun"]: x["datastore"] for x in host_fact(facts, "esx02")["luns"]}[NMP_FIXED] == ""


def test_an_rdm_is_named_by_its_canonical_name(collected):
    """A real host names an RDM's device by its vml. path and its LUN by the SCSI UUID; the host's devices resolve
    the UUID to the canonical name."""
    facts, samples = collected
    (vm,) = [f.data for f in facts if f.kind == "vsphere_vm" and f.tags["vm"] == "db2rdm01"]
    assert [(d["backing"], d["luns"]) for d in vm["disks"]] == [("eager_zeroed", [NMP_RR]), ("rdm", [RDM])]
    tags = {s.tags["instance"]: s.tags.get("lun") for s in samples if s.measurement == "vsphere_vm_disk"
            and s.tags["vm"] == "db2rdm01"}
    assert tags == {"scsi0:0": NMP_RR, "scsi0:1": RDM}


def test_host_lun_series_carry_the_datastore_the_host_mounts(collected):
    _, samples = collected
    tags = {(s.tags["host"], s.tags["lun"]): s.tags.get("datastore") for s in samples
            if s.measurement == "vsphere_host_lun"}
    assert tags[("esx01", NMP_RR)] == "ds_a" and tags[("esx02", NMP_RR)] == "ds_a"
    assert tags[("esx01", HPP_RR)] == "ds_nvme"
    assert tags[("esx02", NMP_FIXED)] is None  # esx02 does not mount ds_b
    assert all(lun_name(lun) == lun for _, lun in tags)


def test_the_mpio_and_queue_depth_rules_judge_each_device_by_its_plugin(collected):
    """NMP: Round Robin. HPP (no SATP, no PSP): a load-balancing scheme, as VMware documents the High-Performance
    Plug-in; FIXED on two paths is the departure. Queue depth as the device reports it."""
    facts, _ = collected
    index = FactIndex()
    index.add(facts)

    def verdicts(rule) -> dict[tuple[str, str], str | None]:
        return {(v.subject["host"], v.subject["lun"]): v.severity for v in rule.judge_facts(index, rule.defaults)}
    rr = verdicts(MultipathRoundRobin())
    assert rr[("esx01", NMP_RR)] is None and rr[("esx01", NMP_FIXED)] == "warning"
    assert rr[("esx01", HPP_RR)] is None and rr[("esx01", HPP_FIXED)] == "warning"
    depth = verdicts(HbaQueueDepth())
    assert depth[("esx01", NMP_FIXED)] == "warning" and depth[("esx01", NMP_RR)] is None
    assert depth[("esx01", HPP_RR)] is None
    paths = verdicts(RedundantPaths())
    assert paths[("esx01", NMP_RR)] is None and len(paths) == len(rr)
    assert all(lun_name(lun) == lun and lun.startswith(("naa.", "eui.")) for _, lun in rr | depth | paths)


def test_a_stacks_luns_join_the_hosts_series_by_canonical_name(collected):
    facts, samples = collected
    source = MemorySource(samples, facts)
    until = max(s.ts for s in samples)
    entities = resolve(source, StackConfig(name="db2rdm01", vm="db2rdm01"), until - 3600 * 10**9, until)
    assert entities.hosts == ("esx01",) and set(entities.luns) == {NMP_RR, RDM}
    assert entities.luns[NMP_RR] == "ds_a"


def test_a_host_opened_on_its_own_lists_every_device_it_reports_whatever_its_name_form(collected):
    """The TUI opened on a host: its LUNs are every device its per-LUN series name, an NVMe namespace (eui.) as
    much as an NAA id."""
    facts, samples = collected
    until = max(s.ts for s in samples)
    entities = resolve(MemorySource(samples, facts), StackConfig(name="esx01"), until - 3600 * 10**9, until,
                       host="esx01")
    reported = {s.tags["lun"] for s in samples if s.measurement == "vsphere_host_lun" and s.tags["host"] == "esx01"}
    assert HPP_RR in reported and set(entities.luns) == reported
    assert entities.luns[HPP_RR] == "ds_nvme"


def test_lun_names_compare_as_esxi_names_them():
    assert lun_name(" NAA.600A0980383030 ") == "naa.600a0980383030" == lun_name("600A0980383030")
    assert lun_name("EUI.0025384B91B0A7E2") == "eui.0025384b91b0a7e2"
    assert lun_name("mpx.vmhba0:C0:T0:L0") == "mpx.vmhba0:C0:T0:L0"
    assert lun_name("t10.ATA_____Samsung_SSD") == "t10.ATA_____Samsung_SSD" and lun_name("") == ""


def test_an_hpp_device_spoken_of_in_an_older_api_is_still_the_hpps():
    """Spoken to in an API older than 7.0, a host gives an HPP device's policy as the base type: its scheme and the
    missing SATP still say which plug-in claims it."""
    answer = (
        '<?xml version="1.0" encoding="UTF-8"?><soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/"'
        ' xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"><soapenv:Body><RetrievePropertiesExResponse'
        ' xmlns="urn:vim25"><returnval><objects><obj type="HostSystem">host-9</obj>'
        '<propSet><name>config.storageDevice.scsiLun</name><val xsi:type="ArrayOfScsiLun">'
        '<ScsiLun xsi:type="HostScsiDisk"><key>key-vim.host.ScsiDisk-06ab</key><uuid>06ab</uuid>'
        '<canonicalName>eui.ab</canonicalName><lunType>disk</lunType><queueDepth>1024</queueDepth>'
        '<localDisk>true</localDisk></ScsiLun></val></propSet>'
        '<propSet><name>config.storageDevice.multipathInfo</name><val xsi:type="HostMultipathInfo"><lun>'
        '<key>key-vim.host.MultipathInfo.LogicalUnit-06ab</key><id>06ab</id><lun>key-vim.host.ScsiDisk-06ab</lun>'
        '<path><name>vmhba1:C0:T0:L0</name><pathState>active</pathState></path>'
        '<policy><policy>FIXED</policy></policy></lun></val></propSet>'
        '</objects></returnval></RetrievePropertiesExResponse></soapenv:Body></soapenv:Envelope>')
    ((_, p),), _ = parse_objects(soap_body(answer.encode()))
    (lun,) = host_luns(p, {})
    assert (lun["lun"], lun["uuid"], lun["plugin"], lun["satp"], lun["local"], lun["queue_depth"]) == (
        "eui.ab", "06ab", "HPP", None, True, 1024)
