"""Inventory in bulk: one PropertyCollector pass per object type over a ContainerView.

Every cycle reads the few properties that tag samples (names, VM -> host placement,
vCPU count, quickStats) and tell when a VM's configuration changed; the facts pass reads
the configuration the static checks need (every VM once, then only what changed). Nothing is
ever read one object at a time, and the responses are parsed with ElementTree (soapxml.py),
not pyvmomi's per-element objects.
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import escape

from db2vtop.collectors.base import CollectorError
from db2vtop.collectors.vsphere.connection import SoapFaultError
from db2vtop.collectors.vsphere.soapxml import NS, Node, Ref, envelope, this, to_int, value

VM_QUICKSTATS = ("balloonedMemory", "swappedMemory", "compressedMemory", "overallCpuUsage", "guestMemoryUsage",
                 "hostMemoryUsage", "consumedOverheadMemory")
#: what a VM's fact is built from, beyond its configuration: when any of these (or config.changeVersion,
#: which vCenter changes with every reconfiguration: devices, reservations, shares) differs from what the
#: last fact saw, the VM's full row is read again
VM_IDENTITY = ("name", "runtime.host", "runtime.powerState", "config.hardware.numCPU", "config.hardware.memoryMB",
               "config.changeVersion", "guest.hostName", "guest.ipAddress", "guest.toolsRunningStatus")
#: bumped whenever a VM fact's content changes for the same vCenter answer (see identity())
FACTS_VERSION = "2"  # 2: an RDM's LUN by its canonical name
VM_LIGHT = (*VM_IDENTITY, *(f"summary.quickStats.{q}" for q in VM_QUICKSTATS))
VM_FULL = (*VM_LIGHT, "config.hardware.numCoresPerSocket", "config.cpuAllocation",
           "config.memoryAllocation", "config.memoryReservationLockedToMax", "config.latencySensitivity.level",
           "config.cpuHotAddEnabled", "config.version", "config.swapPlacement", "config.hardware.device",
           "guest.toolsVersionStatus2", "guest.toolsVersion", "guest.net")
#: the wholes a full row asks for instead of their parts (VM_FULL's paths under them): each path asked is a
#: propSet of its own in the answer, evaluated and encoded apart (and deep-copied by the simulator) - eleven of
#: a VM's twenty-eight, where the two wholes hold little more (a page of the simulator's VMs: 14 % fewer bytes)
FULL_WHOLES = {whole: tuple(p[len(whole) + 1:] for p in VM_FULL if p.startswith(whole + "."))
               for whole in ("summary.quickStats", "config.hardware")}
VM_FULL_ASKED = (*(p for p in VM_FULL if not p.startswith(tuple(w + "." for w in FULL_WHOLES))), *FULL_WHOLES)
HOST_LIGHT = ("name", "parent", "summary.hardware.numCpuThreads", "summary.quickStats.overallCpuUsage",
              "summary.quickStats.overallMemoryUsage")
HOST_FULL = (*HOST_LIGHT, "summary.hardware.cpuModel", "summary.hardware.cpuMhz", "summary.hardware.numCpuPkgs",
             "summary.hardware.numCpuCores", "hardware.memorySize", "hardware.numaInfo", "config.hyperThread",
             "config.powerSystemInfo.currentPolicy.shortName", "config.product.version", "config.product.build",
             "config.storageDevice.multipathInfo", "config.storageDevice.scsiLun", "config.network.vswitch",
             "config.network.vnic", "datastore")
CLUSTER = ("name",)
DS_FULL = ("name", "summary.type", "summary.capacity", "summary.freeSpace", "info", "host", "vm")
VIEW_TYPES = ("VirtualMachine", "HostSystem", "ComputeResource", "Datastore")
PAGE = 1000        # objects per PropertyCollector page
#: VMs per page with their device lists (~5 MB parsed of the simulator's; vCenter caps elements too). A facts
#: pass holds the page being made facts and PAGES_AHEAD more, and asks QueryPerf for each page's VMs in one call.
#: 50 a page was ~2.5 MB less of a first cycle's RSS, which since first cycles hand on in parts is no longer any
#: peak (2,000 VMs: 64-69 MB against the steady agent's 74; 10,000: 133-135 against a restart's 176), and cost
#: twice the round trips: 100 a page took a 2,000-VM first cycle 2.8 s against 2.95-3.1 (200: no faster, 75 MB)
FULL_PAGE = 100
#: VMs changed within a cycle that are read again by reference in one call; more (a mass change, an older
#: db2vtop's facts) and the whole paged pass is cheaper for vCenter
CHANGED_MAX = 100

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


def create_view(session: Any) -> str:
    """A ContainerView of every VM, host, cluster and datastore under the root folder: its moid."""
    types = "".join(f"<type>{t}</type>" for t in VIEW_TYPES)
    rv = session.call("CreateContainerView", "ViewManager", session.view_manager,
                      f'<container type="Folder">{escape(session.root_folder)}</container>{types}'
                      "<recursive>true</recursive>")
    if rv is None or not rv.text:
        raise CollectorError("CreateContainerView answered without a view")
    session.owned.add(rv.text)  # the session's own: gone, the session was lost
    return rv.text


def prop_set(props: dict[str, tuple[str, ...]]) -> str:
    return "".join(f"<propSet><type>{t}</type><all>false</all>"
                   + "".join(f"<pathSet>{escape(p)}</pathSet>" for p in paths) + "</propSet>"
                   for t, paths in props.items())


def view_objects(view: str) -> str:
    """The objectSet of every object in a ContainerView (the view itself skipped)."""
    return (f'<objectSet><obj type="ContainerView">{escape(view)}</obj><skip>true</skip>'
            '<selectSet xsi:type="TraversalSpec"><name>view</name><type>ContainerView</type><path>view</path>'
            "<skip>false</skip></selectSet></objectSet>")


def retrieve_xml(pc: str, view: str, props: dict[str, tuple[str, ...]], page: int) -> bytes:
    return envelope(
        f'<RetrievePropertiesEx xmlns="urn:vim25">{this("PropertyCollector", pc)}<specSet>{prop_set(props)}'
        f"{view_objects(view)}</specSet><options><maxObjects>{page}</maxObjects></options></RetrievePropertiesEx>")


def objects_xml(pc: str, objs: list[Ref], props: dict[str, tuple[str, ...]]) -> bytes:
    """RetrievePropertiesEx of the given objects themselves (no traversal)."""
    objects = "".join(f'<objectSet><obj type="{escape(o.type)}">{escape(o.value)}</obj><skip>false</skip></objectSet>'
                      for o in objs)
    return envelope(f'<RetrievePropertiesEx xmlns="urn:vim25">{this("PropertyCollector", pc)}<specSet>'
                    f"{prop_set(props)}{objects}</specSet><options/></RetrievePropertiesEx>")


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
            # a property's path, once for every row that has it (10,000 VMs' rows are kept)
            props[sys.intern(p.findtext(NS + "name") or "")] = value(val) if val is not None else None
        rows.append((obj, props))
    return rows, rv.findtext(NS + "token")


def _paged(session: Any, first: bytes) -> Rows:
    pc = session.property_collector
    rows, token = parse_objects(session.post(first))
    while token:
        more, token = parse_objects(session.post(continue_xml(pc, token)))
        rows.extend(more)
    return rows


def retrieve(session: Any, view: str, props: dict[str, tuple[str, ...]], page: int) -> Rows:
    """Every object of the given types in the view, page by page (one round trip each)."""
    return _paged(session, retrieve_xml(session.property_collector, view, props, page))


def retrieve_objects(session: Any, objs: list[Ref], props: dict[str, tuple[str, ...]]) -> Rows:
    """The given objects' properties (triage of named VMs: their rows, not the whole vCenter's)."""
    if not objs:
        return []
    return _paged(session, objects_xml(session.property_collector, objs, props))


def vm_from(obj: Ref, p: dict[str, Any]) -> VM:
    host = p.get("runtime.host")
    qs = {q: int(p[f"summary.quickStats.{q}"]) for q in VM_QUICKSTATS
          if to_int(p.get(f"summary.quickStats.{q}")) is not None}
    return VM(obj.value, p.get("name") or obj.value, host.value if isinstance(host, Ref) else "",
              p.get("runtime.powerState") == "poweredOn", to_int(p.get("config.hardware.numCPU"), 1), qs)


def identity(p: dict[str, Any]) -> str:
    """A digest of what a VM's fact was built from (VM_IDENTITY), the same from a full or a light row and
    from one process to the next: the fact carries it, so a restart re-reads only VMs whose digest moved.
    FACTS_VERSION is in it, so facts an older db2vtop built are read again."""
    parts = [FACTS_VERSION, *((v.value if isinstance(v, Ref) else "" if v is None else str(v))
                              for v in (p.get(k) for k in VM_IDENTITY))]
    return hashlib.blake2b("\x1f".join(parts).encode(), digest_size=12).hexdigest()


def vms_from(rows: Rows) -> dict[str, VM]:
    return {obj.value: vm_from(obj, p) for obj, p in rows}


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


def vm_refs(session: Any, view: str) -> list[Ref]:
    """Every VM in the view, without a property (the cheapest read there is)."""
    return [obj for obj, _ in retrieve(session, view, {"VirtualMachine": ()}, PAGE)]


def full_vm_rows(session: Any, vms: list[Ref]) -> Rows:
    """These VMs' full rows (a page of a facts pass: their device lists are the bulk of it, 150 of a
    simulated VM's 240 XML elements). A VM deleted since its reference was read fails the whole call
    in vCenter: the page is halved until only that VM is left out."""
    try:
        return [(obj, _parts(p)) for obj, p in retrieve_objects(session, vms, {"VirtualMachine": VM_FULL_ASKED})]
    except SoapFaultError as e:
        if e.name != "ManagedObjectNotFound":
            raise
        if len(vms) == 1:
            return []
    half = len(vms) // 2
    return full_vm_rows(session, vms[:half]) + full_vm_rows(session, vms[half:])


def _parts(p: dict[str, Any]) -> dict[str, Any]:
    """A full row as asked (VM_FULL_ASKED) under VM_FULL's paths, as a light row has them: a part a whole leaves
    out (vCenter omits an unset number) is left out. A part comes as text, not as the number its own path gives:
    readers convert (to_int), and identity() digests its text."""
    for whole, parts in FULL_WHOLES.items():
        node = p.pop(whole, None)
        if isinstance(node, Node):
            for part in parts:
                v = node.get(part)
                if v is not None:
                    p[f"{whole}.{part}"] = v
    return p


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
    agg_rows: Rows = field(default_factory=list)  # every VM's light row when vm_rows holds only some
    names: dict[str, str] = field(default_factory=dict)  # VM moid -> name, of VMs no row here holds
