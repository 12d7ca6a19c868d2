"""What the screens show, read from the store in one pass (run in a worker thread).

Staleness is judged from the data itself: a series whose newest sample is older than
three of its own sampling intervals is stale, and is shown as such, never as current.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from itertools import pairwise
from statistics import median

from agent.model import Annotation, FieldValue, Finding
from agent.runtime import SELF_MEASUREMENT
from agent.store import Row, Store


@dataclass
class Status:
    collector: str
    status: str
    last_error: str
    duration_ms: float
    age_s: float
    errors: int
    skipped: int


@dataclass
class Item:
    """One row of a table pane (a disk, an interface) with its history for a sparkline."""

    tags: dict[str, str]
    fields: dict[str, FieldValue]
    history: list[float] = field(default_factory=list)


@dataclass
class LocalView:
    guest: str | None
    now_ns: int
    window_s: float
    markers: list[Annotation] = field(default_factory=list)
    age_s: float | None = None
    interval_s: float | None = None
    cpu: dict[str, FieldValue] = field(default_factory=dict)
    cpu_history: list[float] = field(default_factory=list)
    cpus: list[tuple[str, float]] = field(default_factory=list)
    mem: dict[str, FieldValue] = field(default_factory=dict)
    mem_history: list[float] = field(default_factory=list)
    disks: list[Item] = field(default_factory=list)
    nets: list[Item] = field(default_factory=list)
    collectors: list[Status] = field(default_factory=list)

    @property
    def stale(self) -> bool:
        if self.age_s is None:
            return False
        return self.age_s > max(3 * (self.interval_s or 5.0), 10.0)


def _numbers(points: list[tuple[int, FieldValue]]) -> list[float]:
    return [float(v) for _, v in points if isinstance(v, int | float)]


def _interval(points: list[tuple[int, FieldValue]]) -> float | None:
    tail = points[-6:]
    gaps = [(b[0] - a[0]) / 1e9 for a, b in pairwise(tail)]
    return median(gaps) if gaps else None


def pick_guest(store: Store) -> str | None:
    """This machine's guest if the store has it (watch), else the first one (replay, attach)."""
    guests = sorted({s.tags.get("guest", "") for s in store.series("guest_cpu")} - {""})
    if not guests:
        return None
    me = socket.gethostname()
    return me if me in guests else guests[0]


def load_status(store: Store, until_ns: int) -> list[Status]:
    """Each collector's last cycle at the cursor's time (its self-metric sample)."""
    out = []
    for row in store.latest(SELF_MEASUREMENT, until_ns=until_ns):
        f = row.fields
        out.append(Status(row.tags.get("collector", "?"), str(f.get("status", "?")), str(f.get("last_error", "")),
                          float(f.get("duration_ms", 0.0)), (until_ns - row.ts) / 1e9, int(f.get("errors", 0)),
                          int(f.get("skipped", 0))))
    return out


def load_local(store: Store, guest: str | None, since: int, now_ns: int) -> LocalView:
    view = LocalView(guest=guest, now_ns=now_ns, window_s=(now_ns - since) / 1e9,
                     markers=store.annotations(since, now_ns), collectors=load_status(store, now_ns))
    if guest is None:
        return view

    def mine(rows: list[Row]) -> list[Row]:
        return [r for r in rows if r.tags.get("guest") == guest]

    series = {(s.measurement, tuple(sorted(s.tags.items()))): s.id
              for m in ("guest_cpu", "guest_mem", "guest_disk", "guest_net") for s in store.series(m)
              if s.tags.get("guest") == guest}

    def history(row: Row, name: str) -> list[tuple[int, FieldValue]]:
        sid = series.get((row.measurement, tuple(sorted(row.tags.items()))))
        return store.window(sid, name, since, now_ns) if sid is not None else []

    for row in mine(store.latest("guest_cpu", until_ns=now_ns)):
        cpu = row.tags.get("cpu")
        if cpu == "total":
            view.cpu = row.fields
            points = history(row, "busy_pct")
            view.cpu_history = _numbers(points)
            view.interval_s = _interval(points)
            view.age_s = (now_ns - row.ts) / 1e9
        elif cpu is not None:
            view.cpus.append((cpu, float(row.fields.get("busy_pct", 0.0))))
    view.cpus.sort(key=lambda c: int(c[0]) if c[0].isdigit() else 0)
    for row in mine(store.latest("guest_mem", until_ns=now_ns)):
        view.mem = row.fields
        view.mem_history = _numbers(history(row, "used_pct"))
    for row in mine(store.latest("guest_disk", until_ns=now_ns)):
        view.disks.append(Item(row.tags, row.fields, _numbers(history(row, "util_pct"))))
    for row in mine(store.latest("guest_net", until_ns=now_ns)):
        rx = _numbers(history(row, "rx_bytes_per_s"))
        tx = _numbers(history(row, "tx_bytes_per_s"))
        view.nets.append(Item(row.tags, row.fields, [a + b for a, b in zip(rx, tx, strict=False)]))
    view.disks.sort(key=lambda i: (i.tags.get("type") != "disk", i.tags.get("device", "")))
    view.nets.sort(key=lambda i: i.tags.get("interface", ""))
    return view


@dataclass
class FindingsView:
    now_ns: int
    window_s: float
    open: list[Finding]
    resolved: list[Finding]
    collectors: list[Status]
    markers: list[Annotation]


SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}


def load_findings(store: Store, since: int, now_ns: int) -> FindingsView:
    """Findings open at the cursor's time, and those resolved within the window."""
    open_, resolved = [], []
    for f in store.findings(open_only=False):
        if f.first_seen > now_ns:
            continue
        if f.resolved_at is None or f.resolved_at > now_ns:
            open_.append(f)
        elif f.resolved_at >= since:
            resolved.append(f)
    def order(f: Finding) -> tuple:
        return SEVERITY_RANK.get(f.severity, 9), f.rule, sorted(f.subject.items())
    return FindingsView(now_ns, (now_ns - since) / 1e9, sorted(open_, key=order), sorted(resolved, key=order),
                        load_status(store, now_ns), store.annotations(since, now_ns))
