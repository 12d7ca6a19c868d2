"""Answers recorded against real vCenters (5.5, 6.0, 6.5, 6.7, 8.0.3; tests/collectors/vsphere/fixtures, from
pyvmomi's test cassettes) through db2vtop's parser: the VM, host, datastore and LUN facts built from them equal
what the XML says.
The expected values are read from the XML here with plain ElementTree paths, not with db2vtop's parser; the
recorded wholes (`config`, `summary`, ...) are taken apart into the paths db2vtop asks for, as vCenter answers a
path with that part of the whole."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from db2vtop.collectors.vsphere import connection
from db2vtop.collectors.vsphere.facts import build_facts
from db2vtop.collectors.vsphere.inventory import (
    DS_FULL,
    HOST_FULL,
    VM_FULL,
    FullRead,
    Inventory,
    hosts_from,
    parse_objects,
    vms_from,
)
from db2vtop.collectors.vsphere.soapxml import NS, Node, Ref, value
from tests.infra.vsphere_sim import soap_body

FIXTURES = Path(__file__).parent / "fixtures"
XSI = "{http://www.w3.org/2001/XMLSchema-instance}type"
#: version -> (host, datastore, VM) recorded whole; 5.5's recordings hold VMs only
INVENTORY = {"5.5": (None, None, "vm-722"), "6.7": ("host-14", "datastore-15", "vm-127"),
             "8.0.3": ("host-14", "datastore-17", "vm-19")}


# --- through db2vtop's parser -------------------------------------------------------------------------------------


def parsed(version: str, moid: str, prop: str):
    """A recorded property as db2vtop's parser gives it (a RetrievePropertiesEx answer's propSet, or a Fetch answer's
    returnval); None where it was not recorded."""
    path = FIXTURES / version / f"{moid}.{prop}.xml"
    if not path.exists():
        return None
    body = soap_body(path.read_bytes())
    if body.tag == NS + "FetchResponse":
        return value(body.find(NS + "returnval"))
    ((_, props),), _ = parse_objects(body)
    return props[prop]


def row(version: str, obj: Ref, paths: tuple[str, ...]) -> tuple[Ref, dict]:
    """The row vCenter would answer for these paths, from the recorded wholes."""
    out = {}
    for path in paths:
        head, *rest = path.split(".")
        v = parsed(version, obj.value, head)
        for part in rest:
            v = v.get(part) if isinstance(v, Node) else None
        if v is not None:
            out[path] = v
    return obj, out


def facts_of(version: str) -> dict[str, dict]:
    host, ds, vm = INVENTORY[version]
    host_rows = [row(version, Ref("HostSystem", host), HOST_FULL)] if host else []
    ds_rows = [row(version, Ref("Datastore", ds), DS_FULL)] if ds else []
    vm_rows = [row(version, Ref("VirtualMachine", vm), VM_FULL)]
    if version == "5.5":  # a second VM recorded: its name and guest only
        vm_rows.append(row(version, Ref("VirtualMachine", "vm-36"), VM_FULL))
    read = FullRead(Inventory(vms_from(vm_rows), hosts_from(host_rows)), vm_rows, host_rows, ds_rows)
    facts, _ = build_facts("vc1", read, 0)
    return {f"{f.kind}:{next(v for k, v in f.tags.items() if k != 'vcenter')}": f.data for f in facts}


# --- the XML as it is ---------------------------------------------------------------------------------------------


def xml(version: str, moid: str, prop: str) -> ET.Element:
    """The recorded property's element, read with ElementTree alone."""
    root = ET.parse(FIXTURES / version / f"{moid}.{prop}.xml").getroot()
    found = root.find(f".//{NS}propSet/{NS}val")
    return found if found is not None else root.find(f".//{NS}returnval")


def text(el: ET.Element, path: str) -> str | None:
    return el.findtext("/".join(NS + p for p in path.split("/")))


def each(el: ET.Element, path: str) -> list[ET.Element]:
    return el.findall("/".join(NS + p for p in path.split("/")))


def ints(el: ET.Element, path: str) -> int | None:
    t = text(el, path)
    return int(t) if t is not None else None


# --- tests --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["5.5", "6.0", "6.5", "6.7", "8.0.3"])
def test_service_content(version):
    """What the collector takes from the ServiceContent (the managed objects it talks to, the server's identity)."""
    content = value(soap_body((FIXTURES / version / "ServiceInstance.content.xml").read_bytes()).find(NS + "returnval"))
    el = ET.parse(FIXTURES / version / "ServiceInstance.content.xml").getroot().find(f".//{NS}returnval")
    about = content.get("about")
    assert (about.get("fullName"), about.get("apiVersion"), about.get("apiType")) == (
        text(el, "about/fullName"), text(el, "about/apiVersion"), "VirtualCenter")
    assert about.get("fullName").startswith(f"VMware vCenter Server {version}")
    for ref in ("propertyCollector", "viewManager", "rootFolder", "perfManager", "sessionManager"):
        got = content.get(ref)
        assert isinstance(got, Ref) and got.value == text(el, ref), ref


@pytest.mark.parametrize("version", ["6.7", "8.0.3"])
def test_host_and_its_luns(version):
    host, ds_moid, _ = INVENTORY[version]
    data = facts_of(version)
    name = xml(version, host, "name").text
    got = data[f"vsphere_host:{name}"]
    summary, hardware, config = xml(version, host, "summary"), xml(version, host, "hardware"), xml(version, host,
                                                                                                   "config")
    assert got["cpu_model"] == text(summary, "hardware/cpuModel")
    assert (got["cpu_mhz"], got["cpu_sockets"], got["cpu_cores"], got["cpu_threads"]) == (
        ints(summary, "hardware/cpuMhz"), ints(summary, "hardware/numCpuPkgs"), ints(summary, "hardware/numCpuCores"),
        ints(summary, "hardware/numCpuThreads"))
    assert got["memory_bytes"] == ints(hardware, "memorySize") and got["numa_nodes"] == ints(hardware,
                                                                                            "numaInfo/numNodes")
    assert [n["cpus"] for n in got["numa"]] == [len(each(n, "cpuID")) for n in each(hardware, "numaInfo/numaNode")]
    assert (got["esxi_version"], got["esxi_build"]) == (text(config, "product/version"), text(config, "product/build"))
    assert got["esxi_version"].startswith(version)
    assert got["power_policy"] == text(config, "powerSystemInfo/currentPolicy/shortName")
    assert (got["hyperthreading_available"], got["hyperthreading_active"]) == (
        text(config, "hyperThread/available") == "true", text(config, "hyperThread/active") == "true")
    assert got["vswitches"] == [{"name": text(v, "name"), "mtu": ints(v, "mtu")}
                                for v in each(config, "network/vswitch")]
    assert got["vmknics"] == [{"device": text(v, "device"), "portgroup": text(v, "portgroup"),
                               "mtu": ints(v, "spec/mtu")} for v in each(config, "network/vnic")]
    ds_name = xml(version, ds_moid, "name").text
    assert got["datastores"] == [ds_name] and [r.text for r in xml(version, host, "datastore")] == [ds_moid]

    # each storage device: multipathInfo's logical unit, joined by its `lun` to the scsiLun of that key
    extents = [text(e, "diskName") for e in each(xml(version, ds_moid, "info"), "vmfs/extent")]
    devices = {text(d, "key"): d for d in each(config, "storageDevice/scsiLun")}
    want = []
    for unit in each(config, "storageDevice/multipathInfo/lun"):
        d = devices[text(unit, "lun")]
        paths = [{"name": text(p, "name"), "state": text(p, "pathState")} for p in each(unit, "path")]
        hpp = unit.find(NS + "policy").get(XSI) == "HostMultipathInfoHppLogicalUnitPolicy"
        want.append({"lun": text(d, "canonicalName"), "uuid": text(unit, "id"), "type": text(d, "lunType"),
                     "local": None if text(d, "localDisk") is None else text(d, "localDisk") == "true",
                     "datastore": ds_name if text(d, "canonicalName") in extents else "",
                     "queue_depth": ints(d, "queueDepth"), "plugin": "HPP" if hpp else "NMP",
                     "policy": text(unit, "policy/policy"), "satp": text(unit, "storageArrayTypePolicy/policy"),
                     "paths_total": len(paths), "paths_active": sum(p["state"] == "active" for p in paths),
                     "paths": paths})
    assert got["luns"] == want
    # canonical, the UUID only an attribute; on these hosts the UUID is never the name
    assert all(re.match(r"(naa|eui|t10|mpx|vml)\.", x["lun"]) and x["uuid"] != x["lun"] for x in got["luns"])
    if version == "6.7":  # a Dell PERC disk under NMP, datastore1 on it; a CD-ROM
        disk = next(x for x in got["luns"] if x["type"] == "disk")
        assert (disk["lun"], disk["datastore"], disk["queue_depth"], disk["satp"]) == (
            "naa.6b8ca3a0e65228002312a2e3098048bf", "datastore1", 128, "VMW_SATP_LOCAL")
    else:  # NVMe and local disks under the HPP (FIXED, no SATP), the vSAN datastore on none of them
        assert {x["plugin"] for x in got["luns"]} == {"HPP"} and {x["satp"] for x in got["luns"]} == {None}
        assert {x["lun"][:4] for x in got["luns"]} == {"eui.", "mpx."} and {x["datastore"] for x in got["luns"]} == {""}


@pytest.mark.parametrize("version", ["6.7", "8.0.3"])
def test_datastore(version):
    _, ds, _ = INVENTORY[version]
    name = xml(version, ds, "name").text
    got = facts_of(version)[f"vsphere_datastore:{name}"]
    summary, info = xml(version, ds, "summary"), xml(version, ds, "info")
    assert (got["type"], got["capacity_bytes"], got["free_bytes"], got["url"]) == (
        text(summary, "type"), ints(summary, "capacity"), ints(summary, "freeSpace"), text(info, "url"))
    assert got["luns"] == [text(e, "diskName") for e in each(info, "vmfs/extent")]
    assert got.get("vmfs_uuid") == text(info, "vmfs/uuid") and got.get("vmfs_version") == text(info, "vmfs/version")
    host_name = xml(version, INVENTORY[version][0], "name").text
    mounts = [k.text for k in xml(version, ds, "host").iter(NS + "key")]
    assert INVENTORY[version][0] in mounts and got["hosts"] == [host_name]  # the hosts the recording has


@pytest.mark.parametrize("version", ["5.5", "6.7", "8.0.3"])
def test_vm(version):
    _, ds, vm = INVENTORY[version]
    data = facts_of(version)
    name = xml(version, vm, "name").text
    got = data[f"vsphere_vm:{name}"]
    config = xml(version, vm, "config")
    assert (got["num_cpu"], got["memory_mb"], got["cores_per_socket"], got["hw_version"]) == (
        ints(config, "hardware/numCPU"), ints(config, "hardware/memoryMB"),
        ints(config, "hardware/numCoresPerSocket") or 1, text(config, "version"))
    assert (got["cpu_reservation_mhz"], got["cpu_limit_mhz"], got["mem_reservation_mb"], got["mem_limit_mb"]) == (
        ints(config, "cpuAllocation/reservation"), ints(config, "cpuAllocation/limit"),
        ints(config, "memoryAllocation/reservation"), ints(config, "memoryAllocation/limit"))
    devices = each(config, "hardware/device")
    kinds = {d.get(XSI) for d in devices}
    nic_types = {"VirtualVmxnet3": "vmxnet3", "VirtualE1000e": "e1000e", "VirtualE1000": "e1000"}
    assert [n["type"] for n in got["nics"]] == [nic_types[d.get(XSI)] for d in devices if d.get(XSI) in nic_types]
    scsi_types = {"ParaVirtualSCSIController": "pvscsi", "VirtualLsiLogicSASController": "lsilogic-sas",
                  "VirtualLsiLogicController": "lsilogic"}
    assert [c["type"] for c in got["scsi_controllers"]] == [scsi_types[k] for k in (d.get(XSI) for d in devices)
                                                           if k in scsi_types]
    controllers = {text(d, "key"): d for d in devices if text(d, "busNumber") is not None}
    prefix = {"ParaVirtualSCSIController": "scsi", "VirtualLsiLogicSASController": "scsi",
              "VirtualLsiLogicController": "scsi", "VirtualAHCIController": "sata", "VirtualIDEController": "ide"}
    ds_name = xml(version, ds, "name").text if ds else None
    want = []
    for d in (d for d in devices if d.get(XSI) == "VirtualDisk"):
        ctrl = controllers[text(d, "controllerKey")]
        backing = d.find(NS + "backing")
        want.append({"instance": f"{prefix[ctrl.get(XSI)]}{text(ctrl, 'busNumber')}:{text(d, 'unitNumber')}",
                     "capacity_bytes": ints(d, "capacityInBytes") or ints(d, "capacityInKB") * 1024,
                     "backing": "thin" if text(backing, "thinProvisioned") == "true" else
                     "eager_zeroed" if text(backing, "eagerlyScrub") == "true" else "lazy_zeroed",
                     "datastore": ds_name if text(backing, "datastore") == ds else "",
                     "file": text(backing, "fileName")})
    assert want and [{k: x[k] for k in want[0]} for x in got["disks"]] == want
    assert "VirtualDisk" in kinds
    if version != "5.5":
        runtime, guest = xml(version, vm, "runtime"), xml(version, vm, "guest")
        assert got["power_state"] == text(runtime, "powerState") and got["host_moid"] == text(runtime, "host")
        assert (got["guest_hostname"], got["tools_running_status"]) == (
            text(guest, "hostName"), text(guest, "toolsRunningStatus"))
        assert got["ip_addresses"] == sorted({ip.text for ip in each(guest, "net/ipAddress")}
                                             | ({text(guest, "ipAddress")} - {None}))
        # the disks' LUNs: the datastore's extents (a vSAN datastore has none)
        extents = [text(e, "diskName") for e in each(xml(version, ds, "info"), "vmfs/extent")]
        assert all(x["luns"] == extents for x in got["disks"])
    else:  # the second 5.5 VM: name and guest recorded
        other = data[f"vsphere_vm:{xml(version, 'vm-36', 'name').text}"]
        guest = xml(version, "vm-36", "guest")
        assert other["guest_hostname"] == text(guest, "hostName")
        assert other["ip_addresses"] == sorted({ip.text for ip in each(guest, "net/ipAddress")}
                                               | ({text(guest, "ipAddress")} - {None}))


def test_every_recorded_answer_parses_within_its_own_size():
    """The element bound (max_response_bytes / BYTES_PER_ELEMENT) admits the densest real answer recorded: each
    answer parses with its own size as the byte bound, and the bound keeps a margin of at least 1.5 under the
    densest (8.0.3's host systemResources: 27 bytes per element; host configs 32-33)."""
    densest = None
    for path in sorted(FIXTURES.glob("*/*.xml")):
        data = path.read_bytes()
        soap_body(data)
        elements = sum(1 for _ in ET.fromstring(data).iter())
        per = len(data) / elements
        densest = per if densest is None else min(densest, per)
    assert densest is not None and densest >= 1.5 * connection.BYTES_PER_ELEMENT, densest
