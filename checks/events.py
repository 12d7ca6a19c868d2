"""vCenter's events as the verdict reads them: a stack's events, and the one an episode began after.

The vSphere collector stores each event of vCenter's log as an annotation (agent/core/events.py).
A stack's events are those of its VM, of a host while the VM ran there (a DRS migration that moved a
neighbour onto it, a host that lost a path) and of its datastores and LUNs on any host; an episode's
text names the newest of them at or before its onset, the newest naming its first culprit where one does
("since 02:13 UTC, 40s after DRS moved etl-7 from esx11 onto esx12", etl-7 taking the host's CPU, rather than
the alarm it set off after). Placement (checks/topology.py) reads the VM's own migrations from the same index.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from db2vtop.agent.core.events import VCenterEvent, vcenter_events
from db2vtop.agent.core.source import CachedSource, derive
from db2vtop.agent.core.units import format_duration

if TYPE_CHECKING:
    from db2vtop.checks.topology import StackEntities


@dataclass
class EventIndex:
    """A window's vCenter events, by the entities they name."""

    events: list[VCenterEvent]
    by_vm: dict[str, list[VCenterEvent]] = field(default_factory=dict)
    by_host: dict[str, list[VCenterEvent]] = field(default_factory=dict)
    by_datastore: dict[str, list[VCenterEvent]] = field(default_factory=dict)
    by_lun: dict[str, list[VCenterEvent]] = field(default_factory=dict)

    @classmethod
    def of(cls, events: list[VCenterEvent]) -> EventIndex:
        out = cls(events)
        for e in events:
            for index, key in ((out.by_vm, e.vm), (out.by_host, e.host), (out.by_host, e.source_host),
                               (out.by_datastore, e.datastore), (out.by_lun, e.lun)):
                if key:
                    index.setdefault(key.lower() if index is out.by_lun else key, []).append(e)
        return out


def event_index(view: CachedSource, since_ns: int, until_ns: int, reader: str) -> EventIndex:
    """The vCenter events of [since, until], indexed once per window read (every stack of a fleet asks for the
    same); `reader` keeps one index per kind of reader (the verdict's window, placement's wider one)."""
    annotations = view.annotations(since_ns, until_ns)
    return derive(view, "vcenter-events " + reader, (annotations,), lambda: EventIndex.of(vcenter_events(annotations)))


def migrations(view: CachedSource, vm: str, vcenter: str | None, since_ns: int, until_ns: int) -> list[VCenterEvent]:
    """The events that moved `vm` (of `vcenter`) to another host in the window, oldest first."""
    return [e for e in event_index(view, since_ns, until_ns, "placement").by_vm.get(vm, ())
            if e.moved_to and (not vcenter or e.vcenter == vcenter)]


def stack_events(ent: StackEntities) -> list[VCenterEvent]:
    """The events of a stack's window that touch it: its VM's; a host's while the VM ran on it (the stack's
    host itself for a host target); its datastores' and LUNs' on any host. Oldest first."""
    index = event_index(ent.source, ent.since, ent.until, "verdict")
    if not index.events:
        return []
    found: dict[int, VCenterEvent] = {}
    for e in index.by_vm.get(ent.vm, ()) if ent.vm else ():
        found[id(e)] = e
    for h in ent.hosts:
        for e in index.by_host.get(h, ()):
            if ent.host_at(e.ts) in (e.host, e.source_host):
                found[id(e)] = e
    for d in {d.datastore for d in ent.disks if d.datastore} | {ds for ds in ent.luns.values() if ds}:
        for e in index.by_datastore.get(d, ()):
            found[id(e)] = e
    for lun in ent.luns:
        for e in index.by_lun.get(lun, ()):
            found[id(e)] = e
    return sorted((e for e in found.values() if not ent.vcenter or e.vcenter == ent.vcenter), key=lambda e: e.ts)


def nearest_before(events: list[VCenterEvent], onset_ns: int, bucket_ns: int,
                   culprit: str | None = None) -> VCenterEvent | None:
    """The newest event at or before an onset (its first bucket included: the onset is where that bucket
    begins); the newest of those naming `culprit` (the co-tenant the episode blames first, a VM or a LUN) where
    any does: DRS moving the hog onto the host says what changed better than an alarm it set off after."""
    found = [e for e in events if e.ts < onset_ns + bucket_ns]
    named = [e for e in found if culprit and (e.vm == culprit or (e.lun or "").lower() == culprit.lower())]
    return max(named or found, key=lambda e: e.ts) if found else None


def after_text(summary: str, event_ns: int, onset_ns: int) -> str:
    """"40s after DRS moved etl-7 from esx11 onto esx12" (an event's summary and time), or "as …" for one in
    the onset's own bucket."""
    lead = onset_ns - event_ns
    if lead <= 0:
        return f"as {summary}"
    seconds = lead / 1e9
    return f"{format_duration(round(seconds / 60) * 60 if seconds >= 120 else round(seconds))} after {summary}"
