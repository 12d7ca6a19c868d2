"""The Local screen's data: one guest's CPU, memory, disks and interfaces, with their history."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field

from db2vtop.agent.core.cadence import interval_of, is_stale
from db2vtop.agent.core.model import Annotation, FieldValue
from db2vtop.agent.core.source import Row, Source
from db2vtop.tui.chart import buckets
from db2vtop.tui.data import Reader, Status, load_status


@dataclass
class Item:
    """One row of a table pane (a disk, an interface) with its history for a sparkline."""

    tags: dict[str, str]
    fields: dict[str, FieldValue]
    history: list[float | None] = field(default_factory=list)


@dataclass
class LocalView:
    guest: str | None
    now_ns: int
    since_ns: int
    markers: list[Annotation] = field(default_factory=list)
    runs: list[tuple[int, int]] = field(default_factory=list)
    age_s: float | None = None
    interval_s: float | None = None
    cpu: dict[str, FieldValue] = field(default_factory=dict)
    cpu_history: list[tuple[int, float]] = field(default_factory=list)
    cpus: list[tuple[str, float]] = field(default_factory=list)
    mem: dict[str, FieldValue] = field(default_factory=dict)
    mem_history: list[tuple[int, float]] = field(default_factory=list)
    disks: list[Item] = field(default_factory=list)
    nets: list[Item] = field(default_factory=list)
    collectors: list[Status] = field(default_factory=list)

    @property
    def window_s(self) -> float:
        return (self.now_ns - self.since_ns) / 1e9

    @property
    def stale(self) -> bool:
        return is_stale(self.age_s, self.interval_s)


def pick_guest(source: Source) -> str | None:
    """This machine's guest if the store has it (watch), else the first one (replay, attach)."""
    guests = sorted({s.tags.get("guest", "") for s in source.series("guest_cpu")} - {""})
    if not guests:
        return None
    me = socket.gethostname()
    return me if me in guests else guests[0]


def load_local(reader: Reader, guest: str | None, since: int, now_ns: int, spark_width: int = 20) -> LocalView:
    view = LocalView(guest=guest, now_ns=now_ns, since_ns=since, markers=reader.annotations(since, now_ns),
                     collectors=load_status(reader, now_ns), runs=reader.run_spans(since, now_ns))
    if guest is None:
        return view

    def mine(tags: dict[str, str]) -> bool:
        return tags.get("guest") == guest

    def history(row: Row, name: str) -> list[tuple[int, float]]:
        series = next((s for s in reader.find(row.measurement, mine) if s.tags == row.tags), None)
        return reader.points(series, name, since, now_ns) if series else []

    def spark_of(row: Row, *names: str) -> list[float | None]:
        lists = [buckets(history(row, n), since, now_ns, spark_width) for n in names]
        return [sum(v for v in vs if v is not None) if any(v is not None for v in vs) else None
                for vs in zip(*lists, strict=True)] if lists else []

    for row in reader.latest_at("guest_cpu", now_ns, mine):
        cpu = row.tags.get("cpu")
        if cpu == "total":
            view.cpu = row.fields
            view.cpu_history = history(row, "busy_pct")
            view.interval_s = interval_of(view.cpu_history)
            view.age_s = (now_ns - row.ts) / 1e9
        elif cpu is not None:
            view.cpus.append((cpu, float(row.fields.get("busy_pct", 0.0))))
    view.cpus.sort(key=lambda c: int(c[0]) if c[0].isdigit() else 0)
    for row in reader.latest_at("guest_mem", now_ns, mine):
        view.mem = row.fields
        view.mem_history = history(row, "used_pct")
    for row in reader.latest_at("guest_disk", now_ns, mine):
        view.disks.append(Item(row.tags, row.fields, spark_of(row, "util_pct")))
    for row in reader.latest_at("guest_net", now_ns, mine):
        view.nets.append(Item(row.tags, row.fields, spark_of(row, "rx_bytes_per_s", "tx_bytes_per_s")))
    view.disks.sort(key=lambda i: (i.tags.get("type") != "disk", i.tags.get("device", "")))
    view.nets.sort(key=lambda i: i.tags.get("interface", ""))
    return view
