"""The report of a benchmark run, and how it compares with a baseline run.

For every stack and layer, the run's figures (p50, p95, max and mean over the run of what the
collectors stored; the unit follows from the field's name, agent/core/schema.py), the findings
opened during the run and the cross-layer verdict over it. With a baseline, each figure beside
the baseline's, its change in percent, and the layers whose figures moved most.

Only the series of each stack's entities are read (`Store.rows_of`: one range scan each, shared
by stacks that share a host), never a whole measurement, and a large fleet's stacks are shared out
to a few processes: decoding the samples is most of the work (bench/report.py: 100 stacks, 1 h).
A figure that several series feed (a guest's disks, a VM's virtual disks) is combined at
each sample time first (rates summed, latencies their worst, ratios their mean), then summarised
over the run. Host figures count only while the stack's VM ran on that host (vMotion), and a
host's LUN figures only for the LUNs behind the VM's disks.
"""

from __future__ import annotations

import gc
import math
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from statistics import fmean
from typing import Any

from db2vtop.agent.core.config import StackConfig
from db2vtop.agent.core.model import Fact, FieldValue, Finding, severity_rank
from db2vtop.agent.core.runs import Run
from db2vtop.agent.core.schema import unit_of
from db2vtop.agent.core.store import Row, Series, Store
from db2vtop.checks.topology import Placement, in_stack, placement
from db2vtop.checks.triage import finding_json
from db2vtop.checks.verdict import stack_verdict

LAYERS = ("db2", "guest", "vm", "host", "storage")
LAYER_TITLES = {"db2": "DB2", "guest": "guest OS", "vm": "VM", "host": "ESXi host", "storage": "array"}


@dataclass(frozen=True)
class Figure:
    """One figure of a layer: a field of a measurement, read from the stack's `entity` series."""

    layer: str
    measurement: str
    field: str
    label: str
    entity: str  # db2 | guest | vm | host | host_lun | array: which of the stack's series feed it
    combine: str = "sum"  # across series at one time: sum (rates), max (latencies), mean (ratios)
    where: tuple[tuple[str, str], ...] = ()  # tags the series must also have
    key: bool = False  # charted, and in the summary `db2vtop run` prints

    @property
    def id(self) -> str:
        return f"{self.measurement}.{self.field}"

    @property
    def unit(self) -> str:
        return unit_of(self.field)


_DISK, _TOTAL = (("type", "disk"),), (("cpu", "total"),)
F = Figure
FIGURES: tuple[Figure, ...] = (
    F("db2", "db2_database", "activities_per_s", "throughput (activities)", "db2", key=True),
    F("db2", "db2_database", "commits_per_s", "commits", "db2", key=True),
    F("db2", "db2_database", "rollbacks_per_s", "rollbacks", "db2"),
    F("db2", "db2_database", "rows_read_per_s", "rows read", "db2"),
    F("db2", "db2_log", "log_write_ms", "log write time", "db2", "max", key=True),
    F("db2", "db2_log", "log_writes_per_s", "log writes", "db2"),
    F("db2", "db2_log", "log_write_bytes_per_s", "log written", "db2"),
    F("db2", "db2_bufferpool", "hit_pct", "buffer pool hit ratio", "db2", "mean"),
    F("db2", "db2_database", "lock_waits_per_s", "lock waits", "db2"),
    F("db2", "db2_database", "lock_wait_ms", "lock wait time", "db2", "max"),
    F("db2", "db2_database", "lock_wait_pct", "lock wait share of time", "db2", "max"),
    F("db2", "db2_database", "log_disk_wait_pct", "log disk wait share", "db2", "max"),
    F("db2", "db2_database", "pool_read_wait_pct", "buffer pool read wait share", "db2", "max"),
    F("db2", "db2_database", "cpu_ms_per_s", "DB2 CPU", "db2"),
    F("guest", "guest_cpu", "busy_pct", "CPU busy", "guest", "max", _TOTAL, key=True),
    F("guest", "guest_cpu", "iowait_pct", "CPU iowait", "guest", "max", _TOTAL),
    F("guest", "guest_cpu", "steal_pct", "CPU steal", "guest", "max", _TOTAL),
    F("guest", "guest_cpu", "load1", "load (1 min)", "guest", "max", _TOTAL),
    F("guest", "guest_disk", "read_await_ms", "read await", "guest", "max", _DISK),
    F("guest", "guest_disk", "write_await_ms", "write await", "guest", "max", _DISK, key=True),
    F("guest", "guest_disk", "read_iops", "read IOPS", "guest", "sum", _DISK),
    F("guest", "guest_disk", "write_iops", "write IOPS", "guest", "sum", _DISK),
    F("guest", "guest_disk", "read_bytes_per_s", "read throughput", "guest", "sum", _DISK, key=True),
    F("guest", "guest_disk", "write_bytes_per_s", "write throughput", "guest", "sum", _DISK, key=True),
    F("guest", "guest_mem", "used_pct", "memory used", "guest", "max"),
    F("guest", "guest_mem", "swap_in_bytes_per_s", "swap-in", "guest"),
    F("vm", "vsphere_vm", "cpu_ready_pct", "CPU ready (per vCPU)", "vm", "max", key=True),
    F("vm", "vsphere_vm", "cpu_costop_pct", "co-stop (per vCPU)", "vm", "max"),
    F("vm", "vsphere_vm", "cpu_usage_pct", "CPU usage", "vm", "max"),
    F("vm", "vsphere_vm", "mem_balloon_bytes", "balloon", "vm", "max"),
    F("vm", "vsphere_vm", "mem_swapin_bytes_per_s", "host swap-in of the VM", "vm"),
    F("vm", "vsphere_vm_disk", "read_latency_ms", "VMDK read latency", "vm", "max"),
    F("vm", "vsphere_vm_disk", "write_latency_ms", "VMDK write latency", "vm", "max", key=True),
    F("vm", "vsphere_vm_disk", "read_iops", "VMDK read IOPS", "vm"),
    F("vm", "vsphere_vm_disk", "write_iops", "VMDK write IOPS", "vm"),
    F("vm", "vsphere_vm_disk", "read_bytes_per_s", "VMDK read throughput", "vm"),
    F("vm", "vsphere_vm_disk", "write_bytes_per_s", "VMDK write throughput", "vm"),
    F("vm", "esxtop_vm", "ready_pct", "esxtop %RDY", "vm", "max"),
    F("vm", "esxtop_vm", "costop_pct", "esxtop %CSTP", "vm", "max"),
    F("vm", "esxtop_vm", "balloon_bytes", "esxtop MCTLSZ", "vm", "max"),
    F("host", "vsphere_host_lun", "kernel_latency_ms", "KAVG", "host_lun", "max", key=True),
    F("host", "vsphere_host_lun", "device_latency_ms", "DAVG", "host_lun", "max", key=True),
    F("host", "vsphere_host_lun", "queue_latency_ms", "QAVG", "host_lun", "max"),
    F("host", "vsphere_host_lun", "read_iops", "LUN read IOPS", "host_lun"),
    F("host", "vsphere_host_lun", "write_iops", "LUN write IOPS", "host_lun"),
    F("host", "esxtop_device", "kernel_latency_ms", "esxtop KAVG", "host_lun", "max"),
    F("host", "esxtop_device", "device_latency_ms", "esxtop DAVG", "host_lun", "max"),
    F("host", "esxtop_device", "queue_latency_ms", "esxtop QAVG", "host_lun", "max"),
    F("host", "esxtop_device", "queued", "esxtop QUED", "host_lun", "max"),
    F("host", "vsphere_host", "cpu_usage_pct", "host CPU usage", "host", "max"),
    F("host", "vsphere_host", "mem_swapin_bytes_per_s", "host swap-in", "host"),
    F("storage", "storage_lun", "avg_latency_ms", "LUN latency", "array", "max", key=True),
    F("storage", "storage_lun", "read_latency_ms", "LUN read latency", "array", "max"),
    F("storage", "storage_lun", "write_latency_ms", "LUN write latency", "array", "max"),
    F("storage", "storage_lun", "total_iops", "LUN IOPS", "array", key=True),
    F("storage", "storage_lun", "read_bytes_per_s", "LUN read throughput", "array"),
    F("storage", "storage_lun", "write_bytes_per_s", "LUN write throughput", "array"),
    F("storage", "storage_volume", "avg_latency_ms", "volume latency", "array", "max"),
    F("storage", "storage_volume", "total_iops", "volume IOPS", "array"),
    F("storage", "storage_device", "total_iops", "device IOPS", "array"),
    F("storage", "storage_disk", "write_await_ms", "storage host write await", "array", "max"),
    F("storage", "storage_disk", "read_await_ms", "storage host read await", "array", "max"),
    F("storage", "storage_disk", "write_iops", "storage host write IOPS", "array"),
    F("storage", "storage_disk", "read_iops", "storage host read IOPS", "array"),
)
BY_MEASUREMENT: dict[str, list[Figure]] = defaultdict(list)
for _f in FIGURES:
    BY_MEASUREMENT[_f.measurement].append(_f)


# --- statistics -----------------------------------------------------------------------

def percentile(ordered: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default) of sorted values."""
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True)
class Stat:
    p50: float
    p95: float
    max: float
    mean: float
    samples: int
    series: int

    @classmethod
    def of(cls, values: list[float], series: int) -> Stat:
        ordered = sorted(values)
        return cls(percentile(ordered, 50), percentile(ordered, 95), ordered[-1], fmean(ordered), len(ordered),
                   series)

    def to_json(self, fig: Figure) -> dict[str, Any]:
        return {"label": fig.label, "unit": fig.unit, "p50": _r(self.p50), "p95": _r(self.p95), "max": _r(self.max),
                "mean": _r(self.mean), "samples": self.samples, "series": self.series}


def _r(x: float | None) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return float(f"{x:.6g}")


# --- reading --------------------------------------------------------------------------

class _Cache:
    """The store's series, indexed by measurement, and the rows of each series read for a window,
    shared by every stack (hosts and arrays serve many) and by the verdict's reads."""

    def __init__(self, store: Store):
        self.store = store
        self.by_measurement: dict[str, list[Series]] = defaultdict(list)
        for s in store.series():
            self.by_measurement[s.measurement].append(s)
        self.windows: dict[tuple[int, int], dict[int, list[Row]]] = {}
        self.fallback: dict[tuple[int, str, int, int], list[tuple[int, FieldValue]]] = {}

    def rows(self, series: Iterable[Series], since: int, until: int) -> dict[int, list[Row]]:
        loaded = self.windows.setdefault((since, until), {})
        for s in series:
            if s.id not in loaded:
                loaded[s.id] = list(self.store.rows_of([s], since, until))
        return loaded

    # the verdict's and placement's Source protocol
    def series(self, measurement: str | None = None) -> list[Series]:
        if measurement is None:
            return [s for ss in self.by_measurement.values() for s in ss]
        return self.by_measurement.get(measurement, [])

    def window(self, series_id: int, field_name: str, since_ns: int,
               until_ns: int | None = None) -> list[tuple[int, FieldValue]]:
        until = until_ns if until_ns is not None else 2**63 - 1
        for (lo, hi), loaded in self.windows.items():
            rows = loaded.get(series_id)
            if rows is not None and lo <= since_ns and until <= hi:
                return [(r.ts, r.fields[field_name]) for r in rows
                        if since_ns <= r.ts <= until and field_name in r.fields]
        key = (series_id, field_name, since_ns, until)
        if key not in self.fallback:  # outside the windows read (placement looks an hour back): once each
            self.fallback[key] = self.store.window(series_id, field_name, since_ns, until_ns)
        return self.fallback[key]


# --- stacks ---------------------------------------------------------------------------

def _lun(name: str) -> str:
    return name.lower().removeprefix("naa.")


@dataclass
class Entities:
    """A stack's entities over one window: where its VM ran, and the LUNs behind its disks."""

    stack: StackConfig
    where: Placement
    hosts: list[str]
    luns: set[str]

    def to_json(self) -> dict[str, Any]:
        s = self.stack
        return {"name": s.name, "vm": s.vm, "vcenter": s.vcenter, "guest": s.guest, "db2": s.db2,
                "storage": list(s.storage), "hosts": self.hosts, "luns": sorted(self.luns)}


def report_stacks(configured: list[StackConfig], inferred: list[StackConfig], store: Store) -> list[StackConfig]:
    """The stacks a report covers: the configured ones and the inferred ones with a DB2 (checks/
    topology.py, as `db2vtop stacks` lists them), then one per DB2 database and per guest that has
    samples in the store but no stack (one stack when the store holds exactly one of each: a DB2
    monitored on the machine it runs on)."""
    out = list(configured) + [s for s in inferred if s.db2]
    db2s = sorted({s.tags["db2"] for m in ("db2_database", "db2_log") for s in store.series(m) if s.tags.get("db2")}
                  - {s.db2 for s in out})
    guests = sorted({s.tags["guest"] for s in store.series("guest_cpu") if s.tags.get("guest")}
                    - {s.guest for s in out})
    if len(db2s) == 1 and len(guests) == 1:
        return [*out, StackConfig(name=db2s[0], db2=db2s[0], guest=guests[0])]
    return out + [StackConfig(name=d, db2=d) for d in db2s] + [StackConfig(name=g, guest=g) for g in guests]


# --- the report -----------------------------------------------------------------------

@dataclass
class RunFigures:
    """One run's side of the report."""

    run: Run
    until_ns: int  # the end, or "now" for a run still open
    stacks: dict[str, dict[str, dict[str, Stat]]] = field(default_factory=dict)  # stack > layer > figure
    charts: dict[str, dict[str, list[tuple[float, float]]]] = field(default_factory=dict)  # stack > figure > (s, v)
    entities: dict[str, Entities] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    finding_stacks: list[list[str]] = field(default_factory=list)
    verdicts: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        r = self.run
        return {"name": r.name, "begin": _iso(r.begin_ns), "end": _iso(r.end_ns), "open": r.open,
                "duration_s": round((self.until_ns - r.begin_ns) / 1e9, 3), "command": r.command,
                "exit_status": r.exit_status,
                "stacks": {st: {layer: {k: v.to_json(FIGURE_BY_ID[k]) for k, v in figs.items()}
                                for layer, figs in layers.items()} for st, layers in self.stacks.items()}}


FIGURE_BY_ID = {f.id: f for f in FIGURES}


@dataclass
class Moved:
    """A layer of a stack whose figures moved between baseline and run, by how much."""

    stack: str
    layer: str
    score: float  # |log2| of the largest ratio run/baseline among its figures
    figures: list[tuple[str, float | None]]  # (figure id, change of the mean in %), largest first

    def to_json(self) -> dict[str, Any]:
        return {"stack": self.stack, "layer": self.layer, "score": round(self.score, 3),
                "figures": [{"figure": k, "change_pct": _r(c)} for k, c in self.figures]}


@dataclass
class Report:
    generated_at: int
    stacks: list[StackConfig]
    run: RunFigures
    baseline: RunFigures | None = None
    moved: list[Moved] = field(default_factory=list)

    def delta(self) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
        """stack > layer > figure > run and baseline means, change of the mean and of p95 in %."""
        out: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
        if self.baseline is None:
            return out
        for st in self.stacks:
            mine, theirs = self.run.stacks.get(st.name, {}), self.baseline.stacks.get(st.name, {})
            for layer in LAYERS:
                a, b = mine.get(layer, {}), theirs.get(layer, {})
                for key in [k for k in FIGURE_BY_ID if k in a or k in b]:
                    x, y = a.get(key), b.get(key)
                    out.setdefault(st.name, {}).setdefault(layer, {})[key] = {
                        "unit": FIGURE_BY_ID[key].unit, "run": _r(x.mean) if x else None,
                        "baseline": _r(y.mean) if y else None,
                        "change_pct": _r(change_pct(x.mean, y.mean)) if x and y else None,
                        "p95_change_pct": _r(change_pct(x.p95, y.p95)) if x and y else None}
        return out

    def to_json(self) -> dict[str, Any]:
        runs = [self.run] + ([self.baseline] if self.baseline else [])
        return {"generated_at": _iso(self.generated_at),
                "stacks": [self.run.entities[s.name].to_json() for s in self.stacks if s.name in self.run.entities],
                "run": self.run.to_json(),
                "baseline": self.baseline.to_json() if self.baseline else None,
                "delta": {"stacks": self.delta(), "moved": [m.to_json() for m in self.moved]},
                "findings": [{**finding_json(f), "run": r.run.name, "stacks": stacks}
                             for r in runs for f, stacks in zip(r.findings, r.finding_stacks, strict=True)],
                "verdicts": [v for r in runs for v in r.verdicts]}


def _iso(ns: int | None) -> str | None:
    return None if ns is None else datetime.fromtimestamp(ns / 1e9, UTC).isoformat(timespec="milliseconds")


def change_pct(run: float, baseline: float) -> float | None:
    """The change from baseline to run in % of the baseline; None from a zero baseline."""
    if baseline == 0:
        return 0.0 if run == 0 else None
    return (run - baseline) / abs(baseline) * 100


#: a move smaller than this (in the figure's unit) is noise, whatever its ratio: CPU steal 0 -> 0.03 %
#: is not "what changed" (0.5 points of a percentage, half a millisecond, ...)
MOVE_FLOOR = {"%": 0.5, "ms": 0.5, "µs": 500.0, "per second": 1.0, "I/O per second": 1.0,
              "bytes/s": 64 * 1024.0, "bytes": 1024 * 1024.0, "MHz": 10.0}


def moved_enough(unit: str, run: float, baseline: float) -> bool:
    """At least 10 % (the score's cut) and beyond the unit's floor."""
    return abs(run - baseline) >= MOVE_FLOOR.get(unit, 0.0) and moved_score(run, baseline) >= math.log2(1.1)


def moved_score(run: float, baseline: float) -> float:
    """How far a figure moved, symmetric and bounded: |log2| of the ratio, each side lifted by 1 %
    of the larger (so 0 → something scores about 6.7, not infinity, and noise near zero little)."""
    eps = 0.01 * max(abs(run), abs(baseline)) or 1.0
    return abs(math.log2((abs(run) + eps) / (abs(baseline) + eps)))


COMBINE: dict[str, Callable[[Iterable[float]], float]] = {"sum": math.fsum, "max": max, "mean": fmean}
#: how long after a run's end to look for each series' first sample (vCenter's is 20 s apart)
AFTER_NS = 60 * 10**9


def _covering(rows: list[Row], since: int, until: int) -> list[Row]:
    """The samples whose interval overlaps [since, until]: a sample at `ts` stands for the time since
    the one before it (rates, averages), so those after `since` up to and including the first at or
    after `until`. A run shorter than the collection interval still has its sample."""
    out = []
    for r in rows:
        if r.ts <= since:
            continue
        out.append(r)
        if r.ts >= until:
            break
    return out


class _Reporter:
    def __init__(self, store: Store, facts: list[Fact], overrides: dict[str, dict] | None):
        self.cache = _Cache(store)
        self.facts = facts
        self.overrides = overrides
        self.index: dict[tuple[str, str], dict[str, list[Series]]] = {}
        self.vm_luns: dict[str, set[str]] = defaultdict(set)
        for s in self.cache.series("vsphere_vm_disk"):
            self.vm_luns[s.tags.get("vm", "")] |= {_lun(x) for x in s.tags.get("lun", "").split(",") if x}
        for f in facts:
            if f.kind == "vsphere_vm" and f.tags.get("vm"):
                self.vm_luns[f.tags["vm"]] |= {_lun(str(x)) for d in f.data.get("disks") or ()
                                               for x in d.get("luns") or ()}

    def by_tag(self, measurement: str, tag: str, value: str | None) -> list[Series]:
        idx = self.index.get((measurement, tag))
        if idx is None:
            idx = self.index[(measurement, tag)] = defaultdict(list)
            for s in self.cache.series(measurement):
                if tag in s.tags:
                    idx[s.tags[tag]].append(s)
        return idx.get(value, []) if value is not None else []

    def entities(self, stack: StackConfig, since: int, until: int) -> Entities:
        where = placement(self.cache, stack.vm, since, until, stack.vcenter)
        luns = set(self.vm_luns.get(stack.vm or "", ()))
        return Entities(stack, where, sorted(where.hosts_between(since, until)), luns)

    def select(self, fig: Figure, ent: Entities) -> list[Series]:
        st, m = ent.stack, fig.measurement
        if fig.entity == "db2":
            found = self.by_tag(m, "db2", st.db2)
        elif fig.entity == "guest":
            found = self.by_tag(m, "guest", st.guest)
        elif fig.entity == "vm":
            found = [s for s in self.by_tag(m, "vm", st.vm)
                     if not st.vcenter or s.tags.get("vcenter", st.vcenter) == st.vcenter]
        elif fig.entity in ("host", "host_lun"):
            found = [s for h in ent.hosts for s in self.by_tag(m, "host", h)]
            if fig.entity == "host_lun":
                found = [s for s in found if _lun(s.tags.get("lun") or s.tags.get("device") or "") in ent.luns]
        else:  # array: the stack's arrays, narrowed to its LUNs where the series names one
            found = [s for a in st.storage for s in self.by_tag(m, "storage", a)]
            if ent.luns:
                found = [s for s in found if "naa" not in s.tags or _lun(s.tags["naa"]) in ent.luns]
        return [s for s in found if all(s.tags.get(k) == v for k, v in fig.where)]

    def figures(self, run: Run, until: int, stacks: list[StackConfig]) -> RunFigures:
        out = RunFigures(run, until)
        since = run.begin_ns
        groups: dict[tuple, list[Figure]] = defaultdict(list)
        for fig in FIGURES:
            groups[(fig.measurement, fig.entity, fig.where)].append(fig)
        views: dict[str, _StackView] = {}
        for st in stacks:
            ent = out.entities[st.name] = self.entities(st, since, until)
            view = views[st.name] = _StackView(self.cache)
            layers: dict[str, dict[str, Stat]] = {}
            charts: dict[str, list[tuple[float, float]]] = {}
            for figs in groups.values():
                series = self.select(figs[0], ent)
                if not series:
                    continue
                view.add(series)
                rows = self.cache.rows(series, since, until + AFTER_NS)
                fed: dict[str, list[tuple[list[int], list[float]]]] = {f.field: [] for f in figs}
                for s in series:
                    mine = _covering(rows[s.id], since, until)
                    if figs[0].entity in ("host", "host_lun"):  # only while the VM ran on this host
                        host, at = s.tags.get("host"), ent.where.host_at
                        mine = [r for r in mine if at(r.ts) == host]
                    if not mine:
                        continue
                    times = [r.ts for r in mine]
                    for name, found in fed.items():
                        # a declared number field (tests/docs_check.py): present or not, never text
                        try:
                            found.append((times, [r.fields[name] for r in mine]))
                        except KeyError:  # not in every sample
                            pairs = [(r.ts, v) for r in mine if (v := r.fields.get(name)) is not None]
                            if pairs:
                                found.append(([t for t, _ in pairs], [v for _, v in pairs]))
                for fig in figs:
                    found = fed[fig.field]
                    if not found:
                        continue
                    times, values = found[0] if len(found) == 1 else _combine(found, COMBINE[fig.combine])
                    layers.setdefault(fig.layer, {})[fig.id] = Stat.of(values, len(found))
                    if fig.key:
                        charts[fig.id] = [((t - since) / 1e9, v) for t, v in zip(times, values, strict=True)]
            if layers:
                out.stacks[st.name] = {layer: layers[layer] for layer in LAYERS if layer in layers}
                out.charts[st.name] = charts
        for st in stacks:  # the verdict reads the stack's own series (the same entities), not the fleet's
            v = stack_verdict(views[st.name], st, since, until, self.overrides)
            out.verdicts.append({**v.to_json(), "run": run.name, "vm": st.vm})
        return out


def _combine(found: list[tuple[list[int], list[float]]], how: Callable[[Iterable[float]], float],
             ) -> tuple[list[int], list[float]]:
    """Several series' points as one: `how` of the values at each time."""
    times = found[0][0]
    if all(t == times for t, _ in found[1:]):  # one collection cycle each: the usual case
        return times, [how(vs) for vs in zip(*(v for _, v in found), strict=True)]
    at: dict[int, list[float]] = defaultdict(list)
    for ts_, vs_ in found:
        for ts, v in zip(ts_, vs_, strict=True):
            at[ts].append(v)
    ordered = sorted(at)
    return ordered, [how(at[ts]) for ts in ordered]


class _StackView:
    """What the verdict reads for one stack: the series chosen for its figures (a superset of those
    the verdict matches itself), through the shared cache."""

    def __init__(self, cache: _Cache):
        self.cache = cache
        self.by_measurement: dict[str, dict[int, Series]] = defaultdict(dict)

    def add(self, series: list[Series]) -> None:
        for s in series:
            self.by_measurement[s.measurement][s.id] = s

    def series(self, measurement: str | None = None) -> list[Series]:
        if measurement is None:
            return [s for ss in self.by_measurement.values() for s in ss.values()]
        return list(self.by_measurement.get(measurement, {}).values())

    def window(self, series_id: int, field_name: str, since_ns: int,
               until_ns: int | None = None) -> list[tuple[int, FieldValue]]:
        return self.cache.window(series_id, field_name, since_ns, until_ns)


def _findings(out: RunFigures, found: list[Finding], stacks: list[StackConfig], facts: list[Fact]) -> None:
    """The findings opened during the run, worst first, with the stacks they belong to."""
    opened = [f for f in found if out.run.begin_ns <= f.first_seen <= out.until_ns]
    opened.sort(key=lambda f: (severity_rank(f.severity), f.first_seen))
    out.findings = opened
    out.finding_stacks = [[st.name for st in stacks if in_stack(st, f.subject, facts)] for f in opened]


#: fewer stacks than this are reported in one process
PARALLEL_MIN_STACKS = 16


def _both(store: Store, stacks: list[StackConfig], run: Run, run_until: int, baseline: Run | None,
          base_until: int | None, facts: list[Fact], overrides: dict[str, dict] | None,
          ) -> tuple[RunFigures, RunFigures | None]:
    # millions of short-lived rows and tuples, no cycles among them: the cyclic collector would only
    # walk them again and again (a fifth of the time); reference counting frees them
    collecting = gc.isenabled()
    gc.disable()
    try:
        r = _Reporter(store, facts, overrides)
        return (r.figures(run, run_until, stacks),
                r.figures(baseline, base_until, stacks) if baseline is not None and base_until is not None else None)
    finally:
        if collecting:
            gc.enable()


def _part(job: tuple) -> tuple[RunFigures, RunFigures | None]:
    """One worker's share: the figures and verdicts of some stacks, from its own store connection."""
    path, *rest = job
    with Store(path) as store:
        return _both(store, *rest)


def _merge(parts: list[RunFigures], run: Run, until: int, stacks: list[StackConfig]) -> RunFigures:
    out = RunFigures(run, until)
    for p in parts:
        out.stacks.update(p.stacks)
        out.charts.update(p.charts)
        out.entities.update(p.entities)
        out.verdicts += p.verdicts
    order = {st.name: i for i, st in enumerate(stacks)}
    out.stacks = {k: out.stacks[k] for k in sorted(out.stacks, key=order.__getitem__)}
    out.verdicts.sort(key=lambda v: order[v["stack"]])
    return out


def build_report(store: Store, stacks: list[StackConfig], run: Run, baseline: Run | None = None,
                 facts: list[Fact] | None = None, overrides: dict[str, dict] | None = None,
                 now_ns: int | None = None, workers: int = 1) -> Report:
    """The report of `run` (and its comparison with `baseline`) over `stacks` (report_stacks).

    With `workers` > 1 and many stacks, the stacks are shared out to that many processes, each
    reading its stacks' series over its own connection: reading and decoding samples is most of
    the work, and it is the same work whichever process does it."""
    now = now_ns if now_ns is not None else time.time_ns()
    facts = store.facts() if facts is None else facts
    run_until = run.until(now)
    base_until = baseline.until(now) if baseline is not None else None
    if workers > 1 and len(stacks) >= PARALLEL_MIN_STACKS:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        chunks = [stacks[i::workers] for i in range(workers)]
        jobs = [(store.path, chunk, run, run_until, baseline, base_until, facts, overrides) for chunk in chunks]
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            parts = list(pool.map(_part, jobs))
        mine = _merge([p[0] for p in parts], run, run_until, stacks)
        theirs = _merge([p[1] for p in parts if p[1] is not None], baseline, base_until, stacks) \
            if baseline is not None and base_until is not None else None
    else:
        mine, theirs = _both(store, stacks, run, run_until, baseline, base_until, facts, overrides)
    found = store.findings(open_only=False)
    report = Report(now, stacks, mine)
    _findings(mine, found, stacks, facts)
    if theirs is not None:
        _findings(theirs, found, stacks, facts)
        report.baseline = theirs
        report.moved = _moved(report)
    return report


def _moved(report: Report) -> list[Moved]:
    """Layers whose figures moved at least 10 % and beyond their unit's floor (mean, baseline to run),
    most first."""
    assert report.baseline is not None
    out = []
    for st in report.stacks:
        mine, theirs = report.run.stacks.get(st.name, {}), report.baseline.stacks.get(st.name, {})
        for layer in LAYERS:
            a, b = mine.get(layer, {}), theirs.get(layer, {})
            scored = sorted(((moved_score(a[k].mean, b[k].mean), k, change_pct(a[k].mean, b[k].mean))
                             for k in a if k in b and moved_enough(FIGURE_BY_ID[k].unit, a[k].mean, b[k].mean)),
                            reverse=True)
            if scored:
                out.append(Moved(st.name, layer, scored[0][0], [(k, c) for _score, k, c in scored[:3]]))
    return sorted(out, key=lambda m: -m.score)
