"""The five layers of a stack at the cursor: key figures and what their charts plot.

Layers follow the verdict's chain, top to bottom: DB2 → guest → VM → host → array. What each
shows is the figure table's (checks/figures.py): its `screen` figures in its row, coloured by
their levels, and its charted figures, a load or contention trend on the left and a latency trend
on the right; the series are the stack's entities (checks/topology.py). Only the titles, and what
is said when a layer is missing, are written here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from db2vtop.agent.core.source import Row, Series
from db2vtop.agent.core.text import plural
from db2vtop.checks.figures import COMBINE, LATENCY_FLOOR_MS, LAYERS, Figure, of_layer
from db2vtop.checks.scales import Level, Levels
from db2vtop.checks.topology import StackEntities
from db2vtop.tui.chart import level_style
from db2vtop.tui.data import Reader, Trend
from db2vtop.tui.format import NONE, num, rate, size, value
from db2vtop.tui.table import Cell, Run

MEM_STATE = {0: "high", 1: "soft", 2: "hard", 3: "low"}
__all__ = ["LATENCY_FLOOR_MS", "LAYERS", "MEM_STATE", "Layer", "fig", "load_layers", "max_of", "sum_of"]


@dataclass
class Layer:
    """A layer before drawing: its figures and what its two charts plot."""

    key: str
    title: str
    figures: list[Run]
    a: Trend | None = None
    a_label: str = ""
    b: Trend | None = None
    b_label: str = ""
    newest: list[tuple[Series | None, Row]] = field(default_factory=list)
    present: bool = True


def fig(label: str, text: str, level: Level | None = None, v: float | None = None) -> list[Run]:
    st = level_style(level, v, "bold") if level is not None else "bold"
    return [(f"{label} ", "dim"), (text, st), ("  ", None)]


def max_of(rows: list[Row], *names: str) -> tuple[float | None, Row | None]:
    best, at = None, None
    for r in rows:
        for n in names:
            v = value(r.fields, n)
            if v is not None and (best is None or v > best):
                best, at = v, r
    return best, at


def sum_of(rows: list[Row], *names: str) -> float | None:
    vals = [v for r in rows for n in names if (v := value(r.fields, n)) is not None]
    return sum(vals) if vals else None


def text_of(f: Figure, v: float | None) -> str:
    """A figure's value as its layer row shows it: by its unit, with its decimals."""
    if f.field == "mem_state":
        return MEM_STATE.get(int(v), NONE) if v is not None else NONE
    if f.unit in ("bytes", "bytes/s"):
        return number_of(f, v)
    return f"{num(v, f.digits)}{sign_of(f)}"


def sign_of(f: Figure) -> str:
    """What follows a figure's number, or its name atop a column: its unit's sign (%, ms) unless it has its own."""
    return f.suffix if f.suffix is not None else {"%": "%", "ms": " ms"}.get(f.unit, "")


def number_of(f: Figure, v: float | None) -> str:
    """A figure's value in a table's cell, under a header that has its sign: by its unit, with its decimals."""
    if f.unit == "bytes":
        return size(v)
    if f.unit == "bytes/s":
        return rate(v)
    return num(v, f.digits)


def header_of(f: Figure, name: str | None = None) -> str:
    """A figure's column header: `name` (else its panel or layer-row name) and its sign: rdy%, I/O ms, %RDY."""
    return f"{name or f.column or f.screen or f.field}{sign_of(f)}"


def cell_of(f: Figure, v: float | None, levels: Levels) -> Cell:
    """A figure's cell: its number, coloured by its scale's level."""
    return (number_of(f, v), level_style(levels.of(f.level), v, ""))


class _Rows:
    """The newest rows of the stack's series at the cursor, each measurement and entity read once. A VM's
    series are tagged with the host that ran it: only the current host's count."""

    def __init__(self, rd: Reader, r: StackEntities, until: int):
        self.rd, self.r, self.until = rd, r, until
        self.cache: dict[tuple, tuple[list[Series], list[Row]]] = {}

    def of(self, f: Figure) -> tuple[list[Series], list[Row]]:
        key = (f.entity, f.measurement, f.where)
        hit = self.cache.get(key)
        if hit is None:
            series = self.r.select(f.entity, f.measurement, f.where)
            host = self.r.host
            rows = [x for x in self.rd.latest_of(series, 0, self.until) if x.tags.get("host", host) == host]
            hit = self.cache[key] = (series, rows)
        return hit


def _pick(figs: list[Figure], rows: _Rows) -> tuple[list[Figure], float | None, Row | None]:
    """The figures of one screen name from the first measurement that has a value, and that value:
    its fields combined over the stack's series by the figure's `combine` (and the worst row)."""
    by_measurement: dict[str, list[Figure]] = defaultdict(list)
    for f in figs:
        by_measurement[f.measurement].append(f)
    for same in by_measurement.values():
        found = [(v, x) for f in same for x in rows.of(f)[1] if (v := value(x.fields, f.field)) is not None]
        if found:
            worst = max(found, key=lambda p: p[0])[1]
            return same, COMBINE[same[0].combine]([v for v, _ in found]), worst
    return figs[:1], None, None


def _figures(layer: str, rows: _Rows, levels: Levels, alternate: bool) -> list[Run]:
    named: dict[str, list[Figure]] = defaultdict(list)
    for f in of_layer(layer):
        if f.screen is not None and f.alternate == alternate:
            named[f.screen].append(f)
    out: list[Run] = []
    for name, figs in named.items():
        chosen, v, worst = _pick(figs, rows)
        f = chosen[0]
        text = text_of(f, v)
        if f.detail is not None and worst is not None:
            text += f" {worst.tags.get(f.detail)}"
        out += fig(name, text, levels.of(f.level), v)
    return out


def _chart(layer: str, rows: _Rows, levels: Levels, latency: bool, alternate: bool) -> tuple[Trend | None, str]:
    """The layer's chart on one side: its charted figures of the first measurement the stack has series of."""
    figs = [f for f in of_layer(layer) if f.chart is not None and f.latency == latency]
    mine = [f for f in figs if f.alternate == alternate] or figs
    for f in mine:
        series, _ = rows.of(f)
        if series:
            same = [g for g in mine if g.measurement == f.measurement and g.entity == f.entity and g.where == f.where]
            assert f.chart is not None
            trend = Trend(((tuple(series), tuple(g.field for g in same)),), how="sum" if f.combine == "sum" else "max",
                          floor=f.chart.floor, top=f.chart.top, level=levels.of(f.level))
            return trend, f.chart.label
    return None, ""


def _newest(rd: Reader, rows: _Rows) -> list[tuple[Series | None, Row]]:
    """A row of each measurement read, with its series: how old the layer's data is."""
    out = []
    for series, found in rows.cache.values():
        if found:
            by_tags = {tuple(sorted(s.tags.items())): s for s in series}
            out.append((by_tags.get(tuple(sorted(found[0].tags.items()))), found[0]))
    return out


def _layer(rd: Reader, rows: _Rows, levels: Levels, key: str, title: str, alternate: bool = False) -> Layer:
    figures = _figures(key, rows, levels, alternate)
    a, a_label = _chart(key, rows, levels, False, alternate)
    b, b_label = _chart(key, rows, levels, True, alternate)
    return Layer(key, title, figures, a, a_label, b, b_label, _newest(rd, rows))


def _missing(key: str, why: str, title: str | None = None) -> Layer:
    return Layer(key, title or {"db2": "DB2", "guest": "Guest", "vm": "VM", "host": "Host", "storage": "Storage"}[key],
                 [(why, "dim")], present=False)


def db2_layer(rd: Reader, r: StackEntities, until: int, levels: Levels) -> Layer:
    if not r.db2:
        return _missing("db2", "no DB2 in this stack")
    rows = _Rows(rd, r, until)
    found = [x for m in ("db2_database", "db2_log") for x in rows.of(_first("db2", m))[1]]
    database = next((x.tags.get("database") for x in found if x.tags.get("database")), "")
    return _layer(rd, rows, levels, "db2", f"DB2 {r.db2}/{database}".rstrip("/"))


def guest_layer(rd: Reader, r: StackEntities, until: int, levels: Levels) -> Layer:
    if not r.guest:
        return _missing("guest", "no guest OS data for this stack")
    return _layer(rd, _Rows(rd, r, until), levels, "guest", f"Guest {r.guest}")


def vm_layer(rd: Reader, r: StackEntities, until: int, levels: Levels) -> Layer:
    if not r.vm:
        return _missing("vm", "no VM in this stack")
    rows = _Rows(rd, r, until)
    if rows.of(_first("vm", "vsphere_vm"))[1]:
        return _layer(rd, rows, levels, "vm", f"VM {r.vm}" + (f" on {r.host}" if r.host else ""))
    if rows.of(_first("vm", "esxtop_vm"))[1]:  # esxtop's group figures: sums over the VM's worlds
        return _layer(rd, rows, levels, "vm", f"VM {r.vm} (esxtop)", alternate=True)
    return _missing("vm", "no vSphere or esxtop samples for this VM", f"VM {r.vm}")


def host_layer(rd: Reader, r: StackEntities, until: int, levels: Levels) -> Layer:
    if not r.host:
        return _missing("host", "host unknown (no vSphere or esxtop data)")
    what = f" ({plural(len(r.luns), 'LUN')})" if r.luns else ""
    return _layer(rd, _Rows(rd, r, until), levels, "host", f"Host {r.host}{what}")


def storage_layer(rd: Reader, r: StackEntities, until: int, levels: Levels) -> Layer:
    volumes = {f.measurement: r.select("volume", f.measurement) for f in of_layer("storage") if f.entity == "volume"}
    chosen = dict.fromkeys(m for name in ("latency", "IOPS") if (m := _measurement_of(volumes, name)))
    if not chosen:
        why = "no array LUN matches this stack's NAA ids" if r.luns else "no storage for this stack"
        return _missing("storage", why)
    layer = _layer(rd, _Rows(rd, r, until), levels, "storage", "")
    n = sum(len(volumes[m]) for m in chosen)
    names = sorted({s.tags.get("storage", "") for m in chosen for s in volumes[m]} - {""})
    kinds = sorted({m.removeprefix("storage_") for m in chosen})
    layer.title = f"Storage {', '.join(names)} ({plural(n, '/'.join(kinds))})"
    return layer


def _measurement_of(volumes: dict[str, list[Series]], screen: str) -> str | None:
    """The first measurement with the stack's volumes among those of a screen figure."""
    return next((f.measurement for f in of_layer("storage") if f.screen == screen and volumes.get(f.measurement)), None)


def _first(layer: str, measurement: str) -> Figure:
    return next(f for f in of_layer(layer) if f.measurement == measurement)


LOADERS: dict[str, Callable[[Reader, StackEntities, int, Levels], Layer]] = {
    "db2": db2_layer, "guest": guest_layer, "vm": vm_layer, "host": host_layer, "storage": storage_layer}


def load_layers(rd: Reader, r: StackEntities, until: int, levels: Levels) -> list[Layer]:
    return [LOADERS[key](rd, r, until, levels) for key in LAYERS]
