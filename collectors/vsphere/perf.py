"""Batched realtime QueryPerf: plan, request XML, CSV parsing and samples.

Many entities go in one call (chunked by entities and by metric ids, capped by vCenter's
config.vpxd.stats.maxQueryMetrics); results come back in CSV form, so zero values stay
aligned with their timestamps and one series is one short string to split. A high-water
mark per entity makes consecutive cycles join without a lost or repeated sample; each sample
keeps its own 20 s timestamp. A mark is only ever a time vCenter's own clock has reached: a
sample dated past it is set aside, and a mark found past it (that clock stepped back) is reset.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any
from xml.etree import ElementTree as ET
from xml.sax.saxutils import escape

from db2vtop.agent.core.model import Sample
from db2vtop.collectors.base import CollectorError
from db2vtop.collectors.vsphere.counters import HOST_COUNTERS, MEASUREMENT_OF, MS_PCT, RAW, VM_COUNTERS, convert
from db2vtop.collectors.vsphere.facts import TagMaps
from db2vtop.collectors.vsphere.inventory import Inventory, retrieve_objects
from db2vtop.collectors.vsphere.soapxml import NS as _NS
from db2vtop.collectors.vsphere.soapxml import Node, Ref, as_list, envelope, this, to_int

REALTIME_S = 20
REALTIME_KEEP_S = 3600   # vCenter keeps an hour of realtime samples
#: how far past vCenter's own clock (CurrentTime) a sample's time may be: its hosts' clocks a little ahead of
#: its own. A sample dated further is set aside, never a mark (a mark in the future stops the entity's samples
#: until vCenter's clock reaches it)
CLOCK_MARGIN_S = 60
_ENTITY_TYPES = {"vm": "VirtualMachine", "host": "HostSystem"}


@dataclass(frozen=True, slots=True)
class Spec:
    kind: str                          # "vm" | "host"
    moid: str
    start: float | None                # exclusive, server epoch seconds; None = newest sample only
    metric_ids: tuple[tuple[int, str], ...]


class CounterIds:
    """Counter keys resolved by name once per connection; names the server lacks are skipped.

    `rows[kind][per_instance][key]` is where a series of that counter goes: (measurement, field,
    conversion), worked out here once rather than for each of a cycle's ~90,000 series. `steady[kind]` leaves
    out the counters whose level the light inventory's quickStats give (`quick[kind]`: field, property)."""

    def __init__(self, by_name: dict[str, int]):
        self.metric_ids: dict[str, tuple[tuple[int, str], ...]] = {}
        self.steady: dict[str, tuple[tuple[int, str], ...]] = {}
        self.quick: dict[str, tuple[tuple[str, str], ...]] = {}
        self.rows: dict[str, tuple[dict[int, tuple[str, str, str]], ...]] = {}
        self.missing: list[str] = []
        net: set[int] = set()
        for kind, counters in (("vm", VM_COUNTERS), ("host", HOST_COUNTERS)):
            ids, steady, quick = [], [], []
            rows: tuple[dict[int, tuple[str, str, str]], ...] = ({}, {})
            for c in counters:
                key = by_name.get(c.name)
                if key is None:
                    self.missing.append(f"{kind}:{c.name}")
                    continue
                ids.append((key, "*" if c.per_instance else ""))
                if kind == "vm" and c.name.startswith("net."):
                    net.add(key)
                if c.quick:
                    quick.append((c.field, c.quick))
                else:
                    steady.append(ids[-1])
                for per_row in (False, True):
                    measurement = MEASUREMENT_OF.get((kind, c.name.split(".", 1)[0], per_row))
                    if measurement is not None:
                        rows[per_row][key] = (measurement, c.field, c.convert)
            self.metric_ids[kind] = tuple(ids)
            self.steady[kind] = tuple(steady)
            self.quick[kind] = tuple(quick)
            self.rows[kind] = rows
        self._split: dict[str, tuple[object, tuple[tuple[int, str], ...], tuple[tuple[int, str], ...]]] = {}
        self._net = frozenset(net)   # a VM's vNIC counters
        self._by_nic: dict[str, tuple[tuple[int, str], ...]] = {}

    def steady_for(self, kind: str, nic: str | None) -> tuple[tuple[int, str], ...]:
        """A steady cycle's metric ids of one entity. A VM with one vNIC (`nic`, its instance) asks for it by
        name: "*" would bring the aggregate of its vNICs too, a second series of each net counter that nothing
        reads (a tenth of a steady answer). Any other (nic None) asks for "*"."""
        if kind != "vm" or nic is None:
            return self.steady[kind]
        hit = self._by_nic.get(nic)
        if hit is None:
            hit = self._by_nic[nic] = tuple((key, nic if key in self._net else inst) for key, inst in self.steady[kind])
        return hit

    def split(self, kind: str, wanted: dict[str, frozenset[str] | None] | None,
              ) -> tuple[tuple[tuple[int, str], ...], tuple[tuple[int, str], ...]]:
        """(metric ids whose history is `wanted`, the rest) of an entity of this kind; `wanted` maps a
        measurement to the fields needed (None: all of them), and None wants every metric id."""
        if wanted is None:
            return self.metric_ids[kind], ()
        hit = self._split.get(kind)
        if hit is None or hit[0] is not wanted:
            history, rest = [], []
            for mid in self.metric_ids[kind]:
                plan = self.rows[kind][mid[1] != ""].get(mid[0])
                fields = wanted.get(plan[0], frozenset()) if plan is not None else frozenset()
                needed = plan is not None and (fields is None or plan[1] in fields)
                (history if needed else rest).append(mid)
            hit = self._split[kind] = (wanted, tuple(history), tuple(rest))
        return hit[1], hit[2]


def read_counters(session: Any) -> dict[str, int]:
    """Every counter's key by `group.name.rollup`, from the PerformanceManager's perfCounter read as XML
    (pyvmomi would build a typed object per element of its hundreds of PerfCounterInfo: a tenth of a
    cold start's CPU)."""
    rows = retrieve_objects(session, [Ref("PerformanceManager", session.perf_manager)],
                            {"PerformanceManager": ("perfCounter",)})
    names: dict[str, int] = {}
    for _, p in rows:
        for c in as_list(p.get("perfCounter")):
            group = c.get("groupInfo") if isinstance(c, Node) else None
            name = c.get("nameInfo") if isinstance(c, Node) else None
            key = to_int(c.get("key")) if isinstance(c, Node) else None
            if isinstance(group, Node) and isinstance(name, Node) and key is not None:
                names[f"{group.get('key')}.{name.get('key')}.{c.get('rollupType')}"] = key
    return names


def chunk(specs: list[Spec], max_metrics: int, max_entities: int) -> list[list[Spec]]:
    """Pack specs into calls of at most max_entities specs and max_metrics metric ids (0 = no cap). An entity's
    specs in a row (its history and its newest samples) go in one call where the cap allows: to_samples
    joins their samples of one time into one."""
    calls: list[list[Spec]] = []
    cur: list[Spec] = []
    n = 0
    i = 0
    while i < len(specs):
        j = i + 1
        while j < len(specs) and specs[j].moid == specs[i].moid and specs[j].kind == specs[i].kind:
            j += 1
        group = specs[i:j]
        size = sum(len(s.metric_ids) for s in group)
        if cur and (len(cur) + len(group) > max(max_entities, len(group))
                    or (max_metrics and n + size > max(max_metrics, size))):
            calls.append(cur)
            cur, n = [], 0
        for s in group:
            ids = s.metric_ids
            step = max_metrics or len(ids) or 1
            for k in range(0, len(ids), step):  # only an entity past the metrics cap on its own is cut
                part = ids[k:k + step]
                if cur and (len(cur) >= max_entities or (max_metrics and n + len(part) > max_metrics)):
                    calls.append(cur)
                    cur, n = [], 0
                cur.append(replace(s, metric_ids=part) if len(part) != len(ids) else s)
                n += len(part)
        i = j
    if cur:
        calls.append(cur)
    return calls


def iso(epoch: float) -> str:
    """A time as vCenter writes it (UTC, to the second)."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def request_xml(perf_manager: str, specs: list[Spec]) -> bytes:
    """One QueryPerf envelope; elements in WSDL order (vCenter validates the schema)."""
    out = ['<QueryPerf xmlns="urn:vim25">', this("PerformanceManager", perf_manager)]
    for s in specs:
        out.append(f'<querySpec><entity type="{_ENTITY_TYPES[s.kind]}">{escape(s.moid)}</entity>')
        if s.start is None:
            out.append("<maxSample>1</maxSample>")
        else:
            out.append(f"<startTime>{iso(s.start)}</startTime>")
        out.append(_metric_ids_xml(s.metric_ids))
        out.append(f"<intervalId>{REALTIME_S}</intervalId><format>csv</format></querySpec>")
    out.append("</QueryPerf>")
    return envelope("".join(out))


@functools.lru_cache(maxsize=64)
def _metric_ids_xml(metric_ids: tuple[tuple[int, str], ...]) -> str:
    """A spec's metricId elements: the same few id lists go with every entity of a call (10,000 VMs)."""
    return "".join(f"<metricId><counterId>{key}</counterId><instance>{escape(inst)}</instance></metricId>"
                   for key, inst in metric_ids)


@dataclass(slots=True)
class EntityResult:
    moid: str
    stamps: list[int]                          # unix seconds, in the order of the values
    intervals: list[int]
    series: list[tuple[int, str, list[int | None]]]
    rejected: int = 0                          # samples left out: their time was outside the window


_ts_cache: dict[str, int] = {}


def _parse_ts(text: str) -> int:
    ts = _ts_cache.get(text)
    if ts is None:
        if len(_ts_cache) > 100_000:
            _ts_cache.clear()
        ts = int(datetime.fromisoformat(text).timestamp())
        _ts_cache[text] = ts
    return ts


RETURNVAL = _NS + "returnval"


def query(session: Any, perf_manager: str, specs: list[Spec],
          window: tuple[float, float] | None = None) -> list[EntityResult]:
    """One QueryPerf call, its answer parsed entity by entity as it arrives (never a whole tree); only
    samples stamped within `window` (epoch seconds) are kept."""
    out: list[EntityResult] = []
    session.post_each(request_xml(perf_manager, specs), RETURNVAL, lambda rv: out.append(entity_result(rv, window)))
    return out


def entity_result(rv: ET.Element, window: tuple[float, float] | None = None) -> EntityResult:
    """One entity's `returnval` of a QueryPerf answer in CSV form; malformed content is a CollectorError."""
    try:
        return _entity(rv, window)
    except (ValueError, TypeError, OverflowError) as e:
        raise CollectorError(f"malformed QueryPerf response: {e}") from None


def _entity(rv: ET.Element, window: tuple[float, float] | None) -> EntityResult:
    entity = rv.findtext(_NS + "entity") or ""
    info = (rv.findtext(_NS + "sampleInfoCSV") or "").split(",")
    intervals = [int(x) for x in info[0::2] if x]
    stamps = [_parse_ts(x) for x in info[1::2] if x]
    series = []
    for v in rv.findall(_NS + "value"):
        ident = v.find(_NS + "id")
        if ident is None:
            continue
        key = int(ident.findtext(_NS + "counterId") or -1)
        inst = ident.findtext(_NS + "instance") or ""
        if inst == "*":  # vCenter answers "*" with each instance; one that names the wildcard (govmomi's simulator
            continue     # echoes it) names none
        raw = (v.findtext(_NS + "value") or "").split(",")
        # a series without a gap (nearly all of them) converted in one C loop
        series.append((key, inst, list(map(int, raw)) if "" not in raw else [int(x) if x else None for x in raw]))
    result = EntityResult(entity, stamps, intervals, series)
    if window is not None and not all(window[0] <= t <= window[1] for t in stamps):
        _keep_within(result, window)
    return result


def _keep_within(r: EntityResult, window: tuple[float, float]) -> None:
    """Leave out the samples whose time is outside the window (past vCenter's own clock, a clock years off, a
    date past 2262): taken as they are they would move the high-water mark past every sample to come, and with
    it stop the entity's samples until that time."""
    keep = [i for i, t in enumerate(r.stamps) if window[0] <= t <= window[1]]
    r.rejected = len(r.stamps) - len(keep)
    r.stamps = [r.stamps[i] for i in keep]
    r.intervals = [r.intervals[i] for i in keep if i < len(r.intervals)]
    r.series = [(key, inst, [values[i] for i in keep if i < len(values)]) for key, inst, values in r.series]


def window_start(server_now: float) -> float:
    """The exclusive start of the realtime samples vCenter still holds."""
    return server_now - REALTIME_KEEP_S + REALTIME_S


class PerfState:
    """High-water marks: the newest sample timestamp taken per entity (one QueryPerf answer gives all
    of an entity's series the same timestamps, so a mark per series would only cost memory)."""

    def __init__(self) -> None:
        self.entity_start: dict[str, int] = {}

    def start_for(self, moid: str, server_now: float) -> float | None:
        mark = self.entity_start.get(moid)
        if mark is None:
            return None
        return max(mark, window_start(server_now))

    def reset_ahead(self, server_now: float) -> tuple[int, int]:
        """Marks past vCenter's clock by more than the margin, reset to the start of its realtime window: no
        sample set them so (see CLOCK_MARGIN_S), so its clock went back since (NTP stepped it, or the marks
        were resumed from samples it dated ahead), and QueryPerf would answer nothing for them until its
        window moves past them. The hour vCenter holds is asked again (what the store has is written again
        unchanged). Returns (marks reset, the newest of them)."""
        limit = server_now + CLOCK_MARGIN_S
        ahead = [(moid, mark) for moid, mark in self.entity_start.items() if mark > limit]
        floor = math.ceil(window_start(server_now))  # not before the window: lost() says nothing of them
        for moid, _ in ahead:
            self.entity_start[moid] = floor
        return len(ahead), max((mark for _, mark in ahead), default=0)

    def lost(self, server_now: float) -> tuple[int, float] | None:
        """(oldest mark, window start) when marks fell out of vCenter's realtime hour."""
        floor = window_start(server_now)
        oldest = min((m for m in self.entity_start.values() if m < floor), default=None)
        return (oldest, floor) if oldest is not None else None

    def forget(self, keep: set[str]) -> None:
        """Drop marks of entities that left the inventory (deleted, powered off)."""
        gone = set(self.entity_start) - keep
        if gone:
            for moid in gone:
                del self.entity_start[moid]


def to_samples(results: Iterable[EntityResult], kinds: dict[str, str], ids: CounterIds, inv: Inventory,
               maps: TagMaps, vcenter: str, state: PerfState | None,
               marks: dict[str, int] | None = None) -> list[Sample]:
    """Normalised samples; with a state, only samples newer than the marks (which advance). `marks`: the
    marks as they were when the query was planned (an entity answered in parts, or by two specs, is held to
    the same mark by each). The results of one entity become one sample per series and time."""
    out: list[Sample] = []
    by_moid: dict[str, list[EntityResult]] = {}
    for r in results:
        if r.stamps:
            by_moid.setdefault(r.moid, []).append(r)
    for moid, parts in by_moid.items():
        kind = kinds.get(moid)
        if kind is None:
            continue
        base, cpus = _entity_tags(kind, moid, inv, vcenter)
        if base is None:
            continue
        rows: dict[tuple[str, str], dict[int, dict]] = {}   # (measurement, instance) -> ts -> fields
        newest = max(max(r.stamps) for r in parts)
        mark = (marks if marks is not None else state.entity_start).get(moid, 0) if state is not None else 0
        whole, per_instance = ids.rows[kind]
        for r in parts:
            for key, inst, values in r.series:
                plan = (per_instance if inst else whole).get(key)
                if plan is None:
                    continue
                measurement, field, conversion = plan
                row_cpus = (1 if inst else cpus) if conversion == MS_PCT else 1
                by_ts = rows.setdefault((measurement, inst), {})
                raw_kind = conversion == RAW
                # each value of a first cycle's ten samples of every series of 10,000 VMs: no call, no dict made
                # for a time already seen
                for ts, interval, raw in zip(r.stamps, r.intervals, values, strict=False):
                    if ts <= mark or raw is None or raw < 0:  # -1 is vCenter's "no sample"
                        continue
                    fields = by_ts.get(ts)
                    if fields is None:
                        fields = by_ts[ts] = {}
                    fields[field] = raw if raw_kind else convert(conversion, raw, interval or REALTIME_S, row_cpus)
        if state is not None:
            state.entity_start[moid] = max(state.entity_start.get(moid, 0), mark, newest)
        if kind == "vm" and newest > mark:
            _quick_levels(rows.get(("vsphere_vm", ""), {}).get(newest), ids.quick["vm"], inv.vms[moid].quickstats)
        for (measurement, inst), by_ts in rows.items():
            # one tags dict per series, shared by its samples (nothing downstream changes a sample's tags):
            # an hour's catch-up is 180 samples of each
            tags = _row_tags(measurement, inst, base, moid, maps)
            for ts in sorted(by_ts) if len(parts) > 1 else by_ts:
                fields = by_ts[ts]
                if measurement == "vsphere_vm":
                    fields["vcpus"] = cpus
                out.append(Sample(measurement, tags, fields, ts * 1_000_000_000))
    return out


def _quick_levels(fields: dict | None, quick: tuple[tuple[str, str], ...], quickstats: dict[str, int]) -> None:
    """A VM's newest sample takes the levels a steady cycle did not ask vCenter's counters for from the
    quickStats the same cycle read (MB; a property left out is 0, as vsphere_vm_quickstats has it); a counter
    that answered keeps its own value, and a VM without quickStats gets none."""
    if fields is None or not quickstats:
        return
    for field, prop in quick:
        if field not in fields:
            fields[field] = quickstats.get(prop, 0) * 2**20


def _row_tags(measurement: str, inst: str, base: dict[str, str], moid: str, maps: TagMaps) -> dict[str, str]:
    if measurement in ("vsphere_vm", "vsphere_host"):
        return base
    tags = dict(base)
    if measurement == "vsphere_vm_net":
        tags["instance"] = inst
    elif measurement == "vsphere_vm_disk":
        tags["instance"] = inst
        ds, lun = maps.vm_disks.get(moid, {}).get(inst, ("", ""))
        if ds:
            tags["datastore"] = ds
        if lun:
            tags["lun"] = lun
    elif measurement == "vsphere_host_lun":
        tags["lun"] = inst  # the device's canonical name, as vCenter names a host's disk.* instances
        ds = maps.lun_ds.get(moid, {}).get(inst)
        if ds:
            tags["datastore"] = ds
    elif measurement == "vsphere_datastore":
        tags["datastore"] = maps.ds_by_uuid.get(inst, inst)
    return tags


def _entity_tags(kind: str, moid: str, inv: Inventory, vcenter: str) -> tuple[dict[str, str] | None, int]:
    if kind == "vm":
        vm = inv.vms.get(moid)
        if vm is None:
            return None, 1
        host = inv.hosts.get(vm.host)
        tags = {"vcenter": vcenter, "vm": vm.name}
        if host is not None:
            tags["host"] = host.name
            if host.cluster:
                tags["cluster"] = host.cluster
        return tags, vm.vcpus
    host = inv.hosts.get(moid)
    if host is None:
        return None, 1
    tags = {"vcenter": vcenter, "host": host.name}
    if host.cluster:
        tags["cluster"] = host.cluster
    return tags, host.threads
