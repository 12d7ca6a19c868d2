"""Who takes what a verdict says the VM lacks: for each contention an episode blames, the co-tenants of the
contended resource ranked by their share of it over the episode (docs/checks.md, "Culprits").

A resource is what the VM shares with others: its host's CPU and memory (the VMs that ran on that host
while the VM did), the datastores and LUNs behind its slow disks (every VM with a disk there, on any host),
the queue of a LUN on its host (the VMs of that host on the LUN, and the host's other LUNs behind the same
adapter), and its host's storage path (the host's VMs' I/O).
Each co-tenant's figure is its mean per 20 s bucket over the episode's buckets that hold the resource's
figures (one it has no sample in counts as none: a batch that began half way takes half the share), from what
is already collected: a VM's CPU usage and vCPUs (MHz with the host's clock), its consumed memory, its
virtual disks' IOPS and throughput, the host's per-LUN IOPS.

The blamed VM's own share is listed with its co-tenants; a VM alone on the resource has no culprit (the
resource is its own). Only the first few of each resource are kept.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from db2vtop.agent.core.model import Fact
from db2vtop.agent.core.source import Series, derive
from db2vtop.agent.core.units import format_bytes
from db2vtop.checks.topology import StackEntities, lun_name

#: the resource each cause contends for (the causes of the VM's own making have none: co-stop, its guest's queue)
RESOURCE_OF = {"ready": "cpu", "steal": "cpu", "host-swap": "memory", "balloon": "memory", "host-memory": "memory",
               "array": "datastore", "fabric": "path", "hypervisor-queue": "queue"}
#: co-tenants kept per resource (the blamed VM's own entry besides)
TOP = 5
MB = 1e6

Key = tuple[str | None, str]  # (vcenter, vm)
#: what the culprits read of each measurement (triage keeps these fields of what it gathers)
READS = {"vsphere_vm": ("cpu_usage_pct", "vcpus", "mem_consumed_bytes"),
         "vsphere_vm_quickstats": ("host_mem_usage_bytes",),
         "vsphere_vm_disk": ("read_iops", "write_iops", "read_bytes_per_s", "write_bytes_per_s"),
         "vsphere_host_lun": ("read_iops", "write_iops", "device_latency_ms", "kernel_latency_ms", "queue_latency_ms"),
         "esxtop_device": ("device_latency_ms", "kernel_latency_ms", "queued")}


@dataclass(frozen=True)
class Culprit:
    """One co-tenant's share of a contended resource over an episode: `value` in `unit` of `figure`."""

    vm: str | None  # None for a LUN behind the same adapter
    vcenter: str | None
    host: str | None
    resource: str  # what is contended: "CPU of esx01", "datastore ds01", "queue of naa.… on esx01", …
    share_pct: float
    figure: str
    value: float
    unit: str
    lun: str | None = None  # a LUN entry's LUN
    own: bool = False  # the blamed VM itself
    contended: str = ""  # the kind of resource (RESOURCE_OF's values)

    def to_json(self) -> dict[str, Any]:
        return {"vm": self.vm, "vcenter": self.vcenter, "host": self.host, "resource": self.resource,
                "share_pct": round(self.share_pct, 2), "figure": self.figure, "value": round(self.value, 1),
                "unit": self.unit, "lun": self.lun}

    @property
    def total(self) -> float:
        """The resource's whole (its capacity, or what all its tenants take) the share is of."""
        return self.value * 100 / self.share_pct if self.share_pct else 0.0


@dataclass(frozen=True)
class _Episode:
    """Where the stack's VM was in each bucket of an episode: host -> its buckets there."""

    ent: StackEntities
    lo: int  # the episode's first moment (ns)
    hi: int  # the end of its last bucket
    step: int
    on: dict[str, set[int]]
    t: Mapping[str, float]
    memo: dict | None = None  # the co-tenants' figures over a window, kept across the stacks of one judgement

    @property
    def buckets(self) -> range:
        return range(self.lo // self.step, -(-self.hi // self.step))

    def own(self, key: Key) -> bool:
        return key[1] == self.ent.vm and key[0] in (self.ent.vcenter, None)


def culprits(ent: StackEntities, kinds: Sequence[str], start: int, end: int, t: Mapping[str, float],
             step: int, memo: dict | None = None) -> list[Culprit]:
    """The co-tenants of every resource `kinds` (an episode's causes, its blamed one first) contend for, each
    resource's ranked by share, the resources in the causes' order. `memo`: kept across the verdicts of one
    judgement over data that does not change (a datastore's VMs, read once for the stacks it slows)."""
    if ent.vm is None:
        return []
    on: dict[str, set[int]] = defaultdict(set)
    for b in range(start // step, -(-end // step)):
        host = ent.host_at(b * step + step // 2)
        if host:
            on[host].add(b)
    ep = _Episode(ent, start, end, step, dict(on), t, memo)
    out: list[Culprit] = []
    done = set()
    for kind in kinds:
        what = RESOURCE_OF.get(kind)
        if what is not None and what not in done:
            done.add(what)
            out += [replace(c, contended=what) for c in _RESOURCES[what](ep)]
    return out


def tenants(ent: StackEntities, kinds: Iterable[str], hosts: Iterable[str]) -> set[str]:
    """The VMs whose figures the culprits of these causes read (their hosts' VMs, the VMs on the stack's
    datastores), as the host and datastore facts list them: what triage of one VM reads beside it."""
    wanted = {RESOURCE_OF[k] for k in kinds if k in RESOURCE_OF}
    out: set[str] = set()
    if wanted - {"datastore"}:
        hosts = set(hosts)
        out |= {str(vm) for f in ent.source.facts("vsphere_host") if f.tags.get("host") in hosts
                and f.tags.get("vcenter", ent.vcenter) == ent.vcenter for vm in f.data.get("vms") or ()}
    if "datastore" in wanted:
        stores = {d.datastore for d in ent.disks}
        out |= {str(vm) for f in ent.source.facts("vsphere_datastore") if f.tags.get("datastore") in stores
                and f.tags.get("vcenter", ent.vcenter) == ent.vcenter for vm in f.data.get("vms") or ()}
    return out - {ent.vm or ""}


def amount(value: float, unit: str) -> str:
    """A culprit's value as people read it: 59.9 GHz, 180.0GiB, 211.4 MB/s, 4,200 IOPS."""
    if unit == "MHz":
        return f"{value / 1000:.1f} GHz"
    if unit == "bytes":
        return format_bytes(value)
    if unit == "bytes/s":
        return f"{value / MB:,.1f} MB/s"
    return f"{value:,.0f} IOPS" if unit == "IOPS" else f"{value:.1f} {unit}"


def culprit_text(c: Mapping[str, Any]) -> str:
    """A culprit (as the JSON has it) as the texts list it: `etl-7 (esx12) 72.0 % of the datastore ds01,
    412.0 MB/s`."""
    who = c.get("vm") or c.get("lun") or "?"
    where = f" ({c['host']})" if c.get("vm") and c.get("host") and not str(c["resource"]).endswith(c["host"]) else ""
    return f"{who}{where} {c['share_pct']:.1f} % of the {c['resource']}, {amount(c['value'], c['unit'])}"


def clause(found: Sequence[Culprit]) -> str:
    """The first culprit as the verdict's conclusion names it: "etl-7 uses 59.9 of 83.2 GHz (72 %)"; the
    blamed VM itself, said so."""
    if not found:
        return ""
    c = found[0]
    who = f"{c.vm} itself" if c.own else c.vm or c.lun or "?"
    share = f"({c.share_pct:.0f} %)"
    if c.figure == "cpu_usage_mhz":
        what = f"{who} uses {c.value / 1000:.1f} of {c.total / 1000:.1f} GHz {share}"
    elif c.figure == "cpu_busy_vcpus":
        what = f"{who} keeps {c.value:.1f} vCPUs busy, {c.share_pct:.0f} % of what the host's VMs use"
    elif c.figure == "mem_consumed_bytes":
        what = f"{who} consumes {format_bytes(c.value)} of {format_bytes(c.total)} {share}"
    elif c.unit == "IOPS":
        what = f"{who} does {c.value:,.0f} of {c.total:,.0f} IOPS on the {c.resource} {share}"
    else:
        what = f"{who} moves {c.value / MB:,.1f} of {c.total / MB:,.1f} MB/s on the {c.resource} {share}"
    if c.host and not c.own and c.resource.startswith("datastore"):
        what = what.replace(f"{who} ", f"{who} on {c.host} ", 1)
    if c.own:
        what += ", more than any other VM there: its own load"
    return what


# --- reading the co-tenants ---------------------------------------------------------------------------------


def _vcenter_ok(s: Series, vcenter: str | None) -> bool:
    return not vcenter or s.tags.get("vcenter", vcenter) == vcenter


def _per_bucket(ep: _Episode, series: Series, fields: Sequence[str], buckets: set[int] | range,
                combine: Callable[[list[float]], float | None] = math.fsum) -> dict[int, float]:
    """bucket -> the mean in it of `combine` of the fields at each of the series' times (a time missing a field
    counts only if `combine` takes None)."""
    src = ep.ent.source
    at: dict[int, list[Any]] = {}
    for i, name in enumerate(fields):
        for ts, v in src.window(series.id, name, ep.lo, ep.hi - 1):
            if type(v) is int or type(v) is float:
                at.setdefault(ts, [None] * len(fields))[i] = v
    sums: dict[int, list[float]] = {}
    for ts, values in at.items():
        b = ts // ep.step
        if b in buckets:
            x = combine(values)
            if x is not None:
                sums.setdefault(b, []).append(x)
    return {b: math.fsum(xs) / len(xs) for b, xs in sums.items()}


def _each(values: list[float | None]) -> float | None:
    """The sum of a time's fields, None unless it has them all."""
    return None if None in values else math.fsum(values)  # type: ignore[arg-type]


def _over(ep: _Episode, groups: Mapping[Key, list[Series]], fields: Sequence[str], buckets: set[int] | range,
          combine: Callable[[list[float]], float | None] = _each) -> dict[Key, tuple[float, str | None]]:
    """Each co-tenant's figure over the episode: its series' per-bucket means summed across its series, then
    averaged over the buckets in which any co-tenant has one (a bucket nobody has a sample in, the source did
    not keep: a first cycle reaches back only for some fields), and its host then."""
    memo = ep.memo
    if memo is not None:
        at = (tuple(sorted(s.id for series in groups.values() for s in series)), tuple(fields), ep.lo, ep.hi,
              frozenset(buckets) if isinstance(buckets, set) else (buckets.start, buckets.stop), combine)
        hit = memo.get(at)
        if hit is None:
            hit = memo[at] = _over(replace(ep, memo=None), groups, fields, buckets, combine)
        return hit
    found: dict[Key, tuple[dict[int, float], str | None]] = {}
    seen: set[int] = set()
    for key, series in groups.items():
        per: dict[int, float] = defaultdict(float)
        host = None
        for s in series:
            means = _per_bucket(ep, s, fields, buckets, combine)
            for b, x in means.items():
                per[b] += x
            if means:
                host = s.tags.get("host") or host
        if per:
            found[key] = (per, host)
            seen.update(per)
    n = len(seen)
    return {key: (math.fsum(per.values()) / n, host) for key, (per, host) in found.items()} if n else {}


def _by_vm(series: Iterable[Series]) -> dict[Key, list[Series]]:
    out: dict[Key, list[Series]] = defaultdict(list)
    for s in series:
        if s.tags.get("vm"):
            out[(s.tags.get("vcenter"), s.tags["vm"])].append(s)
    return out


def _ranked(ep: _Episode, resource: str, figures: Mapping[Key, tuple[float, str | None]], figure: str, unit: str,
            whole: float | None = None) -> list[Culprit]:
    """Co-tenants by share of `whole` (the resource's capacity; else what they take together); none when the
    VM is alone on it or nothing is taken."""
    taken = math.fsum(v for v, _ in figures.values())
    whole = whole or taken
    if whole <= 0 or not any(v > 0 and not ep.own(k) for k, (v, _) in figures.items()):
        return []
    found = [Culprit(k[1], k[0], host, resource, v * 100 / whole, figure, v, unit, own=ep.own(k))
             for k, (v, host) in figures.items() if v > 0]
    found.sort(key=lambda c: (-c.value, c.own, c.vm or ""))  # a co-tenant before the VM itself on a tie
    return found[:TOP] + [c for c in found[TOP:] if c.own]


def _best(ep: _Episode, resource: str, iops: Mapping[Key, tuple[float, str | None]],
          moved: Mapping[Key, tuple[float, str | None]]) -> list[Culprit]:
    """I/O co-tenants by the larger of their shares of IOPS and of throughput: a flood of small writes and
    one of large ones both show."""
    by_iops, by_bytes = _ranked(ep, resource, iops, "iops", "IOPS"), _ranked(ep, resource, moved, "throughput",
                                                                             "bytes/s")
    best: dict[tuple[str | None, str | None], Culprit] = {}
    for c in [*by_iops, *by_bytes]:
        k = (c.vcenter, c.vm)
        if k not in best or c.share_pct > best[k].share_pct:
            best[k] = c
    found = sorted(best.values(), key=lambda c: (-c.share_pct, c.own, c.vm or ""))
    return found[:TOP] + [c for c in found[TOP:] if c.own]


def _host_fact(ep: _Episode, host: str) -> Fact | None:
    return next((f for f in ep.ent.source.facts("vsphere_host") if f.tags.get("host") == host
                 and f.tags.get("vcenter", ep.ent.vcenter) in (ep.ent.vcenter, None)), None)


def _host_data(ep: _Episode, host: str) -> dict[str, Any]:
    fact = _host_fact(ep, host)
    return fact.data if fact is not None else {}


def _number(v: Any) -> float:
    """A fact's positive number, else 0."""
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and v > 0 else 0.0


# --- each resource ------------------------------------------------------------------------------------------


def _hosts(ep: _Episode) -> list[tuple[str, set[int]]]:
    """The hosts the VM ran on in the episode, where it spent the most buckets first."""
    return sorted(ep.on.items(), key=lambda kv: (-len(kv[1]), kv[0]))


def _tenants(ep: _Episode, measurement: str, host: str) -> dict[Key, list[Series]]:
    return _by_vm(s for s in ep.ent.source.by_tag(measurement, "host").get(host, ()) if _vcenter_ok(s, ep.ent.vcenter))


def _busy_vcpus(values: list[float | None]) -> float | None:
    """A VM's vCPUs kept busy at a time: its usage % of them times their number."""
    usage, vcpus = values
    return None if usage is None or vcpus is None else usage * vcpus / 100


def _cpu(ep: _Episode) -> list[Culprit]:
    """The host's VMs by CPU used: usage % of their vCPUs, in MHz at the host's clock, of its cores' MHz."""
    out = []
    for host, buckets in _hosts(ep):
        data = _host_data(ep, host)
        mhz, cores = _number(data.get("cpu_mhz")), _number(data.get("cpu_cores"))
        busy = _over(ep, _tenants(ep, "vsphere_vm", host), ("cpu_usage_pct", "vcpus"), buckets, _busy_vcpus)
        if mhz and cores:
            out += _ranked(ep, f"CPU of {host}", {k: (v * mhz, h) for k, (v, h) in busy.items()}, "cpu_usage_mhz",
                           "MHz", mhz * cores)
        else:
            out += _ranked(ep, f"CPU of {host}", busy, "cpu_busy_vcpus", "vCPUs")
    return out


def _memory(ep: _Episode) -> list[Culprit]:
    """The host's VMs by consumed memory (the counter, else quickStats), of the host's memory."""
    out = []
    for host, buckets in _hosts(ep):
        used = _over(ep, _tenants(ep, "vsphere_vm", host), ("mem_consumed_bytes",), buckets)
        if not used:
            used = _over(ep, _tenants(ep, "vsphere_vm_quickstats", host), ("host_mem_usage_bytes",), buckets)
        data = _host_data(ep, host)
        out += _ranked(ep, f"memory of {host}", used, "mem_consumed_bytes", "bytes",
                       _number(data.get("memory_bytes")) or None)
    return out


_IOPS, _BYTES = ("read_iops", "write_iops"), ("read_bytes_per_s", "write_bytes_per_s")


def _disks_on(ep: _Episode, datastore: str, luns: set[str]) -> list[Series]:
    """Every VM disk on the datastore (of the stack's vCenter) or on one of the LUNs (of any vCenter)."""
    src = ep.ent.source
    found = {s.id: s for s in src.by_tag("vsphere_vm_disk", "datastore").get(datastore, ())
             if _vcenter_ok(s, ep.ent.vcenter)} if datastore else {}
    by_lun = _disk_luns(ep)
    for lun in luns:
        found.update((s.id, s) for s in by_lun.get(lun, ()))
    return list(found.values())


def _disk_luns(ep: _Episode) -> dict[str, list[Series]]:
    """VM disk series by each LUN behind them (their `lun` tag lists them), indexed once per series listing."""
    index = ep.ent.source.by_tag("vsphere_vm_disk", "lun")

    def build() -> dict[str, list[Series]]:
        out: dict[str, list[Series]] = defaultdict(list)
        for value, series in index.items():
            for lun in value.split(","):
                if lun:
                    out[lun_name(lun)].extend(series)
        return dict(out)

    return derive(ep.ent.source, "culprit-disk-luns", (index,), build)


def _lun_means(ep: _Episode, measurement: str, fields: Sequence[str]) -> dict[str, float]:
    """The stack's LUNs on its hosts: LUN -> the worst of `fields` (each one's mean over the episode)."""
    out: dict[str, float] = {}
    for s in ep.ent.select("lun", measurement):
        lun = ep.ent.lun_of(s.tags)
        buckets = ep.on.get(s.tags.get("host", ""), set())
        for name in fields:
            found = _per_bucket(ep, s, (name,), buckets)
            if found:
                out[lun] = max(out.get(lun, 0.0), math.fsum(found.values()) / len(found))
    return out


def _slow_luns(ep: _Episode, levels: Sequence[tuple[str, str, str]]) -> set[str]:
    """The stack's LUNs whose figure reaches its level over the episode ((measurement, field, level key))."""
    slow: set[str] = set()
    for measurement, name, level in levels:
        slow |= {lun for lun, v in _lun_means(ep, measurement, (name,)).items() if v >= ep.t[level]}
    return slow


def _datastore(ep: _Episode) -> list[Culprit]:
    """Every VM with a disk on the datastore (or LUN) behind the slow device, on any host, by its share of the
    I/O there."""
    ent = ep.ent
    slow = _slow_luns(ep, (("vsphere_host_lun", "device_latency_ms", "slow_ms"),
                           ("esxtop_device", "device_latency_ms", "slow_ms"))) or set(ent.luns)
    stores: dict[str, set[str]] = defaultdict(set)
    for d in ent.disks:
        hit = set(d.luns) & slow
        if hit or not slow:
            stores[d.datastore].update(hit)
    for lun in slow - {x for luns in stores.values() for x in luns}:
        stores[ent.luns.get(lun, "")].add(lun)
    out = []
    for datastore, luns in sorted(stores.items()):
        groups = _by_vm(_disks_on(ep, datastore, luns))
        resource = f"datastore {datastore}" if datastore else f"LUN {', '.join(sorted(luns))}"
        out += _best(ep, resource, _over(ep, groups, _IOPS, ep.buckets), _over(ep, groups, _BYTES, ep.buckets))
    return out


def _path(ep: _Episode) -> list[Culprit]:
    """The host's VMs by their I/O over the host's storage path (its adapters and the fabric behind them)."""
    out = []
    for host, buckets in _hosts(ep):
        groups = _tenants(ep, "vsphere_vm_disk", host)
        out += _best(ep, f"storage path of {host}", _over(ep, groups, _IOPS, buckets),
                     _over(ep, groups, _BYTES, buckets))
    return out


def _adapters(fact: Fact | None) -> dict[str, set[str]]:
    """LUN -> the adapters of its paths (`vmhba1` of `vmhba1:C0:T0:L1`), from the host's fact."""
    out: dict[str, set[str]] = {}
    for lun in (fact.data.get("luns") or ()) if fact is not None else ():
        names = {str(p.get("name") or "").split(":", 1)[0] for p in lun.get("paths") or () if isinstance(p, dict)}
        if lun.get("lun"):
            out[lun_name(str(lun["lun"]))] = {n for n in names if n}
    return out


def _queue(ep: _Episode) -> list[Culprit]:
    """Per queued LUN of a host: the host's VMs on that LUN by IOPS, then the host's LUNs behind the same
    adapters by IOPS (their queues share the adapter's)."""
    ent = ep.ent
    queued = _slow_luns(ep, (("vsphere_host_lun", "kernel_latency_ms", "kavg_ms"),
                             ("vsphere_host_lun", "queue_latency_ms", "qavg_ms"),
                             ("esxtop_device", "kernel_latency_ms", "kavg_ms"),
                             ("esxtop_device", "queued", "esx_qued"))) or set(ent.luns)
    out = []
    for host, buckets in _hosts(ep):
        adapters = _adapters(_host_fact(ep, host))
        for lun in sorted(queued):
            on_host = [s for s in _disks_on(ep, ent.luns.get(lun, ""), {lun}) if s.tags.get("host") == host]
            groups = _by_vm(on_host)
            out += _ranked(ep, f"queue of {lun} on {host}", _over(ep, groups, _IOPS, buckets), "iops", "IOPS")
            shared = {other for other, names in adapters.items() if names & adapters.get(lun, set())}
            if len(shared) < 2:
                continue
            luns = {ent.lun_of(s.tags): [s] for s in ent.source.by_tag("vsphere_host_lun", "host").get(host, ())
                    if _vcenter_ok(s, ent.vcenter) and ent.lun_of(s.tags) in shared}
            load = _over(ep, {(None, lun_id): series for lun_id, series in luns.items()}, _IOPS, buckets)
            adapter = "/".join(sorted(adapters[lun]))
            out += [Culprit(None, ent.vcenter, host, c.resource, c.share_pct, "iops", c.value, "IOPS", lun=c.vm)
                    for c in _ranked(ep, f"adapter {adapter} of {host}", load, "iops", "IOPS")]
    return out


_RESOURCES: dict[str, Callable[[_Episode], list[Culprit]]] = {
    "cpu": _cpu, "memory": _memory, "datastore": _datastore, "path": _path, "queue": _queue}
