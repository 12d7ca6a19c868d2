"""The light inventory kept current by a PropertyCollector filter: one full read, then only changes.

A collector of our own (CreatePropertyCollector) holds one filter over the ContainerView for the
light properties (VM placement, power state, vCPUs, quickStats, configuration version, guest
identity; host name, parent, threads, quickStats; cluster names). WaitForUpdatesEx with the
last version and maxWaitSeconds = 0 answers at once with what changed since, or nothing: a steady
cycle no longer reads every VM's row again.
The first call (no version) is the full read; a truncated update set is followed until complete.
A version the server no longer knows raises WatchLostError; the caller starts a new watch, which reads
everything again. The collector and its filter are the session's own (Session.owned): one the server no
longer knows means the session was lost, and a new session makes a new watch.
"""

from __future__ import annotations

import sys
from typing import Any
from xml.sax.saxutils import escape

from db2vtop.collectors.base import CollectorError
from db2vtop.collectors.vsphere.connection import SoapFaultError
from db2vtop.collectors.vsphere.inventory import (
    CLUSTER,
    HOST_LIGHT,
    VM_LIGHT,
    Inventory,
    Rows,
    hosts_from,
    prop_set,
    view_objects,
    vms_from,
)
from db2vtop.collectors.vsphere.soapxml import NS, Ref, envelope, this, value

#: faults after which the filter's state cannot be trusted: start again with a full read
LOST_FAULTS = frozenset({"InvalidCollectorVersion", "ManagedObjectNotFound", "InvalidArgument"})
MAX_OBJECT_UPDATES = 200


class WatchLostError(CollectorError):
    pass


def _create_collector_xml(pc: str) -> bytes:
    return envelope(f'<CreatePropertyCollector xmlns="urn:vim25">{this("PropertyCollector", pc)}'
                    "</CreatePropertyCollector>")


def _create_filter_xml(pc: str, view: str) -> bytes:
    props = prop_set({"VirtualMachine": VM_LIGHT, "HostSystem": HOST_LIGHT, "ClusterComputeResource": CLUSTER})
    return envelope(f'<CreateFilter xmlns="urn:vim25">{this("PropertyCollector", pc)}<spec>{props}'
                    f"{view_objects(view)}</spec><partialUpdates>false</partialUpdates></CreateFilter>")


def _wait_xml(pc: str, version: str) -> bytes:
    v = f"<version>{escape(version)}</version>" if version else ""
    return envelope(f'<WaitForUpdatesEx xmlns="urn:vim25">{this("PropertyCollector", pc)}{v}<options>'
                    f"<maxWaitSeconds>0</maxWaitSeconds><maxObjectUpdates>{MAX_OBJECT_UPDATES}</maxObjectUpdates>"
                    "</options></WaitForUpdatesEx>")


class InventoryWatch:
    """The light rows of every VM, host and cluster, brought up to date by `poll()`."""

    def __init__(self, session: Any, view: str):
        self.session = session
        default_pc = session.property_collector
        self.pc = session.post(_create_collector_xml(default_pc)).findtext(NS + "returnval") or ""
        if not self.pc:
            raise CollectorError("CreatePropertyCollector answered without a collector")
        self.filter = session.post(_create_filter_xml(self.pc, view)).findtext(NS + "returnval") or ""
        session.owned.update((self.pc, self.filter))  # the session's own: gone, the session was lost
        self.version = ""
        self.rows: dict[Ref, dict[str, Any]] = {}
        self.updates = 0   # object updates applied, the first full read included

    def poll(self) -> bool:
        """Apply what changed since the last poll; whether anything did."""
        changed = False
        while True:
            try:
                el = self.session.post(_wait_xml(self.pc, self.version))
            except SoapFaultError as e:
                if e.name in LOST_FAULTS and not e.session_lost:
                    raise WatchLostError(f"inventory watch lost: {e}") from None
                raise
            rv = el.find(NS + "returnval")
            if rv is None:       # nothing changed
                return changed
            self.version = rv.findtext(NS + "version") or self.version
            for fs in rv.findall(NS + "filterSet"):
                for ou in fs.findall(NS + "objectSet"):
                    changed = True
                    self._apply(ou)
            if rv.findtext(NS + "truncated") != "true":
                return changed

    def _apply(self, ou: Any) -> None:
        obj = value(ou.find(NS + "obj"))
        if not isinstance(obj, Ref):
            raise CollectorError("an object update without a managed object reference")
        self.updates += 1
        if ou.findtext(NS + "kind") == "leave":
            self.rows.pop(obj, None)
            return
        props = self.rows.setdefault(obj, {})
        for ch in ou.findall(NS + "changeSet"):
            name = sys.intern(ch.findtext(NS + "name") or "")  # one string per path, not per row
            if ch.findtext(NS + "op") in ("remove", "indirectRemove"):
                props.pop(name, None)
                continue
            val = ch.find(NS + "val")
            props[name] = value(val) if val is not None else None

    def vm_rows(self) -> Rows:
        return [(o, p) for o, p in self.rows.items() if o.type == "VirtualMachine"]

    def inventory(self) -> Inventory:
        return Inventory(vms_from(self.vm_rows()),
                         hosts_from([(o, p) for o, p in self.rows.items() if o.type != "VirtualMachine"]))
