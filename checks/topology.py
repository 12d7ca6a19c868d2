"""Where a stack's VM was, moment by moment.

vMotion moves a VM between hosts while its name stays, so the host layer of a stack is a
function of time: every reader of it (the verdict, triage, the Stack screen) asks here for
the host at a moment or per bucket, never for every host the VM was ever seen on. The
placement comes from the VM's own samples, which vCenter and esxtop tag with the host that
ran it at that moment.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Protocol

from db2vtop.agent.core.model import FieldValue
from db2vtop.agent.core.store import Series

#: a VM's measurements tagged with its host, and fields every such sample carries
VM_PLACEMENT = {"vsphere_vm": ("cpu_ready_pct", "cpu_usage_pct", "mem_balloon_bytes"),
                "esxtop_vm": ("used_pct", "ready_pct")}
#: how far before a window to look for where the VM was when the window opened
LOOKBEHIND_NS = 3600 * 10**9


class Source(Protocol):
    """What placement reads: the store, the TUI's reader, or rows held in memory (triage)."""

    def series(self, measurement: str | None = None) -> list[Series]: ...

    def window(self, series_id: int, field_name: str, since_ns: int,
               until_ns: int | None = None) -> list[tuple[int, FieldValue]]: ...


@dataclass
class Placement:
    """The VM's host over time: each sample's timestamp with the host it was tagged with."""

    vm: str | None
    times: list[int] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)

    def host_at(self, ts: int) -> str | None:
        """The host of the newest sample at or before `ts`; before the first sample, the first host."""
        if not self.times:
            return None
        i = bisect_right(self.times, ts)
        return self.hosts[i - 1] if i else self.hosts[0]

    def hosts_between(self, since_ns: int, until_ns: int) -> set[str]:
        """Every host the VM ran on within the window (and the one it was on when it opened)."""
        if not self.times:
            return set()
        lo, hi = bisect_right(self.times, since_ns), bisect_right(self.times, until_ns)
        return {self.hosts[max(lo - 1, 0)], *self.hosts[lo:hi]}


def placement(source: Source, vm: str | None, since_ns: int, until_ns: int,
              vcenter: str | None = None) -> Placement:
    """Where `vm` (of `vcenter`, when names repeat across vCenters) was from a little before
    `since_ns` to `until_ns`."""
    points: dict[int, str] = {}
    if vm:
        for measurement, fields in VM_PLACEMENT.items():
            for s in source.series(measurement):
                if s.tags.get("vm") != vm or not s.tags.get("host") or \
                        (vcenter and s.tags.get("vcenter", vcenter) != vcenter):
                    continue
                for name in fields:
                    window = source.window(s.id, name, since_ns - LOOKBEHIND_NS, until_ns)
                    if window:
                        for ts, _ in window:
                            points.setdefault(ts, s.tags["host"])
                        break
    times = sorted(points)
    return Placement(vm, times, [points[t] for t in times])
