"""vCenter's events as the store, the sinks and every reader hold them: annotations of one kind.

The vSphere collector makes each event of vCenter's log that explains performance (a migration, an HA
restart, a reconfiguration, a snapshot, a host or storage problem, an alarm) an Annotation of kind
`EVENT`: its name the event's type (`DrsVmMigratedEvent`, or an EventEx's id such as
`esx.problem.scsi.device.io.latency.high`), its text a summary, its time vCenter's, and its tags the
entities it touches. So they reach the store and InfluxDB (`db2vtop_annotation`) as markers do, and the
readers (placement, the verdict, triage, the report, the TUI) read them back as `VCenterEvent`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from db2vtop.agent.core.model import Annotation, canonical_tags

EVENT = "vcenter_event"
#: what an event is about (its `category` tag; `kind` in the JSON): each event type belongs to one
KINDS = ("migration", "ha", "power", "reconfigure", "snapshot", "host", "storage", "alarm")
#: the entity tags an event may carry besides `vcenter` and `category`
ENTITY_TAGS = ("vm", "host", "source_host", "datastore", "lun")


def event_annotation(ts_ns: int, vcenter: str, kind: str, type_: str, summary: str,
                     entities: dict[str, str | None]) -> Annotation:
    """One event as it is stored and sent: the entities it names (empty ones left out) as tags."""
    tags = {"vcenter": vcenter, "category": kind}
    tags.update({k: v for k in ENTITY_TAGS if (v := entities.get(k))})
    return Annotation(EVENT, type_, tags, summary, ts_ns)


def identity(a: Annotation) -> tuple[int, str, str, str]:
    """What tells two events apart once stored (vCenter's own key is not kept: a tag per event would be a series
    per event in InfluxDB): their time to the microsecond, type, entities and summary. The same identity is
    one point in InfluxDB too."""
    return a.ts, a.name, canonical_tags(a.tags), a.text


@dataclass(frozen=True, slots=True)
class VCenterEvent:
    """An event as readers use it (from its annotation)."""

    ts: int
    kind: str
    type: str
    vcenter: str
    summary: str
    vm: str | None = None
    host: str | None = None  # the host it happened on (a migration's destination)
    source_host: str | None = None  # a migration's or an HA restart's host before it
    datastore: str | None = None
    lun: str | None = None

    @classmethod
    def of(cls, a: Annotation) -> VCenterEvent | None:
        """The event an annotation holds; None for any other annotation."""
        if a.event != EVENT:
            return None
        t = a.tags
        return cls(a.ts, t.get("category", ""), a.name, t.get("vcenter", ""), a.text, t.get("vm"), t.get("host"),
                   t.get("source_host"), t.get("datastore"), t.get("lun"))

    @property
    def moved_to(self) -> str | None:
        """The host a VM ran on from this event on, when it moved it (vMotion, DRS, an HA restart)."""
        if self.kind in ("migration", "ha") and self.vm and self.host and self.host != self.source_host:
            return self.host
        return None

    def to_json(self) -> dict[str, Any]:
        """Triage's and the report's `events` items (docs/checks.md)."""
        return {"time": datetime.fromtimestamp(self.ts / 1e9, UTC).isoformat(timespec="seconds"), "kind": self.kind,
                "type": self.type, "vcenter": self.vcenter, "vm": self.vm, "host": self.host,
                "source_host": self.source_host, "datastore": self.datastore, "summary": self.summary}


def vcenter_events(annotations: list[Annotation]) -> list[VCenterEvent]:
    """The vCenter events among annotations, in time order, each once (the store's copy and the one triage read
    from vCenter again are one)."""
    seen: set[tuple[int, str, str, str]] = set()
    out = []
    for a in annotations:
        if a.event != EVENT:
            continue
        key = identity(a)
        if key in seen:
            continue
        seen.add(key)
        e = VCenterEvent.of(a)
        if e is not None:
            out.append(e)
    out.sort(key=lambda e: e.ts)
    return out
