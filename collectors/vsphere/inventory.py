"""Inventory in bulk: one PropertyCollector pass per object type over a ContainerView.

Every cycle reads the few properties that tag samples (names, VM -> host placement,
vCPU count, quickStats); the facts pass (every facts_interval) reads the configuration
the static checks need. Nothing is ever read one object at a time, and the responses
are parsed with ElementTree (soapxml.py), not pyvmomi's per-element objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import escape

from pyVmomi import vim

from db2vtop.collectors.base import CollectorError
from db2vtop.collectors.vsphere.soapxml import NS, Ref, envelope, this, to_int, value

VM_QUICKSTATS = ("balloonedMemory", "swappedMemory", "compressedMemory", "overallCpuUsage", "guestMemoryUsage",
                 "hostMemoryUsage", "consumedOverheadMemory")
VM_LIGHT = ("name", "runtime.host", "runtime.powerState", "config.hardware.numCPU",
            *(f"summary.quickStats.{q}" for q in VM_QUICKSTATS))
VM_FULL = (*VM_LIGHT, "config.hardware.numCoresPerSocket", "config.hardware.memoryMB", "config.cpuAllocation",
           "config.memoryAllocation", "config.memoryReservationLockedToMax", "config.latencySensitivity.level",
           "config.cpuHotAddEnabled", "config.version", "config.swapPlacement", "config.hardware.device",
           "guest.toolsRunningStatus", "guest.toolsVersionStatus2", "guest.toolsVersion", "guest.hostName",
           "guest.ipAddress", "guest.net")
HOST_LIGHT = ("name", "parent", "summary.hardware.numCpuThreads", "summary.quickStats.overallCpuUsage",
              "summary.quickStats.overallMemoryUsage")
HOST_FULL = (*HOST_LIGHT, "summary.hardware.cpuModel", "summary.hardware.cpuMhz", "summary.hardware.numCpuPkgs",
             "summary.hardware.numCpuCores", "hardware.memorySize", "hardware.numaInfo", "config.hyperThread",
             "config.powerSystemInfo.currentPolicy.shortName", "config.product.version", "config.product.build",
             "config.storageDevice.multipathInfo", "config.storageDevice.scsiLun", "config.network.vswitch",
             "config.network.vnic", "datastore")
CLUSTER = ("name",)
DS_FULL = ("name", "summary.type", "summary.capacity", "summary.freeSpace", "info", "host")
VIEW_TYPES = [vim.VirtualMachine, vim.HostSystem, vim.ComputeResource, vim.Datastore]
PAGE = 1000        # objects per PropertyCollector page
FULL_PAGE = 500    # VMs per page with their device lists (vCenter caps XML elements per response)

Rows = list[tuple[Ref, dict[str, Any]]]


@dataclass(slots=True)
class VM:
    moid: str
    name: str
    host: str          # host moid
    powered_on: bool
    vcpus: int
    quickstats: dict[str, int]


@dataclass(slots=True)
class Host:
    moid: str
    name: str
    cluster: str       # cluster name, "" for a standalone host
    threads: int
    quickstats: dict[str, int]


@dataclass
class Inventory:
    vms: dict[str, VM] = field(default_factory=dict)
    hosts: dict[str, Host] = field(default_factory=dict)


def create_view(content: Any) -> Any:
    return content.viewManager.CreateContainerView(content.rootFolder, VIEW_TYPES, True)


def retrieve_xml(pc: str, view: str, props: dict[str, tuple[str, ...]], page: int) -> bytes:
    prop_set = "".join(f"<propSet><type>{t}</type><all>false</all>"
                       + "".join(f"<pathSet>{escape(p)}</pathSet>" for p in paths) + "</propSet>"
                       for t, paths in props.items())
    return envelope(
        f'<RetrievePropertiesEx xmlns="urn:vim25">{this("PropertyCollector", pc)}<specSet>{prop_set}'
        f'<objectSet><obj type="ContainerView">{escape(view)}</obj><skip>true</skip>'
        '<selectSet xsi:type="TraversalSpec"><name>view</name><type>ContainerView</type><path>view</path>'
        f'<skip>false</skip></selectSet></objectSet></specSet><options><maxObjects>{page}</maxObjects></options>'
        "</RetrievePropertiesEx>")


def continue_xml(pc: str, token: str) -> bytes:
    return envelope(f'<ContinueRetrievePropertiesEx xmlns="urn:vim25">{this("PropertyCollector", pc)}'
                    f"<token>{escape(token)}</token></ContinueRetrievePropertiesEx>")


def parse_objects(el: Any) -> tuple[Rows, str | None]:
    """(object, {path: value}) rows and the continuation token of one result page."""
    try:
        return _parse_objects(el)
    except (ValueError, TypeError, AttributeError) as e:
        raise CollectorError(f"malformed RetrievePropertiesEx response: {e}") from None


def _parse_objects(el: Any) -> tuple[Rows, str | None]:
    rv = el.find(NS + "returnval")
    if rv is None:
        return [], None
    rows: Rows = []
    for o in rv.findall(NS + "objects"):
        obj = value(o.find(NS + "obj"))
        if not isinstance(obj, Ref):
            raise ValueError("an object without a managed object reference")
        props = {}
        for p in o.findall(NS + "propSet"):
            val = p.find(NS + "val")
            props[p.findtext(NS + "name") or ""] = value(val) if val is not None else None
        rows.append((obj, props))
    return rows, rv.findtext(NS + "token")


def retrieve(session: Any, view: str, props: dict[str, tuple[str, ...]], page: int) -> Rows:
    """Every object of the given types in the view, page by page (one round trip each)."""
    pc = session.content.propertyCollector._moId
    rows, token = parse_objects(session.post(retrieve_xml(pc, view, props, page)))
    while token:
        more, token = parse_objects(session.post(continue_xml(pc, token)))
        rows.extend(more)
    return rows


def vms_from(rows: Rows) -> dict[str, VM]:
    vms = {}
    for obj, p in rows:
        host = p.get("runtime.host")
        qs = {q: int(p[f"summary.quickStats.{q}"]) for q in VM_QUICKSTATS
              if to_int(p.get(f"summary.quickStats.{q}")) is not None}
        vms[obj.value] = VM(obj.value, p.get("name") or obj.value, host.value if isinstance(host, Ref) else "",
                            p.get("runtime.powerState") == "poweredOn", to_int(p.get("config.hardware.numCPU"), 1),
                            qs)
    return vms


def hosts_from(rows: Rows) -> dict[str, Host]:
    clusters = {o.value: p.get("name") or "" for o, p in rows if o.type == "ClusterComputeResource"}
    hosts = {}
    for obj, p in rows:
        if obj.type != "HostSystem":
            continue
        parent = p.get("parent")
        qs = {k: int(p[f"summary.quickStats.{k}"]) for k in ("overallCpuUsage", "overallMemoryUsage")
              if to_int(p.get(f"summary.quickStats.{k}")) is not None}
        hosts[obj.value] = Host(obj.value, p.get("name") or obj.value,
                                clusters.get(parent.value, "") if isinstance(parent, Ref) else "",
                                to_int(p.get("summary.hardware.numCpuThreads"), 1), qs)
    return hosts


def read_vms(session: Any, view: str, full: bool) -> Rows:
    return retrieve(session, view, {"VirtualMachine": VM_FULL if full else VM_LIGHT}, FULL_PAGE if full else PAGE)


def read_hosts(session: Any, view: str, full: bool) -> Rows:
    return retrieve(session, view, {"HostSystem": HOST_FULL if full else HOST_LIGHT,
                                    "ClusterComputeResource": CLUSTER}, PAGE)


def read_datastores(session: Any, view: str) -> Rows:
    return retrieve(session, view, {"Datastore": DS_FULL}, PAGE)


@dataclass
class FullRead:
    """The facts pass: raw rows, kept so facts and the tag maps come from one read."""

    inventory: Inventory
    vm_rows: Rows
    host_rows: Rows
    ds_rows: Rows
