"""vCenter's (or an ESXi host's) event log: the events that explain performance, read in bounded pages.

An event history collector (CreateCollectorForEvents with an EventFilterSpec of the event types below
and a begin time) is read forward with ReadNextEvents, PAGE events a call; it stays open on the session
and vCenter appends new events to it, so a steady cycle asks only for what came since. Each event
becomes an annotation (agent/core/events.py) with the entities it names and a summary of what changed
(a reconfiguration's vCPUs, memory, reservations and disks from its configSpec). Where the log is
resumed after a restart comes from the store (`EventLog.resume`): the newest event stored, and those of
the RESUME_MARGIN_S before it (an ESXi host's event can reach vCenter after a newer one), so a restart
reads no event twice and misses none vCenter still keeps; a new session (vCenter restarted, session
lost) goes on from the same position.

Event shapes follow VMware's vSphere Web Services API reference for each type (Event and its
VmEventArgument/HostEventArgument/DatastoreEventArgument, VmMigratedEvent.sourceHost,
VmReconfiguredEvent.configSpec, EventEx.eventTypeId and its arguments, TaskEvent.info.descriptionId,
AlarmStatusChangedEvent.from/to); EventEx argument keys are ESXi's message templates' ({1}, {2}, ...).
"""

from __future__ import annotations

import logging
import re
from collections import deque
from datetime import UTC, datetime
from typing import Any
from xml.etree import ElementTree as ET
from xml.sax.saxutils import escape

from db2vtop.agent.core.events import EVENT, event_annotation, identity
from db2vtop.agent.core.model import Annotation
from db2vtop.agent.core.text import printable
from db2vtop.collectors.base import CollectorError
from db2vtop.collectors.vsphere.soapxml import NS, Node, as_list, envelope, this, to_int

log = logging.getLogger(__name__)

#: events a ReadNextEvents call asks for (vCenter's range is 1..1000; a reconfiguration with its device
#: changes is a few KB, so a page stays well under the answer's byte bound)
PAGE = 500
#: pages an agent's cycle reads at most: a backlog (a first start, a restart after a long stop) is read over
#: the next cycles, each page handed on as it comes
CYCLE_PAGES = 20
#: pages triage's look back reads at most (100,000 events)
LOOKBACK_PAGES = 200
#: the longest summary kept (vCenter's own message, where no summary of ours says it, can be any length)
SUMMARY_MAX = 500
#: how far before the newest event read a new collector begins, so an event that reached vCenter late is
#: still read; those already read in it are told apart by their identity
RESUME_MARGIN_S = 300.0

#: standard events by type, EventEx and ExtendedEvent by eventTypeId -> kind
TYPES: dict[str, str] = {
    **dict.fromkeys(("VmMigratedEvent", "DrsVmMigratedEvent", "VmRelocatedEvent",
                     "com.vmware.vc.sdrs.StorageDrsStorageMigrationEvent"), "migration"),
    **dict.fromkeys(("VmRestartedOnAlternateHostEvent", "com.vmware.vc.ha.VmRestartedByHAEvent",
                     "DasHostFailedEvent", "com.vmware.vc.HA.DasHostFailedEvent", "DasHostIsolatedEvent",
                     "com.vmware.vc.HA.DasHostIsolatedEvent"), "ha"),
    **dict.fromkeys(("VmPoweredOnEvent", "DrsVmPoweredOnEvent", "VmPoweredOffEvent", "VmResettingEvent",
                     "VmSuspendedEvent"), "power"),
    "VmReconfiguredEvent": "reconfigure",
    **dict.fromkeys(("TaskEvent", "com.vmware.vc.VmDiskConsolidatedEvent", "com.vmware.vc.VmDiskConsolidationNeeded",
                     "com.vmware.vc.VmDiskFailedToConsolidateEvent", "com.vmware.vc.vm.VmStateRevertedToSnapshot"),
                    "snapshot"),
    **dict.fromkeys(("EnteringMaintenanceModeEvent", "EnteredMaintenanceModeEvent", "ExitMaintenanceModeEvent",
                     "HostConnectionLostEvent", "HostDisconnectedEvent", "HostShutdownEvent", "HostConnectedEvent"),
                    "host"),
    **dict.fromkeys(("esx.problem.scsi.device.io.latency.high", "esx.clear.scsi.device.io.latency.improved",
                     "esx.problem.storage.redundancy.lost", "esx.problem.storage.redundancy.degraded",
                     "esx.clear.storage.redundancy.restored", "esx.problem.vmfs.heartbeat.timedout",
                     "esx.problem.vmfs.heartbeat.unrecoverable", "esx.problem.vmfs.heartbeat.recovered",
                     "esx.problem.storage.apd.start", "esx.problem.storage.apd.timeout", "esx.clear.storage.apd.exit",
                     "esx.problem.storage.connectivity.lost", "esx.problem.scsi.device.state.permanentloss",
                     "esx.problem.vmfs.nfs.server.disconnect"), "storage"),
    "AlarmStatusChangedEvent": "alarm",
}
#: the tasks of a TaskEvent that are snapshots (its info.descriptionId) and how they are said
SNAPSHOT_TASKS = {
    "VirtualMachine.createSnapshot": "a snapshot of {vm} started",
    "vm.Snapshot.remove": "removing a snapshot of {vm} started",
    "VirtualMachine.removeAllSnapshots": "removing all snapshots of {vm} started",
    "VirtualMachine.consolidateDisks": "consolidating the disks of {vm} started",
    "vm.Snapshot.revert": "reverting {vm} to a snapshot started",
    "VirtualMachine.revertToCurrentSnapshot": "reverting {vm} to its current snapshot started",
}
_TIME = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:?\d\d)?$")


def parse_time(text: str) -> int:
    """An xsd:dateTime (vCenter's microseconds, or nanoseconds) as ns since the epoch, UTC unless it says."""
    m = _TIME.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"not a time: {text[:40]!r}")
    zone = m.group(3) or "Z"
    base = datetime.fromisoformat(m.group(1) + ("+00:00" if zone == "Z" else zone))
    return int(base.timestamp()) * 10**9 + int((m.group(2) or "0").ljust(9, "0"))


def iso_time(ts_ns: int) -> str:
    return datetime.fromtimestamp(ts_ns // 10**9, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{ts_ns % 10**9 // 1000:06d}Z"


# --- requests --------------------------------------------------------------------------------


def create_xml(event_manager: str, begin_ns: int) -> bytes:
    """CreateCollectorForEvents: the event types above, from `begin_ns` on (EventFilterSpec's fields in the
    WSDL's order: time before eventTypeId)."""
    types = "".join(f"<eventTypeId>{escape(t)}</eventTypeId>" for t in TYPES)
    return envelope(f'<CreateCollectorForEvents xmlns="urn:vim25">{this("EventManager", event_manager)}<filter>'
                    f"<time><beginTime>{iso_time(begin_ns)}</beginTime></time>{types}</filter>"
                    "</CreateCollectorForEvents>")


def read_xml(collector: str, count: int) -> bytes:
    return envelope(f'<ReadNextEvents xmlns="urn:vim25">{this("EventHistoryCollector", collector)}'
                    f"<maxCount>{count}</maxCount></ReadNextEvents>")


def destroy_xml(collector: str) -> bytes:
    return envelope(f'<DestroyCollector xmlns="urn:vim25">{this("EventHistoryCollector", collector)}'
                    "</DestroyCollector>")


def create_collector(session: Any, begin_ns: int) -> str:
    """A new event history collector on the session, reading forward from `begin_ns`."""
    if not session.event_manager:
        raise CollectorError("the server's ServiceContent names no EventManager")
    moid = session.post(create_xml(session.event_manager, begin_ns)).findtext(NS + "returnval") or ""
    if not moid:
        raise CollectorError("CreateCollectorForEvents answered without a collector")
    return moid


def read_page(session: Any, collector: str, lun_ds: dict[str, dict[str, str]], ds_names: dict[str, str],
              vcenter: str, count: int = PAGE) -> tuple[list[Annotation], int]:
    """The next `count` events at most (each made an annotation as it is parsed: the page is never held as a
    tree) and how many vCenter answered (fewer than asked: the end of the log, for now)."""
    out: list[Annotation] = []
    answered = [0]

    def take(el: ET.Element) -> None:
        answered[0] += 1
        a = to_annotation(Node(el), vcenter, lun_ds, ds_names)
        if a is not None:
            out.append(a)

    session.post_each(read_xml(collector, count), NS + "returnval", take)
    return out, answered[0]


def destroy_collector(session: Any, collector: str) -> None:
    session.post(destroy_xml(collector))


# --- events as annotations -------------------------------------------------------------------


def _name(ev: Node, key: str) -> str | None:
    """The name of an entity argument (vm, host, ds, sourceHost, ...) of an event."""
    arg = ev.get(key)
    name = arg.get("name") if isinstance(arg, Node) else None
    return str(name) if name else None


def _args(ev: Node) -> dict[str, str]:
    """An EventEx's arguments by key ("1", "2", ...)."""
    out = {}
    for kv in as_list(ev.get("arguments")):
        if isinstance(kv, Node) and kv.get("key") is not None:
            v = kv.get("value")
            out[str(kv.get("key"))] = "" if v is None or isinstance(v, Node) else str(v)
    return out


def _ms(us: str) -> str:
    n = to_int(us)
    return f"{n / 1000:.1f} ms" if n is not None else f"{us} µs"


def to_annotation(ev: Node, vcenter: str, lun_ds: dict[str, dict[str, str]],
                  ds_names: dict[str, str]) -> Annotation | None:
    """The annotation of one event, or None for one that says nothing about performance (a task that is not a
    snapshot) or that has no time. `lun_ds`: each host's (by moid) LUNs and the datastore on each."""
    type_ = ev.type.rpartition(":")[2]  # (a prefixed xsi:type names the same type)
    tid = str(ev.get("eventTypeId") or type_) if type_ in ("EventEx", "ExtendedEvent") else type_
    kind = TYPES.get(tid)
    created = ev.get("createdTime")
    if kind is None or not isinstance(created, str):
        return None
    try:
        ts = parse_time(created)
    except ValueError:
        log.warning("vcenter %s: event %s with an unreadable time %r left out", vcenter, tid, created[:40])
        return None
    who: dict[str, str | None] = {"vm": _name(ev, "vm"), "host": _name(ev, "host"), "datastore": _name(ev, "ds")}
    if tid == "TaskEvent":
        info = ev.get("info")
        task = str(info.get("descriptionId") or "") if isinstance(info, Node) else ""
        if task not in SNAPSHOT_TASKS:
            return None
        who["vm"] = who["vm"] or (str(info.get("entityName")) if isinstance(info, Node) and info.get("entityName")
                                  else None)
        return event_annotation(ts, vcenter, kind, tid, _said(SNAPSHOT_TASKS[task].format(vm=who["vm"] or "a VM"), ev),
                                who)
    host_arg = ev.get("host")
    host_ref = host_arg.get("host") if isinstance(host_arg, Node) else None
    text = _summary(tid, ev, who, lun_ds.get(getattr(host_ref, "value", ""), {}), ds_names)
    if not text:
        text = " ".join(str(ev.get("fullFormattedMessage") or tid).split())
    return event_annotation(ts, vcenter, kind, tid, _said(text, ev), who)


def _said(text: str, ev: Node) -> str:
    """A summary as it is kept: who did it (the event's user: none for vCenter's own, DRS's, HA's, ESXi's), its
    control characters escaped (vCenter's message and the names in it are anyone's text: a VM's name, an
    alarm's, a message posted through the API; the TUI shows it as it is), at most SUMMARY_MAX characters."""
    user = ev.get("userName")
    if isinstance(user, str) and user.strip():
        text += f" (by {' '.join(user.split())})"
    text = printable(text)
    return text if len(text) <= SUMMARY_MAX else text[:SUMMARY_MAX - 1] + "…"


def _summary(tid: str, ev: Node, who: dict[str, str | None], lun_ds: dict[str, str],
             ds_names: dict[str, str]) -> str:
    """A short summary in the event's own terms, filling `who` with the entities it names beyond the common
    ones; "" to fall back on vCenter's own message."""
    vm, host = who["vm"] or "a VM", who["host"] or "a host"
    if tid in ("VmMigratedEvent", "DrsVmMigratedEvent", "VmRelocatedEvent", "VmRestartedOnAlternateHostEvent"):
        src = who["source_host"] = _name(ev, "sourceHost")
        src_ds = _name(ev, "sourceDatastore")
        if tid == "VmRestartedOnAlternateHostEvent":
            return f"HA restarted {vm} on {host}" + (f" (it ran on {src})" if src else "")
        by = {"DrsVmMigratedEvent": "DRS", "VmMigratedEvent": "vMotion"}.get(tid, "relocation")
        moves = []
        if src and src != who["host"]:
            moves.append(f"from {src} onto {host}")
        if src_ds and who["datastore"] and src_ds != who["datastore"]:
            moves.append(f"from datastore {src_ds} to {who['datastore']}")
        if not moves:
            return f"{by} moved {vm}" + (f" on {host}" if who["host"] else "")
        if by == "relocation" and not (src and src != who["host"]):
            by = "Storage vMotion"
        return f"{by} moved {vm} " + " and ".join(moves)
    if tid in ("DasHostFailedEvent", "DasHostIsolatedEvent"):
        failed = who["host"] = _name(ev, "failedHost" if tid == "DasHostFailedEvent" else "isolatedHost") or who["host"]
        return f"HA: host {failed or 'a host'} " + ("failed" if tid == "DasHostFailedEvent" else "is isolated")
    if tid == "com.vmware.vc.ha.VmRestartedByHAEvent":
        return f"HA restarted {vm}" + (f" on {host}" if who["host"] else "")
    if tid in _SAID:
        return _SAID[tid].format(vm=vm, host=host)
    if tid == "VmReconfiguredEvent":
        spec = ev.get("configSpec")
        changes = reconfigured(spec) if isinstance(spec, Node) else []
        return f"{vm} reconfigured: " + ", ".join(changes) if changes else ""
    if tid == "AlarmStatusChangedEvent":
        return _alarm(ev, who)
    if tid.startswith(("esx.problem.", "esx.clear.")):
        return _storage(tid, _args(ev), who, host, lun_ds, ds_names)
    return ""


_SAID = {
    "VmPoweredOnEvent": "{vm} powered on on {host}", "DrsVmPoweredOnEvent": "DRS powered on {vm} on {host}",
    "VmPoweredOffEvent": "{vm} powered off", "VmResettingEvent": "{vm} reset", "VmSuspendedEvent": "{vm} suspended",
    "com.vmware.vc.VmDiskConsolidatedEvent": "the disks of {vm} were consolidated",
    "com.vmware.vc.VmDiskConsolidationNeeded": "the disks of {vm} need consolidation (snapshot files left behind)",
    "com.vmware.vc.VmDiskFailedToConsolidateEvent": "consolidating the disks of {vm} failed",
    "com.vmware.vc.vm.VmStateRevertedToSnapshot": "{vm} was reverted to a snapshot",
    "EnteringMaintenanceModeEvent": "{host} is entering maintenance mode",
    "EnteredMaintenanceModeEvent": "{host} entered maintenance mode",
    "ExitMaintenanceModeEvent": "{host} exited maintenance mode",
    "HostConnectionLostEvent": "vCenter lost its connection to {host}",
    "HostDisconnectedEvent": "{host} was disconnected", "HostShutdownEvent": "{host} was shut down",
    "HostConnectedEvent": "{host} connected",
    "com.vmware.vc.HA.DasHostFailedEvent": "HA detected a failure of {host}",
    "com.vmware.vc.HA.DasHostIsolatedEvent": "HA detected that {host} is isolated",
}


def _alarm(ev: Node, who: dict[str, str | None]) -> str:
    alarm = _name(ev, "alarm") or "an alarm"
    entity = ev.get("entity")
    name = str(entity.get("name") or "") if isinstance(entity, Node) else ""
    ref = entity.get("entity") if isinstance(entity, Node) else None
    kind = getattr(ref, "type", "")
    if name and kind == "VirtualMachine":
        who["vm"] = name
    elif name and kind == "HostSystem":
        who["host"] = name
    elif name and kind == "Datastore":
        who["datastore"] = name
    return f"alarm {alarm!r} on {name or 'an entity'}: {ev.get('from') or '?'} → {ev.get('to') or '?'}"


def _storage(tid: str, args: dict[str, str], who: dict[str, str | None], host: str, lun_ds: dict[str, str],
             ds_names: dict[str, str]) -> str:
    """ESXi's storage events (EventEx), by their message templates' arguments."""
    dev = args.get("1", "")
    if tid.startswith("esx.problem.vmfs.heartbeat."):  # {1} the VMFS volume's UUID, {2} its name
        name = args.get("2") or ds_names.get(dev) or dev
        who["datastore"] = who["datastore"] or name
        said = {"esx.problem.vmfs.heartbeat.timedout": "lost access to datastore {} (VMFS heartbeat timed out)",
                "esx.problem.vmfs.heartbeat.unrecoverable": "lost access to datastore {} for good",
                "esx.problem.vmfs.heartbeat.recovered": "access to datastore {} restored"}.get(tid, "")
        return f"{host}: " + said.format(name) if said else ""
    if tid == "esx.problem.vmfs.nfs.server.disconnect":  # {1} the server, {2} its export, {4} the datastore
        who["datastore"] = who["datastore"] or args.get("4") or None
        return f"{host}: lost its connection to NFS server {dev} ({args.get('2', '?')})"
    if dev:  # {1} the device (naa.…)
        who["lun"] = dev
        who["datastore"] = who["datastore"] or lun_ds.get(dev)
    said = _DEVICE_SAID.get(tid)
    if said is None:
        return ""
    two, three = args.get("2", "?"), args.get("3", "?")
    return said.format(host=host, dev=dev, two=two, ms2=_ms(two), ms3=_ms(three))


#: ESXi's device events (EventEx, {1} the device), what each says: `two` its {2} (a path), `ms2`/`ms3` its {2}/{3}
#: (latencies in µs) in ms
_DEVICE_SAID = {
    "esx.problem.scsi.device.io.latency.high": "{host}: device {dev} I/O latency rose from {ms2} to {ms3}",
    "esx.clear.scsi.device.io.latency.improved": "{host}: device {dev} I/O latency improved from {ms2} to {ms3}",
    "esx.problem.storage.redundancy.lost": "{host}: lost path redundancy to device {dev} (path {two} down)",
    "esx.problem.storage.redundancy.degraded": "{host}: path redundancy to device {dev} degraded (path {two} down)",
    "esx.clear.storage.redundancy.restored": "{host}: path redundancy to device {dev} restored",
    "esx.problem.storage.apd.start": "{host}: all paths down to device {dev}",
    "esx.problem.storage.apd.timeout": "{host}: all paths down to device {dev} timed out, I/O to it fails fast",
    "esx.clear.storage.apd.exit": "{host}: device {dev} left the all paths down state",
    "esx.problem.storage.connectivity.lost": "{host}: lost connectivity to device {dev}",
    "esx.problem.scsi.device.state.permanentloss": "{host}: device {dev} permanently lost",
}


def reconfigured(spec: Node) -> list[str]:
    """What a VirtualMachineConfigSpec changes that bears on performance: vCPUs, memory, reservations and
    limits, and virtual disks added, resized or removed."""
    out = []
    if (n := to_int(spec.get("numCPUs"))) is not None:
        out.append(f"{n} vCPUs")
    if (mb := to_int(spec.get("memoryMB"))) is not None:
        out.append(f"memory {mb} MB")
    for key, what, unit in (("cpuAllocation", "CPU", "MHz"), ("memoryAllocation", "memory", "MB")):
        alloc = spec.get(key)
        if not isinstance(alloc, Node):
            continue
        if (r := to_int(alloc.get("reservation"))) is not None:
            out.append(f"{what} reservation {r} {unit}")
        if (lim := to_int(alloc.get("limit"))) is not None:
            out.append(f"{what} limit " + ("none" if lim < 0 else f"{lim} {unit}"))
    locked = spec.get("memoryReservationLockedToMax")
    if locked in ("true", True):
        out.append("all memory reserved")
    elif locked in ("false", False):
        out.append("memory no longer all reserved")
    for change in as_list(spec.get("deviceChange")):
        if not isinstance(change, Node):
            continue
        dev = change.get("device")
        if not isinstance(dev, Node) or dev.type != "VirtualDisk":
            continue
        info = dev.get("deviceInfo")
        label = str(info.get("label")) if isinstance(info, Node) and info.get("label") else "a disk"
        size = to_int(dev.get("capacityInBytes"))
        if size is None and (kb := to_int(dev.get("capacityInKB"))) is not None:
            size = kb * 1024
        gb = f"{size / 2**30:g} GB" if size is not None else ""
        op = change.get("operation")
        if op == "add":
            out.append(f"disk added{f' ({gb})' if gb else ''}")
        elif op == "remove":
            out.append(f"{label} removed")
        elif gb:
            out.append(f"{label} resized to {gb}")
    return out


# --- the position in the log -----------------------------------------------------------------


class EventLog:
    """Where this vCenter's event log has been read to: the newest event's time and the identities of those
    within RESUME_MARGIN_S of it (what a collector begun at the margin would bring again)."""

    def __init__(self, vcenter: str):
        self.vcenter = vcenter
        self.position: int | None = None
        self._seen: set[tuple[int, str, str, str]] = set()
        self._order: deque[tuple[int, tuple[int, str, str, str]]] = deque()  # (time, identity) as they came
        self.events = 0  # events handed on by this process
        self.pages = 0   # ReadNextEvents calls

    def resume(self, stored: list[Annotation]) -> None:
        """The events the store holds (of the last max_clock_skew): the log goes on after the newest."""
        for a in stored:
            if a.event == EVENT and a.tags.get("vcenter") == self.vcenter:
                self._saw(a, identity(a))

    def begin(self, now_ns: int, earliest_ns: int, first_s: float) -> int:
        """Where a new collector begins: the margin before the position, else `first_s` before now (a first
        start, nothing stored); never before `earliest_ns` (what the store would refuse as too old)."""
        start = now_ns - int(first_s * 1e9) if self.position is None \
            else self.position - int(RESUME_MARGIN_S * 1e9)
        if start < earliest_ns:
            log.warning("vcenter %s: events before %s are not read (older than the store's max_clock_skew)",
                        self.vcenter, iso_time(earliest_ns))
            start = earliest_ns
        return start

    def fresh(self, page: list[Annotation]) -> list[Annotation]:
        """The page's events not read before; the position moves on."""
        out = []
        for a in page:
            key = identity(a)
            if key in self._seen:
                continue
            self._saw(a, key)
            out.append(a)
        self.events += len(out)
        self.pages += 1
        return out

    def _saw(self, a: Annotation, key: tuple[int, str, str, str]) -> None:
        self._seen.add(key)
        self._order.append((a.ts, key))
        if self.position is None or a.ts > self.position:
            self.position = a.ts
            horizon = a.ts - int(RESUME_MARGIN_S * 1e9)
            while self._order[0][0] < horizon:  # the log comes in time order: the oldest are first
                self._seen.discard(self._order.popleft()[1])
